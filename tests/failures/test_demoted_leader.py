"""Regression tests for issue 9's livelock, on real processes: a broker that
became leader in epoch E but appended nothing keeps the epoch-cache entry
(E, LEO); as a follower of the next leader it must drop that entry (Kafka's
UnifiedLog.truncateTo at or above the LEO still calls truncateFromEnd(LEO),
E4) instead of asking again forever after "diverging epoch 0 ending at 5".

No network faults: leadership moves in which nothing is written. After the
preferred election, within a few lag periods (lag 2 s here), the ISR is full
and every replica's LEO is equal; the stale entry's removal is a
`truncation` event on the demoted leader.
"""
from __future__ import annotations

import pytest

from minibroker.client.types import TopicPartition

from .rig import Rig, make_cluster, outcomes, producer, until

pytestmark = pytest.mark.cluster

# Well past the session timeout plus a few lag periods (2 s each); a deadline, not a sleep.
CONVERGE_S = 20.0
# After an election the new leader knows it before every broker's metadata says so: a producer that
# asked a broker still naming the old leader meets NOT_LEADER_OR_FOLLOWER and, as any Kafka producer,
# refreshes its metadata and retries (the rig's producer otherwise has retries=0).
AFTER_ELECTION = {"retries": "5"}


async def _status(rig: Rig, broker: int) -> dict:
    return (await rig.status_of(broker))[0]


async def _leader_is(rig: Rig, broker: int, epoch: int | None = None) -> dict:
    async def cond() -> dict | None:
        st = await _status(rig, broker)
        ok = st["role"] == "leader" and (epoch is None or st["leader_epoch"] == epoch)
        return st if ok else None
    return await until(cond, f"broker {broker} leads" + ("" if epoch is None else f" in epoch {epoch}"))


async def _converged(rig: Rig, brokers: list[int], timeout_s: float = CONVERGE_S) -> dict[int, dict]:
    """Until the leader's ISR is full and every replica's LEO equals the leader's."""
    async def cond() -> dict[int, dict] | None:
        sts = {b: await _status(rig, b) for b in brokers}
        lead = [s for s in sts.values() if s["role"] == "leader"]
        if len(lead) != 1 or sorted(lead[0]["isr"]) != sorted(brokers):
            return None
        return sts if all(s["leo"] == lead[0]["leo"] for s in sts.values()) else None
    return await until(cond, f"ISR {brokers} full with equal LEOs", timeout_s)


async def _produce(bootstrap: str, topic: str, n: int, acks: str = "all", first: int = 0, **cfg: str) -> list[int]:
    async with producer(bootstrap, acks=acks, **cfg) as p:
        futs = [await p.send(topic, f"v{i}".encode(), partition=0) for i in range(first, first + n)]
        out = await outcomes(futs)
    assert all(e is None for _, e in out), out
    return [o for o, _ in out]


async def _stale_entries_dropped(rig: Rig, broker: int, epoch: int) -> list[dict]:
    resp = await rig.admin.events(rig.c.broker_address(broker), 0, 0, 10000)
    return [e for e in resp.get("events", ())
            if e.get("kind") == "truncation" and
            any(entry[0] == epoch for entry in e.get("epoch_entries_removed") or ())]


async def test_a_leader_that_wrote_nothing_in_its_epoch_rejoins_after_a_preferred_election(cluster_factory):
    """The issue's sequence: assignment 1:3:2, 5 records, kill 1 (3 leads epoch 1 and writes
    nothing), restart 1 (ISR back to 1,3,2), preferred election (1 leads epoch 2). Broker 3
    holds (1, 5) in its epoch cache; it must drop it and rejoin, not loop on epoch 0's end."""
    c = make_cluster(cluster_factory, **{"auto.leader.rebalance.enable": "false"})
    tp = TopicPartition("t", 0)
    async with Rig(c, "t", 1) as rig:
        await rig.create_topic([[1, 3, 2]])
        assert await _produce(c.bootstrap, "t", 5) == [0, 1, 2, 3, 4]
        rig.kill(1)
        await _leader_is(rig, 3, epoch=1)
        rig.start(1)
        await rig.wait_running()
        await rig.wait_isr_full()
        res = await rig.admin.elect_leaders("preferred", [tp])
        assert res[tp] is None, res
        await _leader_is(rig, 1, epoch=2)
        # Replication works in the new epoch, through every replica (a looping follower stays at 5).
        assert await _produce(c.bootstrap, "t", 3, first=5, **AFTER_ELECTION) == [5, 6, 7]
        sts = await _converged(rig, [1, 2, 3])
        assert {s["leo"] for s in sts.values()} == {8}
        assert await _stale_entries_dropped(rig, 3, 1), "broker 3 never dropped its epoch-1 entry"


async def test_the_readme_fault_sequence_ends_with_a_full_isr_after_the_preferred_election(cluster_factory):
    """The README's tour: replicas 1,2,3 (1 leads). Pause follower 3, write with acks=1, kill
    follower 2, resume 3 and restart 2, write acks=all, kill leader 1 (2 leads, writes
    nothing), restart 1, preferred election (1 leads again). Every replica rejoins."""
    c = make_cluster(cluster_factory, **{"auto.leader.rebalance.enable": "false"})
    tp = TopicPartition("orders", 0)
    async with Rig(c, "orders", 1) as rig:
        await rig.create_topic([[1, 2, 3]])
        assert await _produce(c.bootstrap, "orders", 8) == list(range(8))
        rig.pause(3)
        assert await _produce(c.bootstrap, "orders", 4, acks="1", first=8) == [8, 9, 10, 11]
        await rig.wait_out_of_isr(3)
        rig.kill(2)
        await rig.wait_out_of_isr(2)
        rig.resume(3)
        rig.start(2)
        await rig.wait_running()
        await rig.wait_isr_full()
        assert await _produce(c.bootstrap, "orders", 1, first=12) == [12]
        before = (await _status(rig, 1))["leader_epoch"]
        rig.kill(1)
        led = await until(lambda: _new_leader(rig, [2, 3], before), "a new leader among 2, 3")
        rig.start(1)
        await rig.wait_running()
        await rig.wait_isr_full()
        res = await rig.admin.elect_leaders("preferred", [tp])
        assert res[tp] is None, res
        await _leader_is(rig, 1)
        assert await _produce(c.bootstrap, "orders", 1, first=13, **AFTER_ELECTION) == [13]
        sts = await _converged(rig, [1, 2, 3])
        assert {s["leo"] for s in sts.values()} == {14}
        assert await _stale_entries_dropped(rig, led["leader"], led["leader_epoch"]), \
            f"broker {led['leader']} never dropped its epoch-{led['leader_epoch']} entry"


async def _new_leader(rig: Rig, brokers: list[int], old_epoch: int) -> dict | None:
    for b in brokers:
        st = await _status(rig, b)
        if st["role"] == "leader" and st["leader_epoch"] > old_epoch:
            return st
    return None
