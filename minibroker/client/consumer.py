"""The consumer: assign / seek / poll / follow, with follower reads (KIP-392).

Owns: one Fetch in flight per broker (long-polls of `fetch.max.wait.ms`;
a partition's next one leaves as soon as poll() has drained its buffer,
before the records are returned, so it travels while the application works),
the buffer of decoded records not yet handed out, position resets through
ListOffsets, and carrying `client.rack` to the leader. Where to fetch from
and how to react to each partition's result is decided in fetch_state.py;
the metadata cache says who leads.

Records are handed out in offset order per partition and only below the
high watermark the answering replica reported (H5/FF4): a record at or
above it is never returned, even if a broker sent it.
There are no consumer groups: partitions are assigned explicitly.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any
from collections.abc import AsyncIterator, Callable, Iterable, Mapping

from minibroker.aio import wait_event
from minibroker.client.config import CONSUMER_DEFAULTS, client_config
from minibroker.client.fetch_state import EARLIEST, LATEST, NONE, FetchState, Reaction
from minibroker.client.network import ClientNetwork, now_ms
from minibroker.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets_once
from minibroker.client.retry import needs_metadata
from minibroker.client.types import ConsumerRecord, TopicPartition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.api import ApiKey
from minibroker.records import decode_into

log = logging.getLogger("minibroker.consumer")


class Consumer:
    """`async with Consumer("127.0.0.1:9092", {"client.rack": "zone-b"}) as c: c.assign([...]); await c.poll()`."""

    def __init__(self, bootstrap_servers: str | list[str] | None = None,
                 config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.cfg = client_config(CONSUMER_DEFAULTS, config, kwargs, bootstrap_servers)
        self.net = ClientNetwork(self.cfg)
        self.state = FetchState(auto_offset_reset=self.cfg.get("auto.offset.reset"),
                                metadata_max_age_ms=self.cfg.get_int("metadata.max.age.ms"),
                                retry_backoff_ms=self.cfg.get_int("retry.backoff.ms"))
        self.rack = self.cfg.get("client.rack")
        self.max_wait_ms = self.cfg.get_int("fetch.max.wait.ms")
        self.min_bytes = self.cfg.get_int("fetch.min.bytes")
        self.max_bytes = self.cfg.get_int("fetch.max.bytes")
        self.partition_max_bytes = self.cfg.get_int("max.partition.fetch.bytes")
        self.max_poll_records = self.cfg.get_int("max.poll.records")
        self.request_timeout_ms = self.cfg.get_int("request.timeout.ms")
        self._buffers: dict[TopicPartition, RecordBuffer] = {}
        self._fetches: dict[int, object] = {}           # Invariant: at most one Fetch in flight per broker (its token)
        self._resets: set[asyncio.Task] = set()
        self._changed = asyncio.Event()                 # set when anything a poll may wait for happened
        self._errors: list[KafkaError] = []
        self._started = False
        self._closed = False
        self.on_note: Callable[[str], None] | None = None   # routing notes (preferred replica, resets)

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> Consumer:
        if not self._started:
            self._started = True
            self.net.listeners.append(self._changed.set)
            self.net.start()
        return self

    async def __aenter__(self) -> Consumer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._fetches.clear()                       # their answers, or failures as the connections close, are dropped
        tasks = list(self._resets)
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        await self.net.close()

    # -- assignment and positions -------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        self.state.assign(tps)
        self._buffers = {tp: self._buffers.get(tp) or RecordBuffer() for tp in tps}
        self.net.want_topics({tp.topic for tp in tps})
        self._changed.set()

    async def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        await self.start()
        self.net.want_topics([topic])
        await self.net.wait_for(lambda: self.net.cache.partition_count(topic) is not None
                                or self.net.cache.topic_error(topic) not in
                                (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE),
                                timeout_ms or self.cfg.get_int("default.api.timeout.ms"), f"topic {topic}")
        n = self.net.cache.partition_count(topic)
        if n is None:
            raise KafkaError(self.net.cache.topic_error(topic), f"topic {topic}", remote=True)
        return list(range(n))

    async def assign_topic(self, topic: str, partitions: Iterable[int] | None = None,
                           timeout_ms: int | None = None) -> list[TopicPartition]:
        """Assign all (or the given) partitions of a topic, waiting for its metadata."""
        all_parts = await self.partitions_for(topic, timeout_ms)
        chosen = list(partitions) if partitions is not None else all_parts
        for p in chosen:
            if p not in all_parts:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {p}")
        tps = [TopicPartition(topic, p) for p in chosen]
        self.assign(list(self.state.parts) + [tp for tp in tps if tp not in self.state.parts])
        return tps

    def assignment(self) -> list[TopicPartition]:
        return list(self.state.parts)

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        tp = TopicPartition(*tp)
        self.state.seek(tp, offset)
        self._buffers[tp].clear()
        self._changed.set()

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp in (tps or self.assignment()):
            self.state.request_reset(TopicPartition(*tp), EARLIEST)
            self._buffers[TopicPartition(*tp)].clear()
        self._changed.set()

    def seek_to_end(self, *tps: TopicPartition) -> None:
        for tp in (tps or self.assignment()):
            self.state.request_reset(TopicPartition(*tp), LATEST)
            self._buffers[TopicPartition(*tp)].clear()
        self._changed.set()

    async def position(self, tp: TopicPartition | tuple[str, int], timeout_ms: int | None = None) -> int:
        """The offset of the next record poll() will return for `tp` (resolving a reset if needed)."""
        await self.start()
        tp = TopicPartition(*tp)
        buf = self._buffers.get(tp)
        if buf:
            return buf[0].offset
        deadline = now_ms() + (timeout_ms or self.cfg.get_int("default.api.timeout.ms"))
        while self.state.position(tp) is None:
            self._raise_pending()
            self._maybe_reset(now_ms())
            left = deadline - now_ms()
            if left <= 0:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{tp}: position not resolved in time")
            await self._wait_changed(min(left, 100))
        return self.state.position(tp)  # type: ignore[return-value]

    def known_position(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        """position() without waiting: None while a reset is unresolved."""
        tp = TopicPartition(*tp)
        buf = self._buffers.get(tp)
        return buf[0].offset if buf else self.state.position(tp)

    def highwater(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        """The high watermark the last Fetch response for `tp` reported (None before one)."""
        hw = self.state.parts[TopicPartition(*tp)].high_watermark
        return None if hw < 0 else hw

    def fetched_from(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        """The broker that answered the last Fetch for `tp` (leader or preferred read replica)."""
        return self.state.parts[TopicPartition(*tp)].last_fetched_from

    def preferred_replica(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        return self.state.parts[TopicPartition(*tp)].preferred_replica

    def caught_up(self) -> bool:
        """True when every assigned partition's position has reached the HW last reported,
        and nothing is buffered."""
        for tp, st in self.state.parts.items():
            if self._buffers.get(tp) or st.position is None or st.high_watermark < 0 or st.position < st.high_watermark:
                return False
        return True

    # -- polling -------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records fetched so far (up to max.poll.records), waiting up to `timeout_ms` for some."""
        await self.start()
        limit = max_records or self.max_poll_records
        deadline = now_ms() + timeout_ms
        while True:
            self._raise_pending()
            out = self._drain(limit)
            if out:
                # Before handing the records out, send the next Fetch for each partition this poll
                # drained, so it travels while the application works (KafkaConsumer.pollForFetches).
                self._maybe_fetch(now_ms())
                return out
            now = now_ms()
            self._maybe_reset(now)
            self._maybe_fetch(now)
            left = deadline - now
            if left <= 0:
                return []
            await self._wait_changed(min(left, self._next_retry_delay(now)))

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        """Follow: yield records forever (until the consumer is closed)."""
        while not self._closed:
            for rec in await self.poll(timeout_ms=self.max_wait_ms):
                yield rec

    def _drain(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        for buf in self._buffers.values():
            if buf:
                got = buf.take(limit - len(out))
                if out:
                    out += got
                else:
                    out = got
            if len(out) >= limit:
                break
        return out

    def _raise_pending(self) -> None:
        if self._errors:
            err = self._errors.pop(0)
            raise err

    async def _wait_changed(self, ms: int) -> None:
        self._changed.clear()
        await wait_event(self._changed, max(ms, 1) / 1000)

    def _next_retry_delay(self, now: int) -> int:
        waits = [st.retry_at_ms - now for st in self.state.parts.values() if st.retry_at_ms > now]
        return min(waits) if waits else 1000

    def _note(self, r: Reaction) -> None:
        if r.refresh_metadata:
            self.net.request_update()
        if r.error is not None:
            self._errors.append(r.error)
        if r.note:
            log.debug("%s", r.note)
            if self.on_note is not None:
                self.on_note(r.note)

    # -- resets (ListOffsets) -------------------------------------------------------

    def _maybe_reset(self, now: int) -> None:
        pending = self.state.needs_reset(now)
        if not pending:
            return
        specs: dict[TopicPartition, int] = {}
        for tp, strategy in pending.items():
            if strategy == NONE:
                self.state.parts[tp].reset = None
                self.state.parts[tp].retry_at_ms = 2**62
                self._errors.append(KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                               f"{tp}: no position and auto.offset.reset=none"))
                continue
            if self.net.cache.leader_id(tp) is None:
                self.net.want_topics([tp.topic])
                self.net.request_update()
                self.state.on_reset_failed(tp, now)
                continue
            specs[tp] = EARLIEST_TIMESTAMP if strategy == EARLIEST else LATEST_TIMESTAMP
            self.state.parts[tp].in_flight = True
        if specs:
            task = asyncio.ensure_future(self._reset(specs))
            self._resets.add(task)
            task.add_done_callback(self._resets.discard)

    async def _reset(self, specs: dict[TopicPartition, int]) -> None:
        answers, errors = await list_offsets_once(self.net, specs, timeout_ms=self.request_timeout_ms)
        for tp, res in answers.items():
            self.state.on_reset(tp, res.offset)
            self._note(Reaction(note=f"{tp}: position reset to {res.offset}"))
        now = now_ms()
        for tp, err in errors.items():
            self.state.on_reset_failed(tp, now)
            if needs_metadata(int(err.code)) or err.code == ErrorCode.NETWORK_EXCEPTION:
                self.net.request_update()
            elif not err.retriable:
                self._errors.append(err)
        self._changed.set()

    # -- fetching ---------------------------------------------------------------------

    def _maybe_fetch(self, now: int) -> None:
        plan: dict[int, list[TopicPartition]] = {}
        without_rack: set[int] = set()
        for tp in self.state.fetchable(now):
            if self._buffers.get(tp):
                continue                               # hand out what we have first
            node, with_rack, reaction = self.state.route(tp, now, self.net.cache.leader_id(tp),
                                                         lambda n: self.net.cache.node(n) is not None)
            self._note(reaction)
            if node is not None and not with_rack:
                without_rack.add(node)
            if node is None:
                self.net.want_topics([tp.topic])
                self.net.request_update()
                continue
            if node in self._fetches:
                continue
            plan.setdefault(node, []).append(tp)
        for node, tps in plan.items():
            for tp in tps:
                self.state.on_sent(tp)
            self._send_fetch(node, tps, rack="" if node in without_rack else self.rack)

    def _send_fetch(self, node: int, tps: list[TopicPartition], rack: str) -> None:
        """One Fetch to `node`, written now: from a poll about to hand records out, it travels while
        the application works on them (KafkaConsumer.pollForFetches). Its answer comes to `_fetched`.
        `rack` is empty while a partition's preferred read replica is unknown to our metadata, so the
        leader serves it instead of redirecting again."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "fetch_offset": self.state.parts[tp].position,
                "current_leader_epoch": self.net.cache.leader_epoch(tp),
                "partition_max_bytes": self.partition_max_bytes})
        body = {"replica_id": -1, "max_wait_ms": self.max_wait_ms, "min_bytes": self.min_bytes,
                "max_bytes": self.max_bytes, "rack_id": rack,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
        token = object()
        self._fetches[node] = token
        self.net.send_request(node, ApiKey.FETCH, body, functools.partial(self._fetched, node, tps, token),
                              timeout_ms=self.request_timeout_ms + self.max_wait_ms)

    def _fetched(self, node: int, tps: list[TopicPartition], token: object, resp: dict[str, Any] | None,
                 error: KafkaError | None) -> None:
        """Triggered by the answer to the Fetch `token` names (in the read callback that decoded it),
        or by its failure (timed out, connection lost: a later loop turn)."""
        if self._fetches.get(node) is not token:
            return                                  # the consumer closed while it was in flight
        del self._fetches[node]
        self._changed.set()
        if error is None and resp is not None and resp.get("error"):
            error = KafkaError(resp["error"], resp.get("message", ""), remote=True)
        if error is not None or resp is None:
            log.debug("fetch from broker %d failed: %s", node, error)
            self._note(self.state.on_request_failed(tps, node, now_ms()))
            return
        self._handle_fetch(node, tps, resp)

    def _handle_fetch(self, node: int, sent: list[TopicPartition], resp: dict[str, Any]) -> None:
        now = now_ms()
        answered: set[TopicPartition] = set()
        for t in resp.get("topics", ()):
            for p in t.get("partitions", ()):
                tp = TopicPartition(t["topic"], p["partition"])
                st = self.state.parts.get(tp)
                if st is None or tp not in sent:
                    continue
                answered.add(tp)
                if self.state.drop_if_stale(tp):
                    log.debug("%s: discarding a stale fetch answer (the position moved while it was in flight)", tp)
                    continue
                cl = p.get("current_leader")
                if cl and self.net.cache.update_leader(tp, cl.get("leader_id", -1), cl.get("leader_epoch", -1)):
                    self._changed.set()
                code = p.get("error", 0)
                if code:
                    self._note(self.state.on_error(tp, node, code, now, p.get("message", "")))
                    continue
                hw = p.get("high_watermark", -1)
                next_offset = self._buffer_records(tp, st.position, hw, p.get("records") or b"")
                self._note(self.state.on_data(
                    tp, node, next_offset=next_offset, high_watermark=hw,
                    log_start_offset=p.get("log_start_offset", -1),
                    preferred_read_replica=p.get("preferred_read_replica", -1), now_ms=now))
        missing = [tp for tp in sent if tp not in answered and tp in self.state.parts]
        for tp in missing:
            self.state.parts[tp].in_flight = False

    def _buffer_records(self, tp: TopicPartition, position: int | None, hw: int, records: bytes) -> int | None:
        """Decode a fetched partition's records into its buffer (never a record at or above the HW)."""
        if not records or position is None:
            return None
        fresh: list[ConsumerRecord] = []
        try:
            nxt = decode_into(fresh, records, tp.topic, tp.partition, ConsumerRecord, min_offset=position,
                              stop_offset=hw if hw >= 0 else -1)
        except KafkaError as exc:
            self._errors.append(KafkaError(exc.code, f"{tp} at offset {position}: {exc.message}"))
            nxt = fresh[-1].offset + 1 if fresh else None
        self._buffers[tp].extend(fresh)
        return nxt


class RecordBuffer:
    """Fetched records of one partition not yet returned by poll(): whole decoded lists,
    handed out by slicing (no per-record work). Invariant: `_pos` <= len(`_records`)."""

    __slots__ = ("_records", "_pos")

    def __init__(self) -> None:
        self._records: list[ConsumerRecord] = []
        self._pos = 0

    def __len__(self) -> int:
        return len(self._records) - self._pos

    def __getitem__(self, i: int) -> ConsumerRecord:
        if i != 0 or not len(self):
            raise IndexError(i)
        return self._records[self._pos]

    def extend(self, records: list[ConsumerRecord]) -> None:
        if not records:
            return
        if not len(self):
            self._records, self._pos = records, 0
        else:
            self._records = self._records[self._pos:] + records
            self._pos = 0

    def take(self, n: int) -> list[ConsumerRecord]:
        pos, recs = self._pos, self._records
        if pos == 0 and n >= len(recs):
            self._records = []
            return recs
        out = recs[pos:pos + n]
        self._pos = pos + len(out)
        if self._pos >= len(recs):
            self._records, self._pos = [], 0
        return out

    def clear(self) -> None:
        self._records, self._pos = [], 0
