"""Follower catch-up from zero: how fast a follower that has nothing copies a full partition.

On a fresh RF=3 topic placed [leader, other, victim], the victim broker is stopped
(clean shutdown: it leaves the ISR, so acks=all with min.insync.replicas=2 still
succeeds on the other two), `count` records are produced, and the victim is started
again. Its log of that partition is empty, so its first Fetch asks for offset 0.
The clock is the leader's own view (ReplicaStatus: each follower's LEO, the offset it
last fetched from, and how long ago): from the first fetch after the restart to the
fetch whose offset reached the leader's LEO. Broker start-up (imports, registration,
metadata) is therefore not counted, and neither is the poll interval.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from minibroker.bench.produce import produce_batched
from minibroker.client.admin import Admin
from minibroker.errors import KafkaError
from minibroker.testing.cluster import LocalCluster

POLL_S = 0.002           # the leader answers ReplicaStatus for one topic in well under a millisecond


@dataclass
class CatchUp:
    records: int
    seconds: float
    leader: int
    follower: int

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


async def wait_isr(admin: Admin, topic: str, want: set[int] | None, without: int | None = None,
                   timeout_s: float = 60.0) -> bool:
    """Until partition 0's ISR is `want` (or lacks `without`); False on time-out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            (td,) = await admin.describe_topics([topic])
            isr = set(td.partitions[0].isr)
            if (want is None or isr == want) and (without is None or without not in isr):
                return True
        except KafkaError:
            pass
        await asyncio.sleep(0.1)
    return False


def _views(status: dict[str, Any], topic: str) -> tuple[int, dict[int, dict[str, Any]]] | None:
    """(leader LEO, replica views by broker) of partition 0 of `topic`, if this broker leads it."""
    for p in status.get("partitions", ()):
        if p.get("topic") == topic and p.get("partition") == 0 and p.get("role") == "leader":
            return int(p["leo"]), {int(r["broker_id"]): r for r in p.get("replicas", ())}
    return None


async def follower_catch_up(cluster: LocalCluster, admin: Admin, topic: str, *, count: int, size: int,
                            producer_cfg: dict[str, Any], timeout_s: float = 300.0) -> CatchUp:
    ids = cluster.broker_ids
    leader, other, victim = ids[0], ids[1], ids[-1]
    await admin.create_topic(topic, configs={"min.insync.replicas": "2"}, assignments=[[leader, other, victim]])
    await asyncio.to_thread(cluster.stop, victim)
    try:
        return await _measure(cluster, admin, topic, leader, victim, count=count, size=size,
                              producer_cfg=producer_cfg, timeout_s=timeout_s)
    finally:
        if victim in cluster.broker_ids and not cluster.pids.get(cluster.layout.broker(victim).name):
            cluster.start_broker(victim)
        await cluster.wait_running(brokers=[victim])
        await wait_isr(admin, topic, {leader, other, victim})


async def _measure(cluster: LocalCluster, admin: Admin, topic: str, leader: int, victim: int, *, count: int,
                   size: int, producer_cfg: dict[str, Any], timeout_s: float) -> CatchUp:
    """With `victim` stopped: produce, start it, and time its copy on the leader's clock."""
    if not await wait_isr(admin, topic, None, without=victim):
        raise RuntimeError(f"broker {victim} stayed in the ISR of {topic} after its shutdown")
    await produce_batched(cluster.bootstrap, topic, count, size, producer_cfg)    # what failed is not there to copy
    addr = cluster.broker_address(leader)
    spawned = time.perf_counter()
    cluster.start_broker(victim)
    start: tuple[float, int] | None = None
    deadline = spawned + timeout_s
    while time.perf_counter() < deadline:
        status = await admin.replica_status(addr, [topic])
        now = time.perf_counter()
        found = _views(status, topic)
        if found is not None:
            leader_leo, views = found
            v = views.get(victim, {})
            ago = v.get("last_fetch_ms_ago")
            if ago is not None and ago / 1000 < now - spawned:        # a fetch since the restart
                at = now - ago / 1000
                if start is None:
                    start = (at, int(v.get("leo", 0)))
                if int(v.get("leo", -1)) >= leader_leo:
                    return CatchUp(leader_leo - start[1], max(at - start[0], 1e-6), leader, victim)
        await asyncio.sleep(POLL_S)
    raise RuntimeError(f"broker {victim} did not catch up on {topic} within {timeout_s:.0f} s")
