"""Issue-level rules on real processes: what consumers may see, and acks=all
against min.insync.replicas, with followers frozen by SIGSTOP."""
import pytest

from minibroker.client import Admin, Consumer, ErrorCode, KafkaError, Producer, TopicPartition
from minibroker.protocol.api import ApiKey
from minibroker.testing.cluster import wait_for
from minibroker.testing.fixtures import cluster, cluster_factory  # noqa: F401

pytestmark = pytest.mark.cluster
TP = TopicPartition("orders", 0)


async def create(c, min_isr="2"):
    async with Admin(c.bootstrap) as admin:
        await admin.create_topic("orders", assignments=[[1, 2, 3]], configs={"min.insync.replicas": min_isr})


async def isr(c):
    async with Admin(c.bootstrap, {"request.timeout.ms": "2000"}) as admin:
        (td,) = await admin.describe_topics(["orders"])
        return td.partitions[0].isr


async def leader_view(c):
    """The leader's own LEO and HW, from its ReplicaStatus."""
    async with Admin(c.bootstrap) as admin:
        resp = await admin.replica_status((c.layout.broker(1).host, c.layout.broker(1).port), ["orders"])
    (p,) = resp["partitions"]
    return p["leo"], p["hw"]


async def read_all(c, at_least=0, polls=5):
    """Every record a fresh consumer reads: first until it has `at_least` (a deadline,
    not a fixed number of polls, so a slow machine does not read too little), then
    `polls` more polls, the window in which a record past the HW would show up."""
    got = {}
    async with Consumer(c.bootstrap, {"auto.offset.reset": "earliest"}) as con:
        con.assign([TP])
        if at_least:
            async def enough():
                for r in await con.poll(timeout_ms=200):
                    got[r.offset] = r.value
                return len(got) >= at_least
            await wait_for(enough, timeout_s=30, interval_s=0, what=f"{at_least} records")
        for _ in range(polls):
            for r in await con.poll(timeout_ms=200):
                got[r.offset] = r.value
    return got


async def test_acks1_records_stay_invisible_while_a_frozen_follower_is_in_the_isr(cluster_factory):
    # Long timeouts: the frozen follower stays in the ISR (neither fenced nor lagged out).
    c = cluster_factory(overrides={"broker.session.timeout.ms": "120000", "replica.lag.time.max.ms": "120000"})
    await create(c)
    async with Producer(c.bootstrap, {"acks": "all"}) as p:
        for i in range(5):
            await p.send_and_wait("orders", b"committed-%d" % i)
    await wait_for(lambda: _leo_hw_is(c, 5, 5), what="HW 5 on the leader")
    c.pause(3)
    try:
        async with Producer(c.bootstrap, {"acks": "1"}) as p:
            for i in range(3):
                assert (await p.send_and_wait("orders", b"acks1-%d" % i)).offset == 5 + i
        assert await leader_view(c) == (8, 5)              # on the leader, above the HW
        seen = await read_all(c, at_least=5, polls=5)
        assert sorted(seen) == [0, 1, 2, 3, 4], "a consumer read past the HW"
    finally:
        c.resume(3)
    got = await read_all(c, at_least=8)
    assert [got[o] for o in range(5, 8)] == [b"acks1-0", b"acks1-1", b"acks1-2"]


async def _leo_hw_is(c, leo, hw):
    return await leader_view(c) == (leo, hw)


async def test_frozen_followers_shrink_the_isr_then_acks_all_is_refused_without_appending(cluster):
    await create(cluster)
    async with Producer(cluster.bootstrap, {"acks": "all", "retries": 0}) as p:
        await p.send_and_wait("orders", b"a")
        cluster.pause(3)
        try:
            # Writes keep coming; the frozen follower leaves the ISR and the HW moves on without it.
            async def shrunk_and_acked():
                await p.send_and_wait("orders", b"b")
                return await isr(cluster) == (1, 2)
            await wait_for(shrunk_and_acked, timeout_s=30, what="ISR [1,2] with acks=all still working")
            cluster.pause(2)
            await wait_for(lambda: _isr_eq(cluster, (1,)), timeout_s=30, what="ISR [1]")
            leo_before, hw_before = await leader_view(cluster)
            with pytest.raises(KafkaError) as ei:
                await p.send_and_wait("orders", b"refused")
            assert ei.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
            assert await leader_view(cluster) == (leo_before, hw_before), "a refused produce appended"
        finally:
            cluster.resume(2)
            cluster.resume(3)
    await wait_for(lambda: _isr_set_eq(cluster, {1, 2, 3}), timeout_s=30, what="both followers back in the ISR")
    got = await read_all(cluster, at_least=leo_before)
    assert b"refused" not in got.values()


async def _isr_eq(c, want):
    return await isr(c) == want


async def _isr_set_eq(c, want):
    """The ISR holds exactly `want`; rejoiners are appended in the order they caught up (Kafka's order)."""
    return set(await isr(c)) == want
