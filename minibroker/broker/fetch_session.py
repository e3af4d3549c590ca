"""Replica fetch sessions (KIP-227): both ends, as pure bookkeeping.

Owns, on the leader (`FetchSessionCache`): one session per follower broker,
holding the last Fetch entry the follower sent for each partition of the
session and what the last response told it (HW, log start offset), so an
incremental Fetch lists only the partitions whose position changed and its
response only the partitions with news. On the follower
(`FollowerSession`): the session id and the next epoch, and the entries the
leader's session holds, so it can send only what changed and forget what it
no longer fetches.

An idle follower of 1,000 partitions then sends and receives Fetches that
name no partition, instead of 1,000 entries each way every
replica.fetch.wait.max.ms.

Must not know: the log, the wire, replication rules, time. The leader
applies the follower-fetch rule to every partition of a session (the
follower's fetch offset is its acknowledgement and keeps it in the ISR:
Kafka's IncrementalFetchContext does the same, on every Fetch; the driver
does it to the quiet ones at most every QUIET_REFRESH_MS, `quiet_refreshed`),
but it reads again only the partitions whose state may have moved: the
driver keeps, per session, the partitions last read quiet (`quiet`) and the
change count at which all of them were known to hold (`quiet_at`). The
follower's side compares only the entries its caller says moved
(`build_changed`).

Rules KS1-KS4 of docs/rules.md; simplified (KS2): one session per follower
broker, no cache slots or idle eviction. Sessions are for replica fetches only (consumers fetch without one: session
epoch -1, as librdkafka does); a replica fetch needs an authenticated
inter-broker connection, so the cache holds at most one session per broker.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from minibroker.errors import ErrorCode

PartitionKey = tuple[str, int]
Entry = dict[str, Any]            # one partition of a Fetch request, as validated

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0                 # a full Fetch that opens a new session
FINAL_EPOCH = -1                  # a full Fetch without a session (consumers)
MAX_SESSION_ID = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (wraps to 1: 0 is reserved for opening a session)."""
    return 1 if epoch >= MAX_SESSION_ID or epoch < 0 else epoch + 1


@dataclass
class FetchSession:
    """One follower's session on the leader.

    Invariant: `partitions` is in the order the follower added them; `told`
    holds, for the partitions some response included, the (HW, log start
    offset) it carried."""
    session_id: int
    replica_id: int
    epoch: int                                        # the epoch the next incremental Fetch must carry
    partitions: dict[PartitionKey, tuple[str, Entry]] = field(default_factory=dict)
    told: dict[PartitionKey, tuple[int, int]] = field(default_factory=dict)
    # The driver's (state stamp, result, core) of the last read of a caught-up partition with nothing to
    # say (opaque here): while the follower does not name it and the stamp holds, the read would give the same.
    quiet: dict[PartitionKey, tuple[Any, Any, Any]] = field(default_factory=dict)
    # The driver's change count at which every `quiet` stamp was last known to hold (-1: not known).
    quiet_at: int = -1
    # The driver's mark (opaque here) of the last Fetch that applied the follower-fetch rule to every
    # quiet partition.
    quiet_refreshed: tuple[int, int] = (-1, -1)
    # Counts the changes to the set of `partitions` (one added or forgotten).
    generation: int = 0

    def must_respond(self, key: PartitionKey, error: int, high_watermark: int, log_start_offset: int,
                     has_records: bool, diverging: bool) -> bool:
        """KS4, Kafka's CachedPartition.maybeUpdateResponseData: a partition is in an incremental
        response when it has records, an error or a diverging epoch, or its HW or log start
        offset differs from what the follower was last told (or it was never told)."""
        if has_records or error or diverging:
            return True
        return self.told.get(key) != (high_watermark, log_start_offset)

    def include(self, key: PartitionKey, full: bool, error: int, high_watermark: int, log_start_offset: int,
                has_records: bool, diverging: bool) -> bool:
        """Triggered for each partition read for a response: whether it goes in (every one of
        a full response), remembering what the follower is told (after an error nothing, so
        it is answered again once it recovers, KS4)."""
        if not full and not self.must_respond(key, error, high_watermark, log_start_offset, has_records,
                                              diverging):
            return False
        if error:
            self.told.pop(key, None)
        else:
            self.told[key] = (high_watermark, log_start_offset)
        return True


class Opened(NamedTuple):
    """The outcome of one replica Fetch against the cache: the session (None: a full
    fetch without one), every partition to read, in order, or a top-level error.
    (A NamedTuple: one is made per replica Fetch.)"""
    session: FetchSession | None
    requests: list[tuple[str, Entry]]
    full: bool
    error: ErrorCode = ErrorCode.NONE
    message: str = ""


class FetchSessionCache:
    """The leader's sessions, by follower broker id.

    Invariant: at most one session per replica id; `_by_id` and `_by_replica`
    hold the same sessions."""

    def __init__(self, first_id: int) -> None:
        self._next_id = first_id % MAX_SESSION_ID or 1
        self._by_id: dict[int, FetchSession] = {}
        self._by_replica: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def open(self, replica_id: int, session_id: int, epoch: int, requests: list[tuple[str, Entry]],
             forgotten: list[dict[str, Any]] | None) -> Opened:
        """Triggered by each replica Fetch (KS1, KS3). Epoch -1: no session. Epoch 0: a new session
        holding `requests` (it replaces the follower's previous one). Otherwise the
        follower's session, if `session_id` and `epoch` match it, updated with `requests`
        and without `forgotten`; it answers for every partition it holds."""
        if epoch == FINAL_EPOCH:
            self._drop(self._by_replica.get(replica_id))
            return Opened(None, requests, True)
        if epoch == INITIAL_EPOCH:
            self._drop(self._by_replica.get(replica_id))
            new = FetchSession(self._new_id(), replica_id, next_epoch(INITIAL_EPOCH))
            for topic, p in requests:
                new.partitions[(topic, p["partition"])] = (topic, p)
            self._by_id[new.session_id] = new
            self._by_replica[replica_id] = new
            return Opened(new, requests, True)
        s = self._by_id.get(session_id)
        if s is None or s.replica_id != replica_id:
            return Opened(None, [], False, ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                          f"no fetch session {session_id} for broker {replica_id}")
        if epoch != s.epoch:
            return Opened(None, [], False, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                          f"fetch session {session_id} expects epoch {s.epoch}, not {epoch}")
        s.epoch = next_epoch(epoch)
        for t in forgotten or ():
            for index in t["partitions"]:
                key = (t["topic"], index)
                if s.partitions.pop(key, None) is not None:
                    s.generation += 1
                s.told.pop(key, None)
                s.quiet.pop(key, None)
        for topic, p in requests:
            key = (topic, p["partition"])
            if key not in s.partitions:
                s.generation += 1
            s.partitions[key] = (topic, p)
            s.told.pop(key, None)      # a partition the follower names is answered: its position changed
            s.quiet.pop(key, None)     # and read
        return Opened(s, list(s.partitions.values()), False)

    def status(self) -> list[dict[str, int]]:
        """For ReplicaStatus: each follower's session on this leader."""
        return [{"replica_id": r, "session_id": s.session_id, "epoch": s.epoch, "partitions": len(s.partitions)}
                for r, s in sorted(self._by_replica.items())]

    def remove_replica(self, replica_id: int) -> None:
        self._drop(self._by_replica.get(replica_id))

    def _drop(self, s: FetchSession | None) -> None:
        if s is not None:
            self._by_id.pop(s.session_id, None)
            self._by_replica.pop(s.replica_id, None)

    def _new_id(self) -> int:
        while True:
            sid = self._next_id
            self._next_id = sid % MAX_SESSION_ID + 1
            if sid not in self._by_id:
                return sid


@dataclass
class FollowerSession:
    """The follower's side of its session with one leader (Kafka's FetchSessionHandler).

    Invariant: `held` is exactly what the leader's session holds once the
    last request was answered: key -> the entry sent for it (its topic and
    position fields); empty while `session_id` is 0."""
    session_id: int = INVALID_SESSION_ID
    epoch: int = INITIAL_EPOCH
    held: dict[PartitionKey, tuple[Any, ...]] = field(default_factory=dict)
    _pending: dict[PartitionKey, tuple[Any, ...]] = field(default_factory=dict)
    # Invariant: the `wanted` map of the last full comparison; `held is _built` says the leader holds it.
    _built: dict[PartitionKey, tuple[Any, ...]] | None = None
    _pending_full: bool = True
    # Invariant: while a `build_changed` Fetch is unanswered, the entries it changed (`held` takes them in
    # place when it is answered: `held is _built` holds on); None otherwise.
    _delta: dict[PartitionKey, tuple[Any, ...]] | None = None

    @property
    def request_ids(self) -> tuple[int, int]:
        """(session_id, session_epoch) for the next Fetch: (0, 0) opens a session."""
        return self.session_id, self.epoch

    def build(self, entries: list[tuple[str, Entry]], *, same: bool = False) -> tuple[
            list[tuple[str, Entry]], list[dict[str, Any]], bool]:
        """Triggered before each Fetch, with an entry for every partition to fetch now.
        Returns (the entries to send, the partitions to forget, whether the Fetch is full).
        `same`: the caller knows `entries` equal those of the previous build; once the
        session holds them, the Fetch names and forgets nothing without comparing them."""
        if same and self.session_id != INVALID_SESSION_ID and self.held is self._built and self._delta is None:
            self._pending = self.held
            self._pending_full = False
            return [], [], False
        self._delta = None
        # The fields of an entry the leader keeps: a change to any of them is news for the leader.
        wanted = {(topic, p["partition"]): (topic, p["fetch_offset"], p["current_leader_epoch"],
                                            p["last_fetched_epoch"], p["log_start_offset"], p["partition_max_bytes"])
                  for topic, p in entries}
        self._pending = self._built = wanted
        self._pending_full = self.session_id == INVALID_SESSION_ID
        if self._pending_full:
            return entries, [], True
        send = [(topic, p) for topic, p in entries if self.held.get((topic, p["partition"])) !=
                wanted[(topic, p["partition"])]]
        gone: dict[str, list[int]] = {}
        for key in self.held:
            if key not in wanted:
                gone.setdefault(key[0], []).append(key[1])
        return send, [{"topic": t, "partitions": ps} for t, ps in gone.items()], False

    def build_changed(self, changed: list[tuple[str, Entry]]) -> tuple[
            list[tuple[str, Entry]], list[dict[str, Any]], bool] | None:
        """`build` for entries that equal those of the previous build but for `changed` (the
        caller knows which moved): only those are compared. None when the session cannot take
        it that way (none open, or the leader does not hold the previous build): call `build`."""
        held = self._built
        if self.session_id == INVALID_SESSION_ID or held is None or self.held is not held or self._delta is not None:
            return None
        delta: dict[PartitionKey, tuple[Any, ...]] = {}
        send: list[tuple[str, Entry]] = []
        for topic, p in changed:
            key = (topic, p["partition"])
            fields = (topic, p["fetch_offset"], p["current_leader_epoch"], p["last_fetched_epoch"],
                      p["log_start_offset"], p["partition_max_bytes"])
            if held.get(key) != fields:
                delta[key] = fields
                send.append((topic, p))
        self._delta = delta
        self._pending = held
        self._pending_full = False
        return send, [], False

    def on_response(self, session_id: int) -> None:
        """Triggered by a Fetch response without a top-level error."""
        if session_id == INVALID_SESSION_ID:
            self.reset()
            return
        if self._pending_full:                    # the answer to a full Fetch opens a new session
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH
        delta = self._delta
        if delta is not None:                     # `_pending` is `held`: it takes the changed entries
            self._delta = None
            if delta:
                self.held.update(delta)
        else:
            self.held = self._pending
        self._pending = {}
        self.epoch = next_epoch(self.epoch)

    def reset(self) -> None:
        """Triggered by a session error, a transport error or any other failed Fetch: the next is full."""
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.held = {}
        self._pending = {}
        self._delta = None
