"""The client library under broker faults, against real processes (one cluster per test)."""
import asyncio

import pytest

from minibroker.client import Admin, Consumer, ErrorCode, KafkaError, Producer, TopicPartition
from minibroker.testing.cluster import wait_for
from minibroker.testing.fixtures import cluster, cluster_factory  # noqa: F401

pytestmark = pytest.mark.cluster
TP = TopicPartition("orders", 0)


async def describe(cluster, topic="orders", via=None):
    bootstrap = cluster.bootstrap if via is None else cluster.broker_address(via)
    async with Admin(bootstrap, {"request.timeout.ms": "2000"}) as admin:
        (td,) = await admin.describe_topics([topic])
        return td.partitions[0]


async def create(cluster, assignments=((1, 2, 3),), min_isr="2"):
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic("orders", assignments=[list(a) for a in assignments],
                                 configs={"min.insync.replicas": min_isr})


async def test_producer_rides_through_a_leader_kill_and_loses_no_acked_record(cluster):
    await create(cluster)
    acked: list[tuple[int, bytes]] = []
    retried = []
    async with Producer(cluster.bootstrap, {"acks": "all", "linger.ms": 1, "request.timeout.ms": 3000,
                                            "delivery.timeout.ms": 60000,
                                            "max.in.flight.requests.per.connection": 1}) as p:
        p.on_retry = lambda batch, err: retried.append(err.name)
        for i in range(200):
            acked.append(((await p.send_and_wait("orders", b"%d" % i)).offset, b"%d" % i))
        cluster.kill(1)
        for i in range(200, 400):
            acked.append(((await p.send_and_wait("orders", b"%d" % i)).offset, b"%d" % i))
    pd = await describe(cluster)
    assert pd.leader in (2, 3) and pd.leader_epoch >= 1
    # Nothing was in flight at the kill: as Kafka's, the producer holds the next batch while broker 1
    # refuses connections (it drains only for a connected broker) and sends it to the new leader, so
    # nothing needs a retry; anything it did retry is a retriable error.
    assert set(retried) <= {"NETWORK_EXCEPTION", "NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"}, retried
    async with Consumer(cluster.bootstrap, {"auto.offset.reset": "earliest"}) as c:
        c.assign([TP])
        got = {}
        async def more():
            for r in await c.poll(timeout_ms=200):
                got[r.offset] = r.value
            return len(got) >= len(acked)
        await wait_for(more, timeout_s=30, interval_s=0)
    for offset, value in acked:
        assert got[offset] == value


async def test_two_followers_down_make_acks_all_fail_with_not_enough_replicas(cluster):
    await create(cluster)
    cluster.kill(2)
    cluster.kill(3)
    await wait_for(lambda: _isr_is(cluster, (1,)), timeout_s=30, what="ISR shrink to [1]")
    async with Producer(cluster.bootstrap, {"acks": "all", "retries": 0}) as p:
        with pytest.raises(KafkaError) as ei:
            await p.send_and_wait("orders", b"x")
        assert ei.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert ei.value.retriable                    # retriable, but we asked for no retries
    async with Producer(cluster.bootstrap, {"acks": "1"}) as p:
        assert (await p.send_and_wait("orders", b"y")).offset == 0


async def _isr_is(cluster, isr):
    return (await describe(cluster)).isr == isr


async def _isr_set_is(cluster, isr):
    """Every broker's metadata shows this ISR (in any order)."""
    for b in cluster.broker_ids:
        if set((await describe(cluster, via=b)).isr) != isr:
            return False
    return True


async def test_isolated_follower_leaves_the_isr_and_rejoins_after_heal(cluster):
    await create(cluster)
    cluster.isolate(3)
    await wait_for(lambda: _isr_is(cluster, (1, 2)), timeout_s=30, what="broker 3 out of the ISR")
    async with Producer(cluster.bootstrap, {"acks": "all"}) as p:
        assert (await p.send_and_wait("orders", b"during")).offset == 0
    cluster.heal(3)
    await wait_for(lambda: _isr_is(cluster, (1, 2, 3)), timeout_s=30, what="broker 3 back in the ISR")


async def test_consumer_follows_a_new_leader_after_the_old_one_is_killed(cluster):
    await create(cluster)
    async with Producer(cluster.bootstrap, {"acks": "all"}) as p:
        for i in range(10):
            await p.send("orders", b"%d" % i)
        await p.flush()
    async with Consumer(cluster.bootstrap, {"auto.offset.reset": "earliest", "request.timeout.ms": 3000}) as c:
        c.assign([TP])
        got = []
        async def until(n):
            got.extend(await c.poll(timeout_ms=200))
            return len(got) >= n
        await wait_for(lambda: until(10), timeout_s=20, interval_s=0)
        cluster.kill(1)
        async with Producer(cluster.bootstrap, {"acks": "all", "request.timeout.ms": 3000}) as p:
            for i in range(10, 20):
                await p.send_and_wait("orders", b"%d" % i)
        await wait_for(lambda: until(20), timeout_s=30, interval_s=0)
        assert [r.value for r in got] == [b"%d" % i for i in range(20)]
        assert c.fetched_from(TP) in (2, 3)


async def test_paused_leader_is_replaced_and_resumes_as_follower(cluster):
    await create(cluster)
    cluster.pause(1)
    await wait_for(lambda: _leader_in(cluster, (2, 3)), timeout_s=30, what="a new leader")
    failover_epoch = (await describe(cluster)).leader_epoch
    cluster.resume(1)

    async def rejoined():
        pd = await describe(cluster)
        # Only a view at the failover's epoch or later counts: until broker 1 has caught up with the metadata
        # log it answers from its metadata of before the pause (leader 1, epoch 0), as a Kafka broker would.
        return pd if set(pd.isr) == {1, 2, 3} and pd.leader_epoch >= failover_epoch else None
    pd = await wait_for(rejoined, timeout_s=30, what="broker 1 back in the ISR")
    # Broker 1 came back as a follower; if it leads now, a later election (the controller's automatic
    # rebalance to the preferred replica, which a slow machine gives time to run) made it so, at a higher epoch.
    assert pd.leader in (2, 3) or pd.leader_epoch > failover_epoch, pd


async def _leader_in(cluster, ids):
    return (await describe(cluster)).leader in ids


async def test_restarted_broker_runs_again_with_the_same_config(cluster):
    await create(cluster)
    cluster.restart(2)
    cluster.wait_running_sync(60, [2])
    # controlled shutdown took 2 out of the ISR; it rejoins at the end, as Kafka keeps the ISR
    await wait_for(lambda: _isr_is(cluster, (1, 3, 2)), timeout_s=30, what="broker 2 back in the ISR")


async def test_producer_moves_to_the_new_leader_when_the_old_one_is_isolated(cluster):
    await create(cluster)
    async with Producer(cluster.bootstrap, {"acks": "all", "request.timeout.ms": 2000,
                                            "delivery.timeout.ms": 60000}) as p:
        assert (await p.send_and_wait("orders", b"before")).offset == 0
        cluster.isolate(1)                      # clients still reach broker 1; its cluster does not
        md = await p.send_and_wait("orders", b"after")
        assert md.offset >= 1
    pd = await describe(cluster, via=2)       # broker 1's own metadata is stale: it cannot hear the controller
    assert pd.leader in (2, 3) and 1 not in pd.isr


async def test_offset_beyond_the_follower_sends_the_consumer_back_to_the_leader_keeping_its_position(cluster):
    """FF4: a preferred read replica that is behind answers OFFSET_OUT_OF_RANGE; the
    consumer drops it and asks the leader at the same offset, with no reset."""
    await create(cluster)
    async with Producer(cluster.bootstrap, {"acks": "all"}) as p:
        for i in range(10):
            await p.send("orders", b"%d" % i)
        await p.flush()
    notes: list[str] = []
    async with Consumer(cluster.bootstrap, {"client.rack": "zone-b", "auto.offset.reset": "earliest"}) as c:
        c.on_note = notes.append
        c.assign([TP])
        got = []

        async def until(n):
            got.extend(await c.poll(timeout_ms=200))
            return len(got) >= n
        await wait_for(lambda: until(10), timeout_s=20, interval_s=0)
        assert c.fetched_from(TP) == 2                  # served by the zone-b follower
        cluster.block(2, 1)                             # broker 2 can no longer fetch from leader 1
        async with Producer(cluster.bootstrap, {"acks": "all"}) as p:
            for i in range(10, 20):                     # acked once the leader drops 2 from the ISR
                await p.send("orders", b"%d" % i)       # (an idle partition never shrinks: LEOs equal)
            await p.flush()
        # The leader committed the shrink; other brokers learn it from the metadata log a moment later.
        await wait_for(lambda: _isr_set_is(cluster, {1, 3}), timeout_s=20, what="every broker's ISR {1, 3}")
        c.seek(TP, 15)                                  # above broker 2's log end (10), below the leader's HW (20)
        got.clear()
        await wait_for(lambda: until(5), timeout_s=20, interval_s=0)
        assert [r.offset for r in got] == [15, 16, 17, 18, 19]
        assert c.fetched_from(TP) == 1 and c.preferred_replica(TP) is None
        assert any("OFFSET_OUT_OF_RANGE from preferred replica 2 at offset 15" in n and "position kept" in n
                   for n in notes), notes
        assert not any("resetting" in n for n in notes)
