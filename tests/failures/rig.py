"""What every failure test shares: the cluster settings, the rig (faults and
views, minibroker.verify.faults.FaultRig), hand-made producers and reads,
and the checker's verdict as an assertion."""
from __future__ import annotations

from typing import Any
from collections.abc import Awaitable, Callable

from minibroker.client.admin import Admin
from minibroker.errors import KafkaError
from minibroker.testing.cluster import LocalCluster, wait_for
from minibroker.verify.checker import Report
from minibroker.verify.faults import FaultRig

# Fault settings on top of the fixture's FAST_SETTINGS (session 2 s, lag 2 s).
OVERRIDES = {
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
}
SESSION_S = 2.0

# 3 partitions, RF=3; broker 3 is preferred leader of none, so it starts as a pure follower.
ASSIGNMENTS = [[1, 2, 3], [2, 1, 3], [1, 3, 2]]


def make_cluster(factory: Callable[..., LocalCluster], **overrides: str) -> LocalCluster:
    return factory(overrides={**OVERRIDES, **overrides})


class Rig(FaultRig):
    """FaultRig with the failure tests' default placement (broker 3 leads nothing at first)."""

    async def create_topic(self, assignments: list[list[int]] | None = ASSIGNMENTS,
                           configs: dict[str, str] | None = None) -> None:
        await super().create_topic(assignments, configs)


def assert_clean(rep: Report, min_acked: int = 1) -> None:
    text = "\n".join(rep.lines(limit=20))
    print(text)
    assert rep.ok, text
    assert rep.acked >= min_acked, text
    assert not rep.failed_read, text


async def until(cond: Callable[[], Awaitable[Any]] | Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    return await wait_for(cond, timeout_s=timeout_s, interval_s=0.05, what=what)


async def read_values(bootstrap: str, topic: str, partition: int = 0, timeout_s: float = 30.0
                      ) -> list[tuple[int, str]]:
    """Every record of one partition from offset 0 up to its current HW: [(offset, value)]."""
    from minibroker.client.consumer import Consumer
    from minibroker.client.types import TopicPartition
    async with Admin(bootstrap, {"request.timeout.ms": "2000", "default.api.timeout.ms": "15000"}) as admin:
        hw = await wait_for(lambda: _hw(admin, topic, partition), timeout_s=timeout_s,
                            what=f"HW of {topic}-{partition}") - 1
    out: list[tuple[int, str]] = []
    tp = TopicPartition(topic, partition)
    async with Consumer(bootstrap, {"auto.offset.reset": "earliest", "fetch.max.wait.ms": "100",
                                    "request.timeout.ms": "3000"}) as c:
        c.assign([tp])
        c.seek(tp, 0)

        async def done() -> bool:
            for r in await c.poll(200):
                out.append((r.offset, r.value.decode() if r.value is not None else ""))
            return hw == 0 or (bool(out) and out[-1][0] >= hw - 1)
        await wait_for(done, timeout_s=timeout_s, interval_s=0, what=f"{topic}-{partition} read up to {hw}")
    return out


async def _hw(admin: Admin, topic: str, partition: int) -> int | None:
    """HW + 1 (so that 0 is truthy for wait_for), None while unknown."""
    offs = await admin.topic_offsets(topic, partitions=[partition])
    return offs[partition] + 1 if offs.get(partition, -1) >= 0 else None


def cut_pairs(c: LocalCluster, pairs: list[tuple[int, int]], both_ways: bool = True) -> None:
    for a, b in pairs:
        c.block(a, b)
        if both_ways:
            c.block(b, a)


def uncut_pairs(c: LocalCluster, pairs: list[tuple[int, int]], both_ways: bool = True) -> None:
    for a, b in pairs:
        c.unblock(a, b)
        if both_ways:
            c.unblock(b, a)


def producer(bootstrap: str, **cfg: str) -> Any:
    """A plain client producer for hand-made scenarios: acks=all, no retries, no lingering."""
    from minibroker.client.producer import Producer
    base = {"acks": "all", "retries": "0", "linger.ms": "0", "request.timeout.ms": "3000",
            "delivery.timeout.ms": "8000", "max.block.ms": "8000", "reconnect.backoff.max.ms": "200",
            "socket.connection.setup.timeout.ms": "1000", "metadata.max.age.ms": "1000"}
    base.update(cfg)
    return Producer(bootstrap, base)


async def outcomes(futures: list[Any]) -> list[tuple[int, str | None]]:
    """(offset, None) for each acknowledged record, (-1, error name) for each failed one."""
    out: list[tuple[int, str | None]] = []
    for f in futures:
        try:
            md = await f
            out.append((md.offset, None))
        except KafkaError as exc:
            out.append((-1, exc.name))
    return out
