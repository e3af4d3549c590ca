"""The group coordinator's driver: groups hosted on the partitions of `__consumer_offsets` this broker leads.

Owns: which offsets-topic partitions this broker coordinates (loaded, or
loading after it became their leader: COORDINATOR_LOAD_IN_PROGRESS meanwhile;
unloaded as soon as it stops leading them: NOT_COORDINATOR), creating the
topic on first use (offsets.topic.num.partitions, offsets.topic.replication.factor
capped at the registered brokers, created once that many are alive), writing
group metadata and offset commits to the partition with acks=all through the replica manager's produce path, replaying
a partition's log into groups on load, the timer that drives the group cores,
parked JoinGroup/SyncGroup requests (futures answered by the cores'
decisions), and the coordinator_load / coordinator_unload / group events.

Must not know: any group rule (minibroker.coordinator.group decides), Kafka's
or msgpack's wire formats (the listeners translate), replication rules (the
replica manager and leader cores decide what acks=all means).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from minibroker.clock import now_ms
from minibroker.coordinator import records as rec
from minibroker.coordinator.group import (CommittedOffset, Decision, Group, GroupEvent, GroupSettings, GroupState,
                                          JoinResponse, OffsetDeletion, StoreGroup, SyncResponse)
from minibroker.coordinator.records import OFFSETS_TOPIC
from minibroker.coordinator.retention import maybe_refresh
from minibroker.errors import ErrorCode, KafkaError, error_name
from minibroker.events import Event
from minibroker.protocol.api import ApiKey
from minibroker.records import build_batch, iter_records

log = logging.getLogger("minibroker.coordinator")

TICK_MS = 100
REFRESH_CHECK_MS = 60_000           # how often live keys are considered for rewriting (retention.py)
LOAD_READ_BYTES = 1 << 20
OFFSET_METADATA_MAX_BYTES = 4096      # offset.metadata.max.bytes


class NotCoordinator(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Shard:
    """One offsets-topic partition this broker leads. Invariant: `groups` is
    authoritative only when `loaded`; `epoch` is the leader epoch it was loaded at."""
    partition: int
    epoch: int
    loaded: bool = False
    groups: dict[str, Group] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    # Keys with a write in flight: (group, tp) for offsets, (group, None) for group metadata.
    busy: set[tuple[str, tuple[str, int] | None]] = field(default_factory=set)
    next_refresh_ms: int = 0


def _store_error(code: int) -> ErrorCode:
    """Kafka's mapping of a failed offsets-topic append to the error a group client sees."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.UNKNOWN_SERVER_ERROR


class GroupCoordinator:
    """Invariant: a group is served only from a loaded shard whose partition this broker leads."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        cfg = broker.config
        self.settings = GroupSettings(
            min_session_timeout_ms=cfg.get_int("group.min.session.timeout.ms"),
            max_session_timeout_ms=cfg.get_int("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=cfg.get_int("group.initial.rebalance.delay.ms"),
            max_size=cfg.get_int("group.max.size"))
        self.num_partitions = cfg.get_int("offsets.topic.num.partitions")
        self.replication_factor = cfg.get_int("offsets.topic.replication.factor")
        self.commit_timeout_ms = cfg.get_int("offsets.commit.timeout.ms")
        self.retention_ms = cfg.get_int("offsets.retention.minutes") * 60_000
        self.shards: dict[int, _Shard] = {}
        self._tokens = itertools.count(1)
        self._parked: dict[int, asyncio.Future[JoinResponse | SyncResponse]] = {}
        self._task: asyncio.Task[None] | None = None
        self._creating: asyncio.Task[None] | None = None
        self.new_member_id: Callable[[str], str] = lambda client_id: f"{client_id}-{uuid.uuid4()}"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for s in list(self.shards.values()):
            self._unload(s, "broker shutting down")

    async def _run(self) -> None:
        while True:
            try:
                self.tick()
            except Exception:
                log.exception("group coordinator tick failed")
            await asyncio.sleep(TICK_MS / 1000)

    def tick(self) -> None:
        """Triggered every TICK_MS: follow leadership of the offsets topic, then drive every group's timers."""
        self._follow_leadership()
        now = now_ms()
        for s in list(self.shards.values()):
            if s.loaded:
                for g in list(s.groups.values()):
                    self._apply(s, g, g.tick(now))
                if now >= s.next_refresh_ms:
                    s.next_refresh_ms = now + REFRESH_CHECK_MS
                    self._refresh(s, now)

    def _refresh(self, s: _Shard, now: int) -> None:
        """Expire old offsets of Empty groups; write live keys again before time retention reaches them."""
        r = maybe_refresh(list(s.groups.values()), now, self.retention_ms, s.busy)
        for gid, tp in r.expired:
            s.groups[gid].expire([tp])
        for gid in r.expired_groups:
            del s.groups[gid]
        if r.expired or r.expired_groups:
            self._emit("offsets_expired", f"{OFFSETS_TOPIC}-{s.partition}", None, len(r.expired),
                       f"{len(r.expired)} offset(s) and {len(r.expired_groups)} Empty group(s) older than "
                       f"offsets.retention.minutes expired")
        kvs: list[tuple[bytes, bytes | None]] = []
        keys: list[tuple[str, tuple[str, int] | None]] = []
        for gid, tp in r.offsets:
            kvs.append((rec.offset_key(gid, *tp), rec.offset_value(s.groups[gid].offsets[tp])))
            keys.append((gid, tp))
        for gid in r.groups:
            kvs.append((rec.group_key(gid), rec.group_value(s.groups[gid])))
            keys.append((gid, None))
        if kvs:
            asyncio.ensure_future(self._rewrite(s, kvs, keys))

    async def _rewrite(self, s: _Shard, kvs: list[tuple[bytes, bytes | None]],
                       keys: list[tuple[str, tuple[str, int] | None]]) -> None:
        s.busy.update(keys)
        try:
            code = await self._append(s, kvs)
        finally:
            s.busy.difference_update(keys)
        if code != ErrorCode.NONE:
            return
        now = now_ms()
        for gid, tp in keys:
            g = s.groups.get(gid)
            if g is None:
                continue
            if tp is None:
                g.metadata_written_ms = now
            elif tp in g.offsets:
                g.offset_written_ms[tp] = now

    def _emit(self, kind: str, partition: str, before: Any, after: Any, reason: str, **extra: Any) -> None:
        self.broker.events.emit(Event(kind, now_ms(), partition, before, after, reason, extra))

    def _follow_leadership(self) -> None:
        rm = self.broker.replica_manager
        if rm is None or OFFSETS_TOPIC not in self.broker.image.topics:
            for s in list(self.shards.values()):
                self._unload(s, f"{OFFSETS_TOPIC} does not exist")
            return
        led: dict[int, int] = {}
        for p in self.broker.image.partitions_of(OFFSETS_TOPIC):
            part = rm.partition(OFFSETS_TOPIC, p.partition)
            if part is not None and part.core is not None:
                led[p.partition] = part.leader_epoch
        for idx, s in list(self.shards.items()):
            if led.get(idx) != s.epoch:
                self._unload(s, "this broker no longer leads the partition" if idx not in led
                             else f"the partition's leader epoch moved to {led[idx]}")
        for idx, epoch in sorted(led.items()):
            if idx not in self.shards:
                s = self.shards[idx] = _Shard(idx, epoch)
                self._emit("coordinator_loading", f"{OFFSETS_TOPIC}-{idx}", None, epoch,
                           f"broker {self.broker.node_id} leads {OFFSETS_TOPIC}-{idx} at epoch {epoch}: "
                           f"loading its groups")
                s.task = asyncio.ensure_future(self._load(s))

    def _unload(self, s: _Shard, reason: str) -> None:
        self.shards.pop(s.partition, None)
        if s.task is not None and not s.task.done():
            s.task.cancel()
        for g in s.groups.values():
            for m in g.members.values():
                for token in (m.join_token, m.sync_token):
                    fut = self._parked.pop(token, None) if token is not None else None
                    if fut is not None and not fut.done():
                        fut.set_exception(NotCoordinator(ErrorCode.NOT_COORDINATOR, reason))
        self._emit("coordinator_unload", f"{OFFSETS_TOPIC}-{s.partition}", len(s.groups) if s.loaded else None,
                   None, f"broker {self.broker.node_id} stops coordinating {OFFSETS_TOPIC}-{s.partition}: {reason}")

    async def _load(self, s: _Shard) -> None:
        """Replay the partition from its log start to its log end into groups."""
        part = self.broker.replica_manager.partition(OFFSETS_TOPIC, s.partition)
        started = now_ms()
        groups: dict[str, Group] = {}
        count = 0
        try:
            offset = part.log_start_offset
            while True:
                end = part.leo
                if offset >= end:
                    break
                # Read on the loop as the Fetch path does (the log's segment list is the loop's),
                # one chunk per turn so other requests interleave.
                data = part.read(offset, LOAD_READ_BYTES, end, True)
                await asyncio.sleep(0)
                if not data:
                    break
                for r in iter_records(data, min_offset=offset):
                    offset = r.offset + 1
                    if r.key is None:
                        continue
                    try:
                        rec.replay(groups, r.key, r.value, self.settings, started, r.timestamp)
                        count += 1
                    except rec.RecordFormatError as exc:
                        log.warning("%s-%d offset %d: skipping a record: %s", OFFSETS_TOPIC, s.partition,
                                    r.offset, exc)
        except (KafkaError, OSError) as exc:
            if self.shards.get(s.partition) is s:
                self._unload(s, f"loading failed: {exc}")
            return
        if self.shards.get(s.partition) is not s:
            return
        s.groups = groups
        s.loaded = True
        self._emit("coordinator_load", f"{OFFSETS_TOPIC}-{s.partition}", None, s.epoch,
                   f"broker {self.broker.node_id} coordinates {OFFSETS_TOPIC}-{s.partition} at leader epoch "
                   f"{s.epoch}: {len(groups)} group(s) from {count} record(s) in {now_ms() - started} ms",
                   groups=len(groups), records=count)

    # ------------------------------------------------------------------ routing

    def partition_for(self, group_id: str) -> int:
        t = self.broker.image.topics.get(OFFSETS_TOPIC)
        return rec.partition_for(group_id, t.num_partitions if t is not None else self.num_partitions)

    def _shard(self, group_id: str) -> _Shard:
        if OFFSETS_TOPIC not in self.broker.image.topics:
            raise NotCoordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} does not exist yet")
        idx = self.partition_for(group_id)
        s = self.shards.get(idx)
        if s is None:
            self._follow_leadership()          # a leadership the timer has not seen yet starts loading now
            s = self.shards.get(idx)
        if s is None:
            raise NotCoordinator(ErrorCode.NOT_COORDINATOR,
                                 f"broker {self.broker.node_id} does not lead {OFFSETS_TOPIC}-{idx}")
        if not s.loaded:
            raise NotCoordinator(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"{OFFSETS_TOPIC}-{idx} is loading")
        return s

    async def find_coordinator(self, key: str, key_type: int, listener: str) -> tuple[ErrorCode, str, int, str, int]:
        """(error, message, node id, host, port) of the coordinator of group `key` on `listener`."""
        if key_type != 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "transactions are not served", -1, "", -1
        if not key:
            return ErrorCode.INVALID_GROUP_ID, "the group id is empty", -1, "", -1
        image = self.broker.image
        if OFFSETS_TOPIC not in image.topics:
            await self._create_offsets_topic()
            if OFFSETS_TOPIC not in image.topics:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is being created", -1, "", -1
        idx = self.partition_for(key)
        p = image.partitions.get((OFFSETS_TOPIC, idx))
        ep = image.endpoint(p.leader, listener) if p is not None and p.leader >= 0 else None
        if p is None or ep is None:
            return (ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC}-{idx} has no leader", -1, "", -1)
        return ErrorCode.NONE, "", p.leader, ep[0], ep[1]

    async def _create_offsets_topic(self) -> None:
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create())
        await asyncio.shield(self._creating)

    async def _create(self) -> None:
        # Kafka: "internal topic creation will fail until the cluster size meets this replication
        # factor requirement". The factor is capped at the registered brokers (a smaller cluster),
        # never at the ones alive now, or one broker down at first use would cost every group a
        # replica for good; until enough are alive FindCoordinator answers COORDINATOR_NOT_AVAILABLE.
        brokers = self.broker.image.brokers.values()
        rf = max(1, min(self.replication_factor, len(brokers)))
        live = sum(1 for b in brokers if not b.fenced)
        if live < rf:
            log.info("not creating %s yet: %d of the %d brokers its replication factor needs are alive",
                     OFFSETS_TOPIC, live, rf)
            return
        body = {"topics": [{"topic": OFFSETS_TOPIC, "num_partitions": self.num_partitions,
                            "replication_factor": rf,
                            # Time retention, no compaction: live keys are written again before
                            # retention reaches them (minibroker.coordinator.retention).
                            "configs": {"retention.ms": str(self.retention_ms), "retention.bytes": "-1",
                                        "segment.ms": str(max(60_000, self.retention_ms // 4)),
                                        "min.insync.replicas": str(min(2, rf))}}],
                "timeout_ms": 10_000, "validate_only": False}
        fn = self.broker.msgpack_handler(ApiKey.CREATE_TOPICS)
        try:
            resp = await fn(None, body)
        except KafkaError as exc:
            log.info("creating %s failed: %s", OFFSETS_TOPIC, exc)
            return
        for t in (resp or {}).get("topics", []):
            if t.get("error", 0) and t["error"] != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.info("creating %s failed: %s", OFFSETS_TOPIC, t.get("message") or error_name(t["error"]))
            else:
                self._emit("offsets_topic_created", OFFSETS_TOPIC, None, self.num_partitions,
                           f"{OFFSETS_TOPIC} created with {self.num_partitions} partitions, replication factor {rf}")

    # ------------------------------------------------------------------ decisions

    def _apply(self, s: _Shard, g: Group, decisions: list[Decision]) -> None:
        """Events go out now; answers wait for a StoreGroup before them to be written (acks=all)."""
        pending: list[JoinResponse | SyncResponse] = []
        store = False
        for d in decisions:
            if isinstance(d, GroupEvent):
                self._emit(d.kind, f"{OFFSETS_TOPIC}-{s.partition}", d.before or None, d.after or None, d.reason,
                           group=g.group_id)
            elif isinstance(d, StoreGroup):
                store = True
            else:
                pending.append(d)
        if not store:
            self._answer(pending)
            return
        value = rec.group_value(g)
        asyncio.ensure_future(self._store_then_answer(s, g, value, pending))

    def _answer(self, responses: list[JoinResponse | SyncResponse]) -> None:
        for r in responses:
            fut = self._parked.pop(r.token, None)
            if fut is not None and not fut.done():
                fut.set_result(r)

    async def _store_then_answer(self, s: _Shard, g: Group, value: bytes,
                                 responses: list[JoinResponse | SyncResponse]) -> None:
        key = (g.group_id, None)
        s.busy.add(key)
        try:
            code = await self._append(s, [(rec.group_key(g.group_id), value)])
        finally:
            s.busy.discard(key)
        if code == ErrorCode.NONE:
            g.metadata_written_ms = now_ms()
            self._answer(responses)
            return
        # What waited for the store fails with its error (a JoinResponse only if it was a success: a static
        # member's rejoin of a Stable group; the error answers of members removed stand).
        failed = [SyncResponse(r.token, code) if isinstance(r, SyncResponse)
                  else JoinResponse(r.token, code, member_id=r.member_id) if r.error == ErrorCode.NONE else r
                  for r in responses]
        self._answer(failed)
        if self.shards.get(s.partition) is s and g.group_id in s.groups:
            self._apply(s, g, g.maybe_store_failed(now_ms(), error_name(code)))

    async def _append(self, s: _Shard, kvs: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        batch = build_batch([(k, v) for k, v in kvs], timestamp_ms=now_ms())
        body = {"acks": -1, "timeout_ms": self.commit_timeout_ms,
                "topics": [{"topic": OFFSETS_TOPIC, "partitions": [{"partition": s.partition, "records": batch}]}]}
        try:
            resp = await self.broker.replica_manager.handle_produce(None, body)
        except KafkaError as exc:
            return _store_error(exc.code)
        err = resp["topics"][0]["partitions"][0]["error"] if resp else ErrorCode.UNKNOWN_SERVER_ERROR
        return ErrorCode.NONE if not err else _store_error(err)

    async def _park(self, s: _Shard, g: Group, token: int, decisions: list[Decision]) -> JoinResponse | SyncResponse:
        fut: asyncio.Future[JoinResponse | SyncResponse] = asyncio.get_running_loop().create_future()
        self._parked[token] = fut
        self._apply(s, g, decisions)
        try:
            return await fut
        finally:
            self._parked.pop(token, None)

    # ------------------------------------------------------------------ group APIs

    def _group(self, s: _Shard, group_id: str, create: bool) -> Group | None:
        g = s.groups.get(group_id)
        if g is None and create:
            g = s.groups[group_id] = Group(group_id, self.settings)
        return g

    async def join(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool,
                   supports_skip_assignment: bool = False) -> JoinResponse:
        if not group_id:
            return JoinResponse(0, ErrorCode.INVALID_GROUP_ID, member_id=member_id)
        s = self._shard(group_id)
        g = self._group(s, group_id, create=member_id == "")
        if g is None:
            return JoinResponse(0, ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        token = next(self._tokens)
        decisions = g.maybe_join(token, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                                 rebalance_timeout_ms, protocol_type, protocols, require_known_member_id,
                                 self.new_member_id(client_id), now_ms(), supports_skip_assignment)
        r = await self._park(s, g, token, decisions)
        assert isinstance(r, JoinResponse)
        return r

    async def sync(self, group_id: str, member_id: str, generation_id: int, protocol_type: str | None,
                   protocol_name: str | None, assignments: list[tuple[str, bytes]],
                   group_instance_id: str | None = None) -> SyncResponse:
        s = self._shard(group_id)
        g = self._group(s, group_id, create=False)
        if g is None:
            return SyncResponse(0, ErrorCode.UNKNOWN_MEMBER_ID)
        token = next(self._tokens)
        decisions = g.maybe_sync(token, member_id, generation_id, protocol_type, protocol_name, assignments,
                                 now_ms(), group_instance_id)
        r = await self._park(s, g, token, decisions)
        assert isinstance(r, SyncResponse)
        return r

    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> ErrorCode:
        s = self._shard(group_id)
        g = self._group(s, group_id, create=False)
        if g is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return g.heartbeat(member_id, generation_id, now_ms(), group_instance_id)

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """LeaveGroup: (member id, group instance id) each."""
        s = self._shard(group_id)
        g = self._group(s, group_id, create=False)
        if g is None:
            return [ErrorCode.UNKNOWN_MEMBER_ID for _ in members]
        errors, decisions = g.maybe_leave(members, now_ms())
        self._apply(s, g, decisions)
        return errors

    # ------------------------------------------------------------------ offsets

    def has_partition(self, topic: str, partition: int) -> bool:
        """Whether this broker's metadata holds `topic`-`partition` (OffsetCommit commits no other)."""
        return self.broker.image.partition(topic, partition) is not None

    async def commit(self, group_id: str, generation_id: int, member_id: str,
                     offsets: list[tuple[str, int, int, int, str]],
                     group_instance_id: str | None = None) -> dict[tuple[str, int], ErrorCode]:
        """OffsetCommit: (topic, partition, offset, leader epoch, metadata) each; written with acks=all
        before the group's view moves."""
        s = self._shard(group_id)
        g = self._group(s, group_id, create=generation_id < 0 and member_id == "")
        if g is None:
            code = ErrorCode.ILLEGAL_GENERATION
        else:
            code = g.validate_commit(member_id, generation_id, group_instance_id)
        out: dict[tuple[str, int], ErrorCode] = {}
        if code != ErrorCode.NONE:
            return {(t, p): code for t, p, *_ in offsets}
        now = now_ms()
        good: dict[tuple[str, int], CommittedOffset] = {}
        for t, p, off, epoch, meta in offsets:
            if len(meta.encode()) > OFFSET_METADATA_MAX_BYTES:
                out[(t, p)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                good[(t, p)] = CommittedOffset(off, epoch, meta, now)
        if good:
            busy = {(group_id, tp) for tp in good}
            s.busy |= busy
            try:
                code = await self._append(s, [(rec.offset_key(group_id, t, p), rec.offset_value(o))
                                              for (t, p), o in good.items()])
            finally:
                s.busy -= busy
            if code == ErrorCode.NONE and self.shards.get(s.partition) is s:
                assert g is not None
                g.commit(good, now_ms())
            for k in good:
                out[k] = code
        return out

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> list[tuple[str, int, CommittedOffset | None]]:
        s = self._shard(group_id)
        g = self._group(s, group_id, create=False)
        committed = g.offsets if g is not None else {}
        keys = sorted(committed) if partitions is None else partitions
        return [(t, p, committed.get((t, p))) for t, p in keys]

    def list_groups(self, states: set[str] | None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of the groups on the loaded shards of this broker."""
        out = []
        for s in self.shards.values():
            if s.loaded:
                for g in s.groups.values():
                    if g.state is not GroupState.DEAD and (not states or g.state.value.lower() in states):
                        out.append((g.group_id, g.protocol_type or "", g.state.value))
        return sorted(out)

    def describe(self, group_id: str) -> Group | None:
        g = self._group(self._shard(group_id), group_id, create=False)
        return None if g is None or g.state is GroupState.DEAD else g

    async def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]) -> OffsetDeletion:
        """OffsetDelete: the group core decides which committed offsets go; their tombstones are
        written with acks=all before the group forgets them. A failed write is the answer's
        group-level error (Kafka maps it as for a commit), nothing forgotten."""
        s = self._shard(group_id)
        g = self._group(s, group_id, create=False)
        if g is None:
            return OffsetDeletion(ErrorCode.GROUP_ID_NOT_FOUND)
        decided = g.maybe_delete_offsets(topics)
        if decided.error != ErrorCode.NONE or not decided.tombstones:
            return decided
        busy = {(group_id, tp) for tp in decided.tombstones}
        s.busy |= busy
        try:
            code = await self._append(s, [(rec.offset_key(group_id, t, p), None) for t, p in decided.tombstones])
        finally:
            s.busy -= busy
        if code != ErrorCode.NONE:
            return OffsetDeletion(code)
        if self.shards.get(s.partition) is s and s.groups.get(group_id) is g:
            g.expire(list(decided.tombstones))
        return decided

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups: an Empty group's offsets and metadata are tombstoned (acks=all)."""
        s = self._shard(group_id)
        g = self._group(s, group_id, create=False)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        keys = [rec.offset_key(group_id, t, p) for t, p in sorted(g.offsets)]
        code, decisions = g.maybe_delete(now_ms())
        if code != ErrorCode.NONE:
            return code
        self._apply(s, g, decisions)
        tombstones: list[tuple[bytes, bytes | None]] = [(k, None) for k in [*keys, rec.group_key(group_id)]]
        code = await self._append(s, tombstones)
        if s.groups.get(group_id) is g:
            del s.groups[group_id]
        return code
