"""The idempotent producer on real processes (issue 12 item 3): a batch whose
answer never reaches the producer is retried with the same producer id,
epoch and sequence, and the partition stores it once, whether the retry
goes to the same leader (answer lost to a time-out) or to a new leader that
replicated the batch before the old one died.

The leader's acks=all answer is held with the fault proxy: the followers'
fetch requests are held, so the leader never learns that they have the batch
(the fetch they had parked at the leader may still bring it to them), its HW
stays put, and the produce cannot be answered."""
from __future__ import annotations

import pytest

from minibroker.client.producer import Producer
from minibroker.protocol.api import ApiKey
from minibroker.records import build_batch

from .rig import Rig, cut_pairs, make_cluster, read_values, uncut_pairs, until

pytestmark = pytest.mark.cluster

N = 5


def idempotent_producer(bootstrap: str, **cfg: str) -> Producer:
    base = {"linger.ms": "50", "request.timeout.ms": "1500", "delivery.timeout.ms": "60000",
            "retry.backoff.ms": "100", "reconnect.backoff.max.ms": "200", "metadata.max.age.ms": "1000",
            "socket.connection.setup.timeout.ms": "1000"}
    base.update(cfg)
    return Producer(bootstrap, base)


async def _followers_have(rig: Rig, brokers: list[int], leo: int) -> bool:
    for b in brokers:
        if (await rig.status_of(b))[0]["leo"] < leo:
            return False
    return True


async def _send_batch(p: Producer) -> list:
    futs = [await p.send("t", f"v{i}".encode(), partition=0) for i in range(N)]
    p._wakeup()
    return futs


async def test_a_batch_retried_after_a_lost_answer_is_stored_once(cluster_factory):
    c = make_cluster(cluster_factory, **{"replica.lag.time.max.ms": "20000"})
    async with Rig(c, partitions=1) as rig:
        await rig.create_topic([[1, 2, 3]])
        retries: list[str] = []
        async with idempotent_producer(c.bootstrap) as p:
            assert p.idempotent
            p.on_retry = lambda b, e: retries.append(e.name)
            c.hold(2, 1, "requests")
            c.hold(3, 1, "requests")
            futs = await _send_batch(p)
            await until(lambda: retries, "the producer retried the unanswered batch")
            c.release(2, 1)
            c.release(3, 1)
            offsets = [(await f).offset for f in futs]
        values = await read_values(c.bootstrap, "t")
    assert offsets == list(range(N))
    assert values == [(i, f"v{i}") for i in range(N)], values
    assert "REQUEST_TIMED_OUT" in retries


async def test_a_batch_retried_on_a_new_leader_that_replicated_it_is_stored_once(cluster_factory):
    """Follower 3 is cut from leader 1 but stays in the ISR (lag 20 s), so the HW cannot
    cover the batch follower 2 replicated and the acks=all answer is never sent. Leader 1
    is killed; 2 (first live ISR member in replica order) leads and gets the retry."""
    c = make_cluster(cluster_factory, **{"replica.lag.time.max.ms": "20000", "min.insync.replicas": "1"})
    async with Rig(c, partitions=1) as rig:
        await rig.create_topic([[1, 2, 3]])
        retries: list[str] = []
        async with idempotent_producer(c.bootstrap, **{"request.timeout.ms": "20000"}) as p:
            p.on_retry = lambda b, e: retries.append(e.name)
            cut_pairs(c, [(3, 1)])
            futs = await _send_batch(p)
            await until(lambda: _followers_have(rig, [2], N), "follower 2 holds the batch")
            assert not any(f.done() for f in futs)        # the leader could not answer acks=all
            c.kill(1)
            uncut_pairs(c, [(3, 1)])
            offsets = [(await f).offset for f in futs]
            new_leader = await rig.leader(0)
        assert retries, "the batch was never retried"
        values = await read_values(c.bootstrap, "t")
    assert new_leader == 2
    assert offsets == list(range(N))
    assert values == [(i, f"v{i}") for i in range(N)], values


async def test_verify_with_the_idempotent_producer_through_leader_kills_and_bounces_reports_no_duplicates(
        cluster_factory):
    """The verification run with enable.idempotence=true and retries: two leader kills
    (each followed by a restart) under load; the checker must find duplicated=0."""
    c = make_cluster(cluster_factory)
    async with Rig(c, partitions=3) as rig:
        await rig.create_topic()
        wl = await rig.start_load(producer={"enable.idempotence": "true", "delivery.timeout.ms": "30000"})
        assert wl.producer.idempotent
        await rig.progress(50)
        for _ in range(2):
            leader = await rig.leader(0)
            rig.kill(leader)
            await rig.wait_leader_not(leader)
            await rig.progress(50)
            rig.start(leader)
            await rig.wait_running([leader])
            await rig.wait_isr_full()
            await rig.progress(50)
        rep = await rig.finish()
    text = "\n".join(rep.lines(limit=20))
    assert rep.idempotent and "idempotence=on" in text, text
    assert rep.ok and not rep.duplicated and rep.acked >= 150, text


async def test_a_restarted_leader_recovers_producer_state_from_its_snapshot_and_still_dedups(cluster_factory):
    """Clean shutdown writes the partition's producer-state snapshot; after the
    restart the broker leads again and answers a resent batch as a duplicate."""
    from minibroker.storage.producer_snapshot import read_snapshot
    from minibroker.verify.replicas import ReplicaDirs

    c = make_cluster(cluster_factory, **{"min.insync.replicas": "1"})
    async with Rig(c, partitions=1) as rig:
        await rig.create_topic([[1, 2, 3]])
        async with idempotent_producer(c.bootstrap) as p:
            offsets = [(await f).offset for f in await _send_batch(p)]
            pid = p._producer_id
        assert offsets == list(range(N))
        await until(lambda: _followers_have(rig, [2, 3], N), "followers hold the batch")
        for b in (2, 3, 1):
            rig.stop(b)
        snap = read_snapshot(ReplicaDirs.of_local_cluster(c.data_dir).partition_dir(1, "t", 0))
        assert snap is not None and [e[0] for e in snap["producers"]] == [pid], snap
        for b in (1, 2, 3):
            rig.start(b)
        await rig.wait_running()
        await rig.wait_isr_full()
        leader = await rig.leader(0)
        resend = build_batch([f"v{i}".encode() for i in range(N)], producer_id=pid, producer_epoch=0,
                             base_sequence=0)
        async with idempotent_producer(c.bootstrap) as p:
            await p.partitions_for("t")
            resp = await p.net.request(leader, ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 10_000, "topics": [
                {"topic": "t", "partitions": [{"partition": 0, "records": resend}]}]})
        entry = resp["topics"][0]["partitions"][0]
        assert (entry["error"], entry["base_offset"]) == (0, 0), entry
        assert (await rig.status_of(leader))[0]["leo"] == N
