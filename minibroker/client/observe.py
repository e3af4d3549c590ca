"""What `watch` shows: every partition joined with each broker's ReplicaStatus,
and the events of every process, followed by long-polls.

`join` is pure: Metadata's view (leader, epoch, ISR, ELR) plus the leader's
own ReplicaStatus (HW, log start, each replica's LEO as the leader last saw
it) gives one `PartitionView` per partition; lag = leader LEO - replica LEO.
`EventFollower` keeps one Events long-poll per process and a bounded log.
`ClusterObserver` asks every broker at once, each round bounded by a
deadline, so one paused or dead broker shows as such instead of stalling
the picture; `merge_metadata` keeps, per partition, the freshest answer.
"""
from __future__ import annotations

import asyncio
from collections import deque
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from minibroker.client.admin import Admin
from minibroker.client.describe import TopicDescription, describe_from_metadata
from minibroker.client.network import now_ms
from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import check
from minibroker.protocol.api import ApiKey


@dataclass(frozen=True)
class ReplicaView:
    broker_id: int
    leo: int | None
    lag: int | None
    in_isr: bool
    caught_up: bool | None = None
    last_caught_up_ms_ago: int | None = None
    stuck: str | None = None        # the follower's own fetch state: why its fetches make no progress
    throttled: bool = False         # the follower's own fetch state: its last Fetch left it out (RQ5)


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
    adding: tuple[int, ...] = ()       # during a reassignment, as the leader reports it
    removing: tuple[int, ...] = ()

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
            replicas = [_with_own_state(r, by_broker.get(r.broker_id, {}).get(key)) for r in replicas]
            stuck = [f"{r.broker_id} stuck: {r.stuck}" for r in replicas if r.stuck]
            note = "; ".join([*([note] if note else []), *stuck])
            moving = lead if lead is not None and lead.get("role") == "leader" else {}
            out.append(PartitionView(pd.topic, pd.partition, pd.leader, pd.leader_epoch, pd.isr, pd.elr,
                                     hw, ls, tuple(replicas), note, tuple(moving.get("adding_replicas", ())),
                                     tuple(moving.get("removing_replicas", ()))))
    return out


def _with_own_state(r: ReplicaView, own: dict[str, Any] | None) -> ReplicaView:
    """The replica's own ReplicaStatus says whether its follower fetches are stuck (follower_stuck)
    or held back by its replication throttle (RQ5)."""
    fs = (own or {}).get("fetch_state") or {}
    reason = fs.get("stuck_reason") if fs.get("stuck") else None
    throttled = bool(fs.get("throttled"))
    if not reason and not throttled:
        return r
    return dataclasses.replace(r, stuck=str(reason) if reason else None, throttled=throttled)


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
    return sorted(lines, key=lambda ln: (ln.event.get("time_ms", 0), ln.source, ln.event.get("seq", 0)))


# --------------------------------------------------------------------------
# Asking every broker at once, with a deadline (watch never waits on one)
# --------------------------------------------------------------------------

@dataclass
class Probe:
    """What one broker address last answered. Invariant: `asked_ms` is set while a
    round to it is in flight (None otherwise); `answered_ms` is when `metadata` and
    `status` were last both received."""
    address: tuple[str, int]
    node_id: int | None = None
    metadata: dict[str, Any] | None = None
    status: dict[str, Any] | None = None
    answered_ms: int | None = None
    asked_ms: int | None = None
    error: str = ""
    timed_out: bool = False             # the last round failed for want of an answer
    first_asked_ms: int | None = None
    process: str = ""                   # local cluster only: running / paused / stopped


@dataclass(frozen=True)
class BrokerView:
    node_id: int | None
    address: tuple[str, int]
    rack: str | None
    state: str                          # "ok" | "not answering" | "unreachable"
    detail: str
    process: str = ""

    @property
    def label(self) -> str:
        return f"broker {self.node_id}" if self.node_id is not None else f"{self.address[0]}:{self.address[1]}"


def merge_metadata(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Several brokers' Metadata answers as one: for each partition the record with
    the highest (leader epoch, partition epoch), so a paused or isolated broker's
    stale view loses to a fresher one; brokers are the union of the answers."""
    brokers: dict[int, dict[str, Any]] = {}
    topics: dict[str, dict[str, Any]] = {}
    parts: dict[tuple[str, int], dict[str, Any]] = {}
    for resp in answers:
        for b in resp.get("brokers", ()):
            brokers.setdefault(b["node_id"], b)
        for t in resp.get("topics", ()):
            if t.get("error") and not t.get("partitions"):
                continue
            topics.setdefault(t["topic"], t)
            for p in t.get("partitions", ()):
                key = (t["topic"], p["partition"])
                old = parts.get(key)
                if old is None or (p.get("leader_epoch", -1), p.get("partition_epoch", -1)) > \
                        (old.get("leader_epoch", -1), old.get("partition_epoch", -1)):
                    parts[key] = p
    out_topics = []
    for name in sorted(topics):
        t = dict(topics[name])
        t["partitions"] = [parts[k] for k in sorted(parts) if k[0] == name]
        out_topics.append(t)
    return {"brokers": [brokers[n] for n in sorted(brokers)], "topics": out_topics}


def broker_views(probes: list[Probe], now_ms: int, deadline_ms: int,
                 known_racks: dict[int, str] | None = None) -> list[BrokerView]:
    """Each broker's state as of now: answering, not answering (a round in flight past
    the deadline, e.g. a paused process), or unreachable (the last round failed)."""
    racks: dict[int, str | None] = dict(known_racks or {})
    for p in probes:
        for b in (p.metadata or {}).get("brokers", ()):
            racks[b["node_id"]] = b.get("rack") or racks.get(b["node_id"])
    out = []
    for p in probes:
        rack = racks.get(p.node_id) if p.node_id is not None else None
        late = p.asked_ms is not None and now_ms - p.asked_ms > deadline_ms
        if late or (p.error and p.timed_out):
            since = p.answered_ms if p.answered_ms is not None else (p.first_asked_ms or now_ms)
            state, detail = "not answering", f"no answer for {(now_ms - since) / 1000:.1f} s"
        elif p.error:
            state, detail = "unreachable", p.error
        elif p.answered_ms is None:
            state, detail = "not answering", "waiting for a first answer"
        else:
            state, detail = "ok", ""
        out.append(BrokerView(p.node_id, p.address, rack, state, detail, p.process))
    return sorted(out, key=lambda v: (v.node_id is None, v.node_id or 0, v.address))


@dataclass
class Frame:
    """Invariant: `registered` is the set of brokers the freshest Metadata lists
    (registered and unfenced); a broker answering but not in it is fenced."""
    views: list[PartitionView]
    brokers: list[BrokerView]
    time_ms: int
    registered: frozenset[int] = frozenset()


class ClusterObserver:
    """Asks every known broker for Metadata and ReplicaStatus in parallel, each round
    bounded by `deadline_ms`, and builds frames from whatever answered.

    Invariant: `probes` holds one Probe per broker address ever learned (bootstrap,
    the local cluster's layout, every Metadata answer); a round to one broker never
    waits for another's."""

    def __init__(self, admin: Admin, bootstrap: list[tuple[str, int]],
                 known: dict[int, tuple[str, int]] | None = None, *, deadline_ms: int = 1000,
                 process_state: Any = None, racks: dict[int, str] | None = None) -> None:
        self.admin = admin
        self.racks = dict(racks or {})
        self.deadline_ms = deadline_ms
        self.probes: dict[tuple[str, int], Probe] = {}
        self.process_state = process_state     # (node_id) -> "running" | "paused" | "stopped" | ""
        for node, addr in (known or {}).items():
            self.probes[addr] = Probe(addr, node)
        for addr in bootstrap:
            self.probes.setdefault(addr, Probe(addr))
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}

    async def ask(self, probe: Probe) -> None:
        """One round to one broker: Metadata and ReplicaStatus, both within the deadline."""
        probe.asked_ms = now_ms()
        if probe.first_asked_ms is None:
            probe.first_asked_ms = probe.asked_ms
        try:
            meta, status = await asyncio.wait_for(asyncio.gather(
                self.admin.net.request_address(probe.address, ApiKey.METADATA, {"topics": None}, channel="meta",
                                               timeout_ms=self.deadline_ms),
                self.admin.replica_status(probe.address)), self.deadline_ms / 1000)
            probe.metadata, probe.status = check(meta), status
            probe.node_id = status.get("node_id", probe.node_id)
            probe.answered_ms = now_ms()
            probe.error, probe.timed_out = "", False
            for b in probe.metadata.get("brokers", ()):
                addr = (b["host"], b["port"])
                if addr not in self.probes and not any(p.node_id == b["node_id"] for p in self.probes.values()):
                    self.probes[addr] = Probe(addr, b["node_id"])
        except (TimeoutError, KafkaError, OSError) as exc:
            probe.error = str(exc) or f"no answer within {self.deadline_ms} ms"
            probe.timed_out = isinstance(exc, TimeoutError) or (
                isinstance(exc, KafkaError) and exc.code == ErrorCode.REQUEST_TIMED_OUT)
        finally:
            probe.asked_ms = None

    async def round(self) -> None:
        """Every broker once, in parallel (for `--once`)."""
        await asyncio.gather(*(self.ask(p) for p in list(self.probes.values())))
        # Brokers learned from the answers get their first round too.
        new = [p for p in self.probes.values() if p.answered_ms is None and not p.error]
        await asyncio.gather(*(self.ask(p) for p in new))

    def start(self, interval_ms: int) -> None:
        """Keep asking every broker every `interval_ms`, each on its own task."""
        for addr, p in list(self.probes.items()):
            if addr not in self._tasks:
                self._tasks[addr] = asyncio.ensure_future(self._loop(p, interval_ms))

    async def _loop(self, probe: Probe, interval_ms: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await self.ask(probe)
            self.start(interval_ms)
            await asyncio.sleep(max(0.0, interval_ms / 1000 - (loop.time() - started)))

    async def close(self) -> None:
        for t in self._tasks.values():
            t.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()

    def frame(self, now_ms: int) -> Frame:
        """The picture now, from answers no older than two deadlines."""
        probes = list(self.probes.values())
        if self.process_state is not None:
            for p in probes:
                p.process = self.process_state(p.node_id) if p.node_id is not None else ""
        fresh = [p for p in probes if p.answered_ms is not None and now_ms - p.answered_ms <= 2 * self.deadline_ms]
        if not fresh:
            fresh = [p for p in probes if p.metadata is not None]
        meta = merge_metadata([p.metadata for p in fresh if p.metadata is not None])
        statuses = {p.node_id: p.status for p in fresh if p.node_id is not None and p.status is not None}
        views = join(describe_from_metadata(meta), statuses)
        return Frame(views, broker_views(probes, now_ms, self.deadline_ms, self.racks), now_ms,
                     frozenset(b["node_id"] for b in meta["brokers"]))
