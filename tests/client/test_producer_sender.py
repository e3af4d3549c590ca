"""The producer's sender against a real cluster: send() only buffers, the sender drains
(at once for a send_and_wait whose batch can go alone, else in a pass), a request slot
held back keeps later records batching, awaiting a record can be cancelled without
touching its batch, and the sender's timer expires what lingers past delivery.timeout.ms."""
import asyncio
import itertools

import pytest

from minibroker.client import Admin, Consumer, ErrorCode, KafkaError, Producer
from minibroker.client.accumulator import ProducerBatch
from minibroker.testing.cluster import wait_for
from minibroker.testing.fixtures import shared_cluster  # noqa: F401

pytestmark = pytest.mark.cluster
_names = itertools.count()


async def new_topic(cluster):
    name = f"sender{next(_names)}"
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic(name, 1, 3, {"min.insync.replicas": "2"})
    return name


async def read_all(cluster, topic, n):
    out: list = []

    async def poll_into(c):
        out.extend(await c.poll(timeout_ms=200))
        return len(out) >= n
    async with Consumer(cluster.bootstrap, {"auto.offset.reset": "earliest"}) as c:
        await c.assign_topic(topic)
        await wait_for(lambda: poll_into(c), timeout_s=30, interval_s=0, what=f"{n} records")
    return out


async def test_send_only_buffers_the_record_and_the_sender_sends_it(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap, {"linger.ms": "0"}) as p:
        await p.send_and_wait(topic, b"first")            # producer id and connection in place
        fut = await p.send(topic, b"second")
        assert not fut.done() and p.acc.queued_count == 1 and not p._incomplete
        assert (await fut).offset == 1
        assert p.acc.queued_count == 0 and p.acc.buffered_bytes == 0


async def test_send_and_wait_from_many_tasks_batches_behind_the_request_in_flight(shared_cluster):
    topic = await new_topic(shared_cluster)
    batches: list[int] = []
    async with Producer(shared_cluster.bootstrap, {"linger.ms": "0",
                                                   "max.in.flight.requests.per.connection": "1"}) as p:
        await p.send_and_wait(topic, b"warm")
        p.on_batch_done = lambda b, base, err: batches.append(len(b))
        metas = await asyncio.gather(*(p.send_and_wait(topic, b"v%d" % i) for i in range(40)))
    assert sorted(m.offset for m in metas) == list(range(1, 41))
    assert sum(batches) == 40 and len(batches) < 40          # the first went alone, the rest waited together
    recs = await read_all(shared_cluster, topic, 41)
    by_offset = {m.offset: b"v%d" % i for i, m in enumerate(metas)}
    assert [r.value for r in recs[1:]] == [by_offset[r.offset] for r in recs[1:]]


async def test_cancelling_a_task_awaiting_a_record_leaves_its_batch_alone(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap, {"linger.ms": "300"}) as p:
        f1 = await p.send(topic, b"a")
        f2 = await p.send(topic, b"b")
        assert f1._batch is f2._batch
        t1 = asyncio.ensure_future(_await(f1))
        t2 = asyncio.ensure_future(_await(f2))
        for _ in range(100):                      # both tasks park on the batch in their first step
            if f1._batch.parked is not None and len(f1._batch.parked) == 2:
                break
            await asyncio.sleep(0)
        assert len(f1._batch.parked) == 2
        t1.cancel()
        md = await t2
        with pytest.raises(asyncio.CancelledError):
            await t1
        assert f1.done() and (await f1).offset == md.offset - 1


async def _await(fut):
    return await fut


async def test_a_batch_lingering_past_delivery_timeout_expires_on_the_senders_timer(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap, {"linger.ms": "600000", "delivery.timeout.ms": "200"}) as p:
        await p.partitions_for(topic)
        fut = await p.send(topic, b"never sent")
        with pytest.raises(KafkaError) as err:
            await fut
        assert err.value.code == ErrorCode.REQUEST_TIMED_OUT and "expiring 1 record" in str(err.value)


async def test_close_leaves_no_pass_or_timer_behind(shared_cluster):
    topic = await new_topic(shared_cluster)
    done: list[ProducerBatch] = []
    p = Producer(shared_cluster.bootstrap, {"linger.ms": "50"})
    async with p:
        p.on_batch_done = lambda b, base, err: done.append(b)
        await p.send(topic, b"x")
        assert p._pass_handle is not None or p._timer is not None
    assert p._pass_handle is None and p._timer is None and p._pid_task is None
    assert len(done) == 1 and done[0].outcome[1] is None       # close flushed it first


async def test_a_record_future_answers_done_result_exception_and_callbacks(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap, {"linger.ms": "100"}) as p:
        fut = await p.send(topic, b"x")
        assert not fut.done()
        with pytest.raises(asyncio.InvalidStateError):
            fut.result()
        with pytest.raises(asyncio.InvalidStateError):
            fut.exception()
        called: list = []
        fut.add_done_callback(called.append)
        flushed = asyncio.ensure_future(p.flush())
        md = await fut
        await flushed
        assert fut.done() and fut.exception() is None and fut.result() == md and md.offset == 0
        late = asyncio.get_running_loop().create_future()
        fut.add_done_callback(late.set_result)          # already done: called in a later turn
        assert await late is fut
        assert called == [fut]


async def test_a_cancelled_send_and_wait_still_delivers_its_record(shared_cluster):
    topic = await new_topic(shared_cluster)
    async with Producer(shared_cluster.bootstrap, {"linger.ms": "60000"}) as p:
        await p.partitions_for(topic)
        waiting = asyncio.ensure_future(p.send_and_wait(topic, b"kept"))
        for _ in range(100):                      # appended, then parked on its lingering batch
            if p.acc.queued_count:
                break
            await asyncio.sleep(0)
        (batch,) = p.acc.queued()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await p.flush()
        assert batch.outcome is not None and batch.outcome[:2] == (0, None)
    (rec,) = await read_all(shared_cluster, topic, 1)
    assert rec.value == b"kept"
