"""The producer's record accumulator: batching by partition, linger and size.

Owns: a queue of open and closed batches per partition, the bytes they hold
(`buffer.memory`), which partitions are ready to send (`linger.ms` passed,
`batch.size` reached, a flush or close asked for, memory exhausted, a
retry's back-off over) and the draining of ready batches into per-broker
requests. Pure: every method takes `now_ms`; the driver (producer.py) owns
the clock, the sockets and the futures, which it keeps in each batch's
`waiter`, `parked` and `outcome` (or attaches through the `new_waiter` factory).

Must not know how batches are encoded or sent, nor what a broker answered
beyond "retry this batch" (`reenqueue`) or "done" (`release`): each batch
appends its records to a builder made by the injected `new_builder`
factory (the record format's, see minibroker.records.new_builder; given
producer id, epoch and base sequence for a batch stamped when it is made,
`take_alone`) and asks it for the bytes once (`encoded`).
Mirrors Kafka's RecordAccumulator (ready / drain / reenqueue / expiredBatches).
"""
from __future__ import annotations

import random
from collections import deque
from typing import Any, NamedTuple, Protocol
from collections.abc import Callable

from minibroker.client.retry import Backoff
from minibroker.client.types import TopicPartition

RECORD_OVERHEAD = 16        # per-record framing estimate (Kafka record: length, attributes, deltas, lengths)
BATCH_OVERHEAD = 61         # header estimate (as Kafka's RecordBatch header)

LeaderOf = Callable[[TopicPartition], "int | None"]


class Builder(Protocol):
    """What a batch needs from the record format: append records, then build once."""

    def append(self, offset: int, timestamp: int | None, key: Any, value: Any, headers: list) -> Any: ...

    def build(self) -> bytes | bytearray: ...


Decoder = Callable[[bytes], list[tuple[bytes | None, bytes | None, int, tuple]]]


class BufferFull(Exception):
    """`buffer.memory` is used up; the caller waits for batches to complete (max.block.ms)."""


def record_size(key: bytes | None, value: bytes | None, headers: Any) -> int:
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        for hk, hv in headers:
            size += len(hk) + (len(hv) if hv else 0) + 4
    return size


def _default_format() -> tuple[Callable[[], Builder], Decoder]:
    """minibroker.records' builder and decoder, for callers that inject none (tests, tools)."""
    from minibroker.records import decode_rows, new_builder
    return new_builder, decode_rows


NO_HEADERS: list[Any] = []     # shared, never mutated: the builder only reads it

class ProducerBatch:
    """Records for one partition that travel and are acknowledged together.

    Records go straight into the format's builder (one C call per record);
    the batch keeps only counts, timestamps and sizes. `encoded()` builds the
    bytes on the first send and keeps them, so a retry resends the same
    batch (as Kafka's producer does).
    Invariants: records are appended only while the batch is the last of its
    partition's queue and not `closed`, and never after `encoded()`;
    `count` is the number appended; `attempts` counts sends so far;
    `retry_at_ms` is 0 until the first retry."""

    __slots__ = ("tp", "builder", "count", "first_ts", "max_ts", "size", "max_size", "created_ms", "retry_at_ms",
                 "attempts", "closed", "waiter", "last_error", "mixed_ts", "_encoded", "_decode", "_decoded",
                 "producer_id", "producer_epoch", "base_seq", "parked", "outcome")

    def __init__(self, tp: TopicPartition, max_size: int, created_ms: int, waiter: Any,
                 builder: Builder | None = None, decode: Decoder | None = None) -> None:
        if builder is None:
            builder, decode = _default_format()[0](), decode or _default_format()[1]
        self.tp = tp
        self.builder: Builder | None = builder
        self.count = 0
        self.first_ts = -1
        self.max_ts = -1
        self.size = BATCH_OVERHEAD
        self.max_size = max_size
        self.created_ms = created_ms
        self.retry_at_ms = 0
        self.attempts = 0
        self.closed = False
        self.waiter = waiter
        # The driver's, beside `waiter`: what it wakes when the batch is done, and how it ended.
        self.parked: list[Any] | None = None
        self.outcome: Any = None
        self.last_error = 0
        # Idempotence: set once, before the first send (`set_producer_state`), kept by every retry.
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_seq = -1
        self.mixed_ts = False         # Invariant: some record's timestamp differs from first_ts
        self._encoded: bytes | None = None
        self._decode = decode
        self._decoded: list[tuple[bytes | None, bytes | None, int, tuple]] | None = None

    def try_append(self, key: bytes | None, value: bytes | None, timestamp_ms: int, headers: Any,
                   size: int) -> int:
        """Append if it fits (a first record always fits); returns its index or -1."""
        n = self.count
        if self.closed or self.builder is None or (n and self.size + size > self.max_size):
            return -1
        if not n:
            self.first_ts = self.max_ts = timestamp_ms
        elif timestamp_ms != self.first_ts:
            self.mixed_ts = True
            if timestamp_ms > self.max_ts:
                self.max_ts = timestamp_ms
        self.builder.append(n, timestamp_ms, key, value, headers or NO_HEADERS)
        self.count = n + 1
        self.size += size
        return n

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_seq: int) -> None:
        """Stamp the idempotent producer's id, epoch and this batch's first
        sequence into the batch (before `encoded()`; retries resend them)."""
        assert self._encoded is None and self.builder is not None
        self.producer_id, self.producer_epoch, self.base_seq = producer_id, producer_epoch, base_seq
        self.builder.set_producer_state(producer_id, producer_epoch, base_seq)

    def encoded(self) -> bytes:
        """The batch's bytes, built on the first call (no record may be appended after)."""
        if self._encoded is None:
            assert self.builder is not None
            self._encoded = bytes(self.builder.build())
            self.builder = None
            self.closed = True
        return self._encoded

    def timestamp(self, index: int) -> int:
        if not self.mixed_ts:
            return self.first_ts
        return self.records[index][2]

    @property
    def records(self) -> list[tuple[bytes | None, bytes | None, int, tuple]]:
        """(key, value, timestamp, headers) per record, decoded from the built
        batch (for reports and per-record metadata; not on the hot path)."""
        if self._decoded is None:
            if self._decode is None:
                raise RuntimeError("this batch was made without a decoder")
            self._decoded = self._decode(self.encoded())
        return self._decoded

    @property
    def full(self) -> bool:
        return self.closed or self.size >= self.max_size

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"ProducerBatch({self.tp}, records={self.count}, size={self.size}, attempts={self.attempts})"


class AppendResult(NamedTuple):
    batch: ProducerBatch
    index: int
    new_batch: bool        # a batch was opened: the sender must arm its linger timer
    batch_full: bool       # the batch that took the record is full: the sender may go now


class ReadyCheck(NamedTuple):           # a NamedTuple: made on every sender pass
    nodes: frozenset[int]
    next_delay_ms: int                     # when to look again if nothing else happens
    unknown_leader_topics: frozenset[str]


NO_DELAY_BOUND = 2**31
_NOTHING_READY = ReadyCheck(frozenset(), NO_DELAY_BOUND, frozenset())

_DEFAULT_BACKOFF = Backoff()      # frozen, so one shared default instance is safe


class RecordAccumulator:
    """Invariants: `buffered_bytes` is the sum of `size` over every batch
    appended to and not yet released (queued or in flight); `queued_count` is the
    number of batches in the queues (`has_queued` without looking).
    Slots: the producer's one-pass append (producer.open_append) reads and sets
    `buffered_bytes` in C, where the extension was built."""

    __slots__ = ("batch_size", "linger_ms", "buffer_memory", "delivery_timeout_ms", "backoff", "new_waiter",
                 "new_builder", "decode", "rand", "_queues", "open_batches", "_muted", "_held", "_drain_index",
                 "queued_count", "buffered_bytes", "flushing", "closing", "memory_waiters")

    def __init__(self, *, batch_size: int = 16384, linger_ms: int = 5, buffer_memory: int = 33_554_432,
                 delivery_timeout_ms: int = 120_000, backoff: Backoff = _DEFAULT_BACKOFF,
                 new_waiter: Callable[[], Any] | None = None,
                 new_builder: Callable[..., Builder] | None = None, decode: Decoder | None = None,
                 rand: Callable[[], float] = random.random) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.delivery_timeout_ms = delivery_timeout_ms
        self.backoff = backoff
        self.new_waiter = new_waiter
        if new_builder is None:
            new_builder, default_decode = _default_format()
            decode = decode or default_decode
        self.new_builder = new_builder
        self.decode = decode
        self.rand = rand
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        # Invariant: the last, unclosed batch per partition (Producer.send appends to it directly)
        self.open_batches: dict[TopicPartition, ProducerBatch] = {}
        self._muted: set[TopicPartition] = set()
        # Invariant: partitions whose batches without a sequence yet wait (`hold`): batches sequenced under
        # an older producer id are still in flight or to be retried, and must be written first.
        self._held: set[TopicPartition] = set()
        self._drain_index = 0
        self.queued_count = 0
        self.buffered_bytes = 0
        self.flushing = 0          # Invariant: > 0 while some flush() waits; makes every batch ready
        self.closing = False
        self.memory_waiters = 0    # > 0 while a send() waits for memory; makes every batch ready

    # -- appending ---------------------------------------------------------

    def append(self, tp: TopicPartition, key: bytes | None, value: bytes | None, headers: Any,
               timestamp_ms: int, now_ms: int, size: int | None = None) -> tuple[ProducerBatch, int, bool, bool]:
        """Called by send(): put one record in its partition's open batch, or open one.
        `size` is `record_size(key, value, headers)` when the caller has it already.
        Returns `(batch, index, new_batch, batch_full)` (see AppendResult; a plain
        tuple because this runs once per record)."""
        if size is None:
            size = record_size(key, value, headers)
        buffered = self.buffered_bytes + size
        if buffered > self.buffer_memory and self.buffered_bytes:
            raise BufferFull(f"buffer.memory={self.buffer_memory} exhausted")
        b = self.open_batches.get(tp)
        if b is not None:
            n = b.try_append(key, value, timestamp_ms, headers, size)
            if n >= 0:
                self.buffered_bytes = buffered
                return (b, n, False, b.size >= b.max_size)
            b.closed = True
            del self.open_batches[tp]
        q = self._queues.get(tp)
        if q is None:
            q = self._queues[tp] = deque()
        batch = ProducerBatch(tp, self.batch_size, now_ms, None if self.new_waiter is None else self.new_waiter(),
                              self.new_builder(), self.decode)
        batch.try_append(key, value, timestamp_ms, headers, size)
        self.buffered_bytes += batch.size
        q.append(batch)
        self.queued_count += 1
        self.open_batches[tp] = batch
        return (batch, 0, True, batch.size >= batch.max_size)

    def has_room(self, tp: TopicPartition, size: int) -> bool:
        """Whether the partition's open batch would take a record of `size` bytes."""
        b = self.open_batches.get(tp)
        return b is not None and b.size + size <= b.max_size

    def _close(self, batch: ProducerBatch) -> None:
        batch.closed = True
        if self.open_batches.get(batch.tp) is batch:
            del self.open_batches[batch.tp]

    # -- readiness and draining ----------------------------------------------

    def ready(self, now_ms: int, leader_of: LeaderOf) -> ReadyCheck:
        """Which brokers have at least one sendable batch, and when to check again."""
        if not self.queued_count:
            return _NOTHING_READY
        nodes: set[int] = set()
        unknown: set[str] = set()
        next_delay = NO_DELAY_BOUND
        force = self.flushing > 0 or self.closing or self.memory_waiters > 0
        held = self._held
        for tp, q in self._queues.items():
            if not q or tp in self._muted:
                continue
            leader = leader_of(tp)
            if leader is None:
                unknown.add(tp.topic)
                continue
            if leader in nodes:
                continue
            head = q[0]
            if held and tp in held and head.base_seq < 0:
                continue
            if head.retry_at_ms > now_ms:
                next_delay = min(next_delay, head.retry_at_ms - now_ms)
                continue
            full = len(q) > 1 or head.full
            wait_left = head.created_ms + self.linger_ms - now_ms if head.attempts == 0 else 0
            if full or force or wait_left <= 0:
                nodes.add(leader)
            else:
                next_delay = min(next_delay, wait_left)
        return ReadyCheck(frozenset(nodes), next_delay, frozenset(unknown))

    def drain(self, now_ms: int, nodes: set[int] | frozenset[int], leader_of: LeaderOf,
              max_request_size: int) -> dict[int, list[ProducerBatch]]:
        """Take at most one ready batch per partition for each of `nodes`, up to
        `max_request_size` per request (the first batch always goes)."""
        if not self.queued_count:
            return {}
        out: dict[int, list[ProducerBatch]] = {n: [] for n in nodes}
        sizes: dict[int, int] = {n: 0 for n in nodes}
        tps = list(self._queues)
        start = self._drain_index % len(tps)
        self._drain_index += 1
        for i in range(len(tps)):
            tp = tps[(start + i) % len(tps)]
            q = self._queues[tp]
            if not q or tp in self._muted:
                continue
            leader = leader_of(tp)
            if leader not in out:
                continue
            head = q[0]
            if head.retry_at_ms > now_ms or (tp in self._held and head.base_seq < 0):
                continue
            if out[leader] and sizes[leader] + head.size > max_request_size:
                continue
            q.popleft()
            self.queued_count -= 1
            self._close(head)
            head.attempts += 1
            sizes[leader] += head.size
            out[leader].append(head)
        return {n: bs for n, bs in out.items() if bs}

    def sendable_alone(self, batch: ProducerBatch, now_ms: int) -> bool:
        """Whether `batch` is the only batch queued and `ready` would find it sendable now (its
        partition not muted, not expired, past its linger or full or forced): then a sender pass
        would drain it alone (`take`), once its leader has a free, connected request slot."""
        if (self.queued_count != 1 or self.open_batches.get(batch.tp) is not batch or batch.tp in self._muted
                or batch.tp in self._held):
            return False
        if now_ms - batch.created_ms >= self.delivery_timeout_ms:
            return False
        return (batch.created_ms + self.linger_ms <= now_ms or batch.size >= batch.max_size or self.flushing > 0
                or self.closing or self.memory_waiters > 0)

    def take(self, batch: ProducerBatch) -> None:
        """`drain` of the one batch `sendable_alone` allowed."""
        tp = batch.tp
        if self._queues[tp].popleft() is not batch:
            raise AssertionError(f"{batch} was not the head of its queue")
        self.queued_count -= 1
        self._drain_index += 1
        batch.closed = True
        del self.open_batches[tp]             # sendable_alone: it was the partition's open batch
        batch.attempts += 1

    def take_alone(self, tp: TopicPartition, key: bytes | None, value: bytes | None, timestamp_ms: int,
                   size: int, producer_state: tuple[int, int, int] | None = None) -> tuple[ProducerBatch, bytes] | None:
        """`append`, `sendable_alone` and `take` in one for a record sent at once (send_and_wait's),
        with `timestamp_ms` as now: when nothing is queued, a batch of this one record, taken as `take`
        takes it and its bytes built, or None (nothing changed) when `append` would raise BufferFull or
        `ready` would not find the new batch sendable now. `size` is `record_size(key, value, None)`;
        `producer_state` (producer id, epoch, base sequence) is stamped in as `set_producer_state` would,
        for which `new_builder` takes them as arguments (the producer's does)."""
        if self.queued_count or tp in self._muted or tp in self._held or self.delivery_timeout_ms <= 0:
            return None
        if self.buffered_bytes + size > self.buffer_memory and self.buffered_bytes:
            return None
        total = BATCH_OVERHEAD + size
        if not (self.linger_ms <= 0 or total >= self.batch_size or self.flushing > 0 or self.closing
                or self.memory_waiters > 0):
            return None
        if producer_state is None:
            builder = self.new_builder()
        else:
            builder = self.new_builder(*producer_state)
        builder.append(0, timestamp_ms, key, value, NO_HEADERS)
        batch = ProducerBatch(tp, self.batch_size, timestamp_ms,
                              None if self.new_waiter is None else self.new_waiter(), builder, self.decode)
        batch.count = 1
        batch.first_ts = batch.max_ts = timestamp_ms
        batch.size = total
        batch.attempts = 1
        if producer_state is not None:
            batch.producer_id, batch.producer_epoch, batch.base_seq = producer_state
        encoded = batch.encoded()
        self.buffered_bytes += total
        if tp not in self._queues:          # as `append`: the partition's place in drain's rotation
            self._queues[tp] = deque()
        self._drain_index += 1
        return batch, encoded

    def reenqueue(self, batch: ProducerBatch, now_ms: int) -> None:
        """A sent batch failed retriably: back to the front of its queue, after a back-off."""
        batch.retry_at_ms = now_ms + self.backoff.delay_ms(batch.attempts - 1, self.rand())
        q = self._queues.setdefault(batch.tp, deque())
        self.queued_count += 1
        if batch.base_seq >= 0:
            # Idempotence: retried batches go back in sequence order (Kafka's insertInSequenceOrder),
            # ahead of batches not sent yet.
            i = 0
            while i < len(q) and 0 <= q[i].base_seq < batch.base_seq and q[i].producer_id == batch.producer_id:
                i += 1
            q.insert(i, batch)
            return
        q.appendleft(batch)

    def release(self, batch: ProducerBatch) -> None:
        """A batch is done (acknowledged or failed for good): free its memory."""
        self.buffered_bytes -= batch.size

    def expired(self, now_ms: int) -> list[ProducerBatch]:
        """Queued batches whose `delivery.timeout.ms` has passed; removed from the queues."""
        out: list[ProducerBatch] = []
        if not self.queued_count:
            return out
        for q in self._queues.values():
            while q and now_ms - q[0].created_ms >= self.delivery_timeout_ms:
                b = q.popleft()
                self.queued_count -= 1
                self._close(b)
                out.append(b)
        return out

    def abort_all(self) -> list[ProducerBatch]:
        """Every queued batch, removed (used when the producer is closed without flushing)."""
        out = [b for q in self._queues.values() for b in q]
        for b in out:
            b.closed = True
        self._queues.clear()
        self.queued_count = 0
        self.open_batches.clear()
        return out

    # -- ordering (max.in.flight.requests.per.connection=1) -------------------

    def mute(self, tp: TopicPartition) -> None:
        self._muted.add(tp)

    def unmute(self, tp: TopicPartition) -> None:
        self._muted.discard(tp)

    # -- a new producer id (idempotence) ---------------------------------------

    def hold(self, tp: TopicPartition) -> None:
        """Batches of `tp` not yet sequenced wait: some sequenced under an older producer id must go first."""
        self._held.add(tp)

    def release_hold(self, tp: TopicPartition) -> None:
        self._held.discard(tp)

    # -- introspection ------------------------------------------------------

    def queued(self) -> list[ProducerBatch]:
        """Every batch still waiting in a queue (not in flight)."""
        return [b for q in self._queues.values() for b in q]

    def has_queued(self) -> bool:
        return self.queued_count > 0

    def queued_batches(self, tp: TopicPartition) -> int:
        return len(self._queues.get(tp, ()))
