"""A consumer group member: subscribe, join, heartbeat, rebalance, commit (Kafka's classic protocol).

Owns: finding the group's coordinator (FindCoordinator, again after
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / a lost connection), the member
id and generation, the join/sync round trip (MEMBER_ID_REQUIRED answered by
rejoining with the id given; as leader, the range assignment of every
member's subscription), the heartbeat task (REBALANCE_IN_PROGRESS,
ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID make the next poll rejoin), the
consumed positions and committing them (auto commit every
auto.commit.interval.ms, before a rebalance and on close), starting each
assigned partition at its committed offset (else auto.offset.reset), and
leaving the group on close; as a static member (group.instance.id, KIP-345)
the instance id on every request, FENCED_INSTANCE_ID as fatal, and no
LeaveGroup on close (its session timeout, or its restart, ends it), as
Kafka's consumer.

Must not know: fetching (minibroker.client.consumer), the wire encoding of
the subscription and assignment (minibroker.client.consumer_protocol), the
coordinator's rules.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from minibroker.client.consumer import Consumer
from minibroker.client.consumer_protocol import (PROTOCOL_TYPE, RANGE, decode_assignment, decode_subscription,
                                                 encode_assignment, encode_subscription, range_assign)
from minibroker.client.network import Address, now_ms
from minibroker.client.types import ConsumerRecord, TopicPartition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.api import ApiKey

log = logging.getLogger("minibroker.group")

_FIND_AGAIN = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})
_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}) | _FIND_AGAIN
_REJOIN = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
RETRY_BACKOFF_MS = 100


class GroupConsumer:
    """`async with GroupConsumer(bs, {"group.id": "g"}) as c: c.subscribe(["t"]); await c.poll()`.

    Invariant: `_consumed[tp]` is the offset after the last record poll() returned for an assigned tp."""

    def __init__(self, bootstrap_servers: str | list[str] | None = None,
                 config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.consumer = Consumer(bootstrap_servers, config, **kwargs)
        cfg = self.consumer.cfg
        self.group_id = cfg.get("group.id")
        if not self.group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "group.id is required to subscribe")
        self.client_id = cfg.get("client.id") or "minibroker-consumer"
        self.instance_id: str | None = cfg.get("group.instance.id") or None
        self.session_ms = cfg.get_int("session.timeout.ms")
        self.heartbeat_ms = cfg.get_int("heartbeat.interval.ms")
        self.rebalance_ms = cfg.get_int("max.poll.interval.ms")
        self.auto_commit = cfg.get("enable.auto.commit").lower() == "true"
        self.auto_commit_ms = cfg.get_int("auto.commit.interval.ms")
        self.api_timeout_ms = cfg.get_int("default.api.timeout.ms")
        self.topics: list[str] = []
        self.member_id = ""
        self.generation = -1
        self.assigned: list[TopicPartition] = []
        self._coordinator: Address | None = None
        self._needs_join = True
        self._consumed: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._next_commit_ms = 0
        self._heartbeats: asyncio.Task[None] | None = None
        self._closed = False
        self._fenced = False        # Invariant: True once a newer instance took group.instance.id (fatal)
        self.on_assign: Callable[[list[TopicPartition]], None] | None = None

    async def __aenter__(self) -> GroupConsumer:
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def subscribe(self, topics: list[str]) -> None:
        self.topics = sorted(set(topics))
        self.consumer.net.want_topics(set(self.topics))
        self._needs_join = True

    # ------------------------------------------------------------------ coordinator requests

    async def _find_coordinator(self) -> Address:
        deadline = now_ms() + self.api_timeout_ms
        while True:
            try:
                _, resp = await self.consumer.net.request_any(ApiKey.FIND_COORDINATOR,
                                                              {"key": self.group_id, "key_type": 0})
                code = resp.get("error", 0)
            except KafkaError as exc:
                code, resp = exc.code, {}
            if not code:
                return resp["host"], resp["port"]
            if code not in _RETRY or now_ms() >= deadline:
                raise KafkaError(code, f"finding the coordinator of group {self.group_id}: "
                                       f"{resp.get('message', '')}", remote=True)
            await asyncio.sleep(RETRY_BACKOFF_MS / 1000)

    async def _call(self, api: ApiKey, body: dict[str, Any], channel: str = "group",
                    timeout_ms: int | None = None) -> dict[str, Any]:
        """One request to the coordinator; retried (finding it again) while the error says it moved."""
        deadline = now_ms() + self.api_timeout_ms + (timeout_ms or 0)
        while True:
            if self._coordinator is None:
                self._coordinator = await self._find_coordinator()
            try:
                resp = await self.consumer.net.request_address(self._coordinator, api, body, channel=channel,
                                                               timeout_ms=timeout_ms)
                code = resp.get("error", 0)
                if not code and api == ApiKey.OFFSET_COMMIT:
                    code = next((p["error"] for t in resp.get("topics", ()) for p in t["partitions"]
                                 if p["error"] in _RETRY), 0)
            except KafkaError as exc:
                code, resp = exc.code, {"error": int(exc.code), "message": exc.message}
            if code in _FIND_AGAIN:
                self._coordinator = None
            if code not in _RETRY or now_ms() >= deadline:
                return resp
            await asyncio.sleep(RETRY_BACKOFF_MS / 1000)

    # ------------------------------------------------------------------ membership

    async def _join(self) -> None:
        """JoinGroup then SyncGroup until this member has the current generation's assignment."""
        if self.auto_commit and self.generation >= 0:
            await self._commit_quietly()                # commit before the partitions move (onPartitionsRevoked)
        while not self._closed:
            meta = encode_subscription(self.topics)
            resp = await self._call(ApiKey.JOIN_GROUP, {
                "group_id": self.group_id, "member_id": self.member_id, "group_instance_id": self.instance_id,
                "session_timeout_ms": self.session_ms,
                "rebalance_timeout_ms": self.rebalance_ms, "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": RANGE, "metadata": meta}]}, timeout_ms=self.rebalance_ms)
            code = resp.get("error", 0)
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = resp["member_id"]
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if code:
                raise KafkaError(code, f"joining group {self.group_id}: {resp.get('message', '')}", remote=True)
            self.member_id, self.generation = resp["member_id"], resp["generation_id"]
            assignments: list[dict[str, Any]] = []
            if resp["leader"] == self.member_id:
                assignments = await self._assign(resp["members"])
            sync = await self._call(ApiKey.SYNC_GROUP, {
                "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": self.instance_id, "assignments": assignments}, timeout_ms=self.rebalance_ms)
            code = sync.get("error", 0)
            if code in _REJOIN:
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue
            if code:
                raise KafkaError(code, f"syncing group {self.group_id}: {sync.get('message', '')}", remote=True)
            await self._on_assigned(decode_assignment(sync["assignment"]))
            self._needs_join = False
            if self._heartbeats is None or self._heartbeats.done():
                self._heartbeats = asyncio.ensure_future(self._heartbeat_loop())
            return

    async def _assign(self, members: list[dict[str, Any]]) -> list[dict[str, Any]]:
        subs = {m["member_id"]: decode_subscription(m["metadata"]) for m in members}
        instances = {m["member_id"]: m["group_instance_id"] for m in members if m.get("group_instance_id")}
        topics = sorted({t for ts in subs.values() for t in ts})
        counts = {}
        for t in topics:
            try:
                counts[t] = len(await self.consumer.partitions_for(t, timeout_ms=self.api_timeout_ms))
            except KafkaError as exc:
                log.info("group %s: topic %s is not assigned: %s", self.group_id, t, exc)
        plan = range_assign(subs, counts, instances)
        return [{"member_id": m, "assignment": encode_assignment(tps)} for m, tps in sorted(plan.items())]

    async def _on_assigned(self, tps: list[TopicPartition]) -> None:
        self.assigned = sorted(tps)
        self._consumed = {tp: o for tp, o in self._consumed.items() if tp in tps}
        self.consumer.assign(self.assigned)
        committed = await self.committed(self.assigned)
        for tp in self.assigned:
            off = committed.get(tp, -1)
            if off >= 0:
                self.consumer.seek(tp, off)
                self._committed[tp] = off
        self._next_commit_ms = now_ms() + self.auto_commit_ms
        if self.on_assign is not None:
            self.on_assign(list(self.assigned))

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.heartbeat_ms / 1000)
            if self._needs_join:
                continue
            resp = await self._call(ApiKey.HEARTBEAT, {"group_id": self.group_id, "generation_id": self.generation,
                                                       "member_id": self.member_id,
                                                       "group_instance_id": self.instance_id}, channel="heartbeat")
            code = resp.get("error", 0)
            if code == ErrorCode.FENCED_INSTANCE_ID:
                log.error("group %s: static member %s was fenced by a newer instance with its group.instance.id",
                          self.group_id, self.instance_id)
                self._fenced = True
                self.consumer._changed.set()
                return
            if code in _REJOIN:
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self._needs_join = True
                self.consumer._changed.set()           # wake a poll that waits for records

    # ------------------------------------------------------------------ polling and commits

    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Records of the assigned partitions; joins (or rejoins) the group first when needed. Raises
        KafkaError(FENCED_INSTANCE_ID) once a newer instance took this member's group.instance.id."""
        if self._fenced:
            raise KafkaError(ErrorCode.FENCED_INSTANCE_ID, f"group {self.group_id}: another consumer joined with "
                                                            f"group.instance.id {self.instance_id}")
        if self._needs_join:
            await self._join()
        recs = await self.consumer.poll(timeout_ms)
        for r in recs:
            self._consumed[TopicPartition(r.topic, r.partition)] = r.offset + 1
        if self.auto_commit and now_ms() >= self._next_commit_ms:
            self._next_commit_ms = now_ms() + self.auto_commit_ms
            await self._commit_quietly()
        return recs

    def consumed_only(self, handed: list[ConsumerRecord], returned: list[ConsumerRecord]) -> None:
        """Count as consumed only `handed`, a prefix of what the last poll returned (the caller
        stopped early): the next commit of each partition is after its last handed record."""
        for r in reversed(returned):
            self._consumed[TopicPartition(r.topic, r.partition)] = r.offset
        for r in handed:
            self._consumed[TopicPartition(r.topic, r.partition)] = r.offset + 1

    async def _commit_quietly(self) -> None:
        try:
            await self.commit()
        except KafkaError as exc:
            log.info("group %s: commit failed: %s", self.group_id, exc)

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (default: every assigned partition's position, as Kafka's allConsumed():
        after the records poll() returned, else where fetching starts)."""
        todo = dict(self._positions() if offsets is None else offsets)
        if offsets is None:
            todo = {tp: o for tp, o in todo.items() if self._committed.get(tp) != o}
        if not todo:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, off in sorted(todo.items()):
            by_topic.setdefault(tp.topic, []).append({"partition": tp.partition, "offset": off})
        resp = await self._call(ApiKey.OFFSET_COMMIT, {
            "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        if resp.get("error") and "topics" not in resp:
            raise KafkaError(resp["error"], resp.get("message", ""), remote=True)
        for t in resp["topics"]:
            for p in t["partitions"]:
                code = p["error"]
                tp = TopicPartition(t["topic"], p["partition"])
                if code in _REJOIN:
                    self._needs_join = True
                if code:
                    raise KafkaError(code, f"committing {tp} in group {self.group_id}", remote=True)
                self._committed[tp] = todo[tp]

    def _positions(self) -> dict[TopicPartition, int]:
        out = {}
        for tp in self.assigned:
            pos = self._consumed.get(tp)
            if pos is None:
                pos = self.consumer.known_position(tp)
            if pos is not None:
                out[tp] = pos
        return out

    async def committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets (-1: none)."""
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        resp = await self._call(ApiKey.OFFSET_FETCH, {"group_id": self.group_id, "topics": [
            {"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        if resp.get("error"):
            raise KafkaError(resp["error"], resp.get("message", ""), remote=True)
        return {TopicPartition(t["topic"], p["partition"]): p["offset"] for t in resp["topics"]
                for p in t["partitions"]}

    def caught_up(self) -> bool:
        return not self._needs_join and bool(self.assigned) and self.consumer.caught_up()

    async def close(self) -> None:
        """Commit (auto commit), leave the group, close the connections."""
        if self._closed:
            return
        try:
            if self.generation >= 0 and not self._needs_join and self.auto_commit:
                await self._commit_quietly()
            if self.member_id and self.instance_id is None:          # a static member does not leave
                try:
                    await self._call(ApiKey.LEAVE_GROUP, {"group_id": self.group_id, "members": [self.member_id]})
                except KafkaError as exc:
                    log.info("group %s: leaving failed: %s", self.group_id, exc)
        finally:
            self._closed = True
            if self._heartbeats is not None:
                self._heartbeats.cancel()
            await self.consumer.close()
