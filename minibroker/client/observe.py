"""What `watch` shows: every partition joined with each broker's ReplicaStatus,
and the events of every process, followed by long-polls.

`join` is pure: Metadata's view (leader, epoch, ISR, ELR) plus the leader's
own ReplicaStatus (HW, log start, each replica's LEO as the leader last saw
it) gives one `PartitionView` per partition; lag = leader LEO - replica LEO.
`EventFollower` keeps one Events long-poll per process and a bounded log.
"""
from __future__ import annotations

import asyncio
from collections import deque
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from minibroker.client.admin import Admin
from minibroker.client.describe import TopicDescription
from minibroker.errors import KafkaError


@dataclass(frozen=True)
class ReplicaView:
    broker_id: int
    leo: int | None
    lag: int | None
    in_isr: bool
    caught_up: bool | None = None
    last_caught_up_ms_ago: int | None = None
    stuck: str | None = None        # the follower's own fetch state: why its fetches make no progress


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    leader: int | None
    leader_epoch: int
    isr: tuple[int, ...]
    elr: tuple[int, ...] | None
    hw: int | None
    log_start: int | None
    replicas: tuple[ReplicaView, ...]
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def join(topics: list[TopicDescription], statuses: dict[int, dict[str, Any]]) -> list[PartitionView]:
    """Metadata x ReplicaStatus -> one view per partition (leader's numbers when it answered)."""
    by_broker: dict[int, dict[tuple[str, int], dict[str, Any]]] = {}
    for node, st in statuses.items():
        by_broker[node] = {(p["topic"], p["partition"]): p for p in st.get("partitions", ())}
    out: list[PartitionView] = []
    for td in topics:
        for pd in td.partitions:
            key = (pd.topic, pd.partition)
            lead = by_broker.get(pd.leader, {}).get(key) if pd.leader is not None else None
            note = ""
            if pd.leader is None:
                note = "offline"
            elif lead is None:
                note = f"no status from leader {pd.leader}"
            elif lead.get("role") != "leader":
                note = f"broker {pd.leader} reports role {lead.get('role')}"
            replicas: list[ReplicaView] = []
            if lead is not None and lead.get("role") == "leader":
                seen = {r["broker_id"]: r for r in lead.get("replicas", ())}
                leader_leo = lead.get("leo")
                for b in pd.replicas:
                    r = seen.get(b)
                    if b == pd.leader:
                        replicas.append(ReplicaView(b, leader_leo, 0, b in pd.isr, True, 0))
                    elif r is None:
                        replicas.append(ReplicaView(b, None, None, b in pd.isr))
                    else:
                        leo = r.get("leo")
                        lag = None if leo is None or leo < 0 or leader_leo is None else max(0, leader_leo - leo)
                        replicas.append(ReplicaView(b, leo if leo is not None and leo >= 0 else None, lag,
                                                    bool(r.get("in_isr", b in pd.isr)), r.get("caught_up"),
                                                    r.get("last_caught_up_ms_ago")))
                hw, ls = lead.get("hw"), lead.get("log_start_offset")
            else:
                for b in pd.replicas:
                    own = by_broker.get(b, {}).get(key)
                    replicas.append(ReplicaView(b, None if own is None else own.get("leo"), None, b in pd.isr))
                hw = ls = None
            replicas = [_with_stuck(r, by_broker.get(r.broker_id, {}).get(key)) for r in replicas]
            stuck = [f"{r.broker_id} stuck: {r.stuck}" for r in replicas if r.stuck]
            note = "; ".join([*([note] if note else []), *stuck])
            out.append(PartitionView(pd.topic, pd.partition, pd.leader, pd.leader_epoch, pd.isr, pd.elr,
                                     hw, ls, tuple(replicas), note))
    return out


def _with_stuck(r: ReplicaView, own: dict[str, Any] | None) -> ReplicaView:
    """The replica's own ReplicaStatus says whether its follower fetches are stuck (follower_stuck)."""
    fs = (own or {}).get("fetch_state") or {}
    reason = fs.get("stuck_reason") if fs.get("stuck") else None
    return r if not reason else dataclasses.replace(r, stuck=str(reason))


async def snapshot(admin: Admin, extra_brokers: dict[int, tuple[str, int]] | None = None
                   ) -> tuple[list[PartitionView], dict[int, str]]:
    """One frame: Metadata plus every broker's ReplicaStatus; returns (views, unreachable brokers)."""
    topics = await admin.describe_topics()
    brokers = dict(extra_brokers or {})
    brokers.update(await admin.brokers())
    statuses: dict[int, dict[str, Any]] = {}
    errors: dict[int, str] = {}

    async def one(node: int, addr: tuple[str, int]) -> None:
        try:
            statuses[node] = await asyncio.wait_for(admin.replica_status(addr), 3)
        except (TimeoutError, KafkaError) as exc:
            errors[node] = str(exc) or "timed out"
    await asyncio.gather(*(one(n, a) for n, a in brokers.items()))
    return join(topics, statuses), errors


@dataclass
class EventLine:
    source: str
    event: dict[str, Any]


@dataclass
class EventFollower:
    """Long-polls the Events API of each process and keeps the last `capacity` events.
    Invariant: `next_seq[source]` is the first sequence number not yet seen from it."""
    admin: Admin
    lines: deque = field(default_factory=lambda: deque(maxlen=2000))
    next_seq: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    async def poll_once(self, source: str, address: tuple[str, int], max_wait_ms: int = 0) -> int:
        resp = await self.admin.events(address, self.next_seq.get(source, 0), max_wait_ms)
        evs = resp.get("events", ())
        for e in evs:
            self.lines.append(EventLine(source, e))
        self.next_seq[source] = resp.get("next_seq", self.next_seq.get(source, 0))
        return len(evs)

    async def follow(self, source: str, address: tuple[str, int], max_wait_ms: int = 1000) -> None:
        while True:
            try:
                await self.poll_once(source, address, max_wait_ms)
                self.errors.pop(source, None)
            except KafkaError as exc:
                self.errors[source] = str(exc)
                await asyncio.sleep(1)


def sorted_events(lines: list[EventLine]) -> list[EventLine]:
    return sorted(lines, key=lambda l: (l.event.get("time_ms", 0), l.source, l.event.get("seq", 0)))
