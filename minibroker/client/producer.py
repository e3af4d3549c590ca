"""The producer: batching, acks, retries with back-off, a future per record.

Owns: the sender that drains the accumulator into Produce requests (one
per broker, at most `max.in.flight.requests.per.connection` in flight to
each), the per-batch futures, and the reactions to Produce results:
retriable errors go back to the accumulator after a back-off (and a
metadata refresh for the NOT_LEADER_OR_FOLLOWER family) until `retries` or
`delivery.timeout.ms` run out; other errors fail the batch's records.
Batching decisions live in accumulator.py, retry decisions in retry.py.

The sender is Kafka's Sender.runOnce as loop callbacks rather than a task
to wake: a pass (expire, find ready brokers, drain, write) is scheduled for
the next loop turn when something may have become sendable (a new or full
batch, a freed request slot, a retry, a connection), runs when a linger,
back-off or expiry it computed comes due, and runs at once when a caller is
about to wait for a record (send_and_wait, flush). Answers are handled in
the read callback that decodes them (Connection.send_request): the batch is
completed and a task awaiting one of its records is woken directly.

Idempotence (`enable.idempotence=true`, the default as in Kafka >= 3.0,
KIP-98/KIP-679): the producer gets a producer id from InitProducerId before
its first send, gives each batch the next sequence of its partition when it
is first drained, and resends a retried batch with the same id, epoch and
sequence, so the leader answers a batch it already has with its original
offset instead of storing it twice. It requires acks=all, retries > 0 and
max.in.flight.requests.per.connection <= 5; set explicitly with a conflicting
setting it is a ConfigError, left at its default it is turned off (Kafka
3.2+). Retried batches go back in sequence order; OUT_OF_ORDER_SEQUENCE_NUMBER
for a batch with an earlier batch of its partition still unacknowledged is
retried (that batch failed first), otherwise it fails the batch and the
producer takes a new producer id (sequences restart at 0), a simplified
form of KIP-360's epoch bump. A partition's batches still sequenced under
the old id (in flight, or to be retried) keep it and go first: its new
batches wait until they are done, so a record is never written before one
sent earlier (Kafka's RecordAccumulator does not drain a partition with
in-flight batches of a stale producer id and epoch).

Without idempotence (no producer ids on the wire), a retried batch can be
written twice (REQUEST_TIMED_OUT after the leader appended), and with more
than one request in flight per broker a retried batch can land after a later
one; set `max.in.flight.requests.per.connection=1` to keep per-partition order.

One deliberate difference from Kafka's Sender: a batch that times out
(REQUEST_TIMED_OUT, from the broker or locally) also asks for a metadata
refresh. Kafka refreshes only on disconnects and InvalidMetadata errors, so
a producer stuck on a leader cut off from its cluster (which still believes
it leads and answers every acks=all produce with a timeout) keeps retrying
it until `metadata.max.age.ms`; here it finds the new leader within a retry
or two.
"""
from __future__ import annotations

import asyncio
import logging

import msgpack
from typing import Any
from collections.abc import Callable, Iterable, Mapping

from functools import partial

from minibroker.aio import wait_event
from minibroker import clock
from minibroker.client.accumulator import (NO_DELAY_BOUND, NO_HEADERS, RECORD_OVERHEAD, BufferFull, ProducerBatch,
                                           RecordAccumulator, record_size)
from minibroker.client.config import PRODUCER_DEFAULTS, client_config, parse_acks
from minibroker.config import ConfigError
from minibroker.client.network import ClientNetwork
from minibroker.net.connection import Body, Connection, EncodedBody
from minibroker.client.partitioner import StickyPartitioner, partition_for_key
from minibroker.client.retry import Backoff, decide_retry
from minibroker.client.types import RecordMetadata, TopicPartition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.api import ApiKey
from minibroker.codec import NONE as NO_COMPRESSION, codec_id
from minibroker import records
from minibroker.records import decode_rows, header_list, new_builder


def encode(batch: ProducerBatch) -> bytes:
    """The batch's records as one Kafka v2 record batch (built once, kept for retries)."""
    return batch.encoded()


def _bin_header(n: int) -> bytes:
    """msgpack's header for `n` bytes of binary data (bin 8, 16 or 32)."""
    if n < 0x100:
        return bytes((0xC4, n))
    if n < 0x10000:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


class ProduceEncoder:
    """A Produce body of one batch in msgpack, from pieces encoded once: the same bytes as
    packing {"acks", "timeout_ms", "topics": [{"topic", "partitions": [{"partition", "records"}]}]}.
    Invariant: `_heads[tp]` encodes the topics list of `tp` up to its "records" key."""

    def __init__(self, acks: int, timeout_ms: int) -> None:
        self._packer = msgpack.Packer(use_bin_type=True)
        pack = self._packer.pack
        self._head = b"".join(map(pack, ("acks", acks, "timeout_ms", timeout_ms, "topics")))
        self._heads: dict[TopicPartition, bytes] = {}

    def body(self, tp: TopicPartition, records: bytes) -> EncodedBody:
        head = self._heads.get(tp)
        if head is None:
            p = self._packer
            head = self._heads[tp] = b"".join((
                p.pack_array_header(1), p.pack_map_header(2), p.pack("topic"), p.pack(tp.topic), p.pack("partitions"),
                p.pack_array_header(1), p.pack_map_header(2), p.pack("partition"), p.pack(tp.partition),
                p.pack("records")))
        return 3, (self._head, head, _bin_header(len(records)), records)

log = logging.getLogger("minibroker.producer")
_PRODUCE = int(ApiKey.PRODUCE)        # a plain int: an IntEnum member hashes and converts through Python code


def now_ms() -> int:
    """The producer's clock for linger, back-off and delivery timeouts: wall-clock ms,
    as Kafka's time.milliseconds() (record timestamps come from the same call)."""
    return clock.now_ms()


try:    # one RecordFuture per record sent: its two fields are set in C where the extension was built
    from minibroker._speedups import RecordRef as _RecordRef
except ImportError:  # pragma: no cover - the C extension was not built
    class _RecordRef:  # type: ignore[no-redef]
        __slots__ = ("_batch", "_index")

        def __init__(self, batch: ProducerBatch, index: int) -> None:
            self._batch = batch
            self._index = index


try:    # a RecordMetadata per awaited record, made in C: the frozen dataclass's __init__ costs 4 object.__setattr__
    from minibroker._speedups import SlotsMaker
    _metadata: Callable[[str, int, int, int], RecordMetadata] = SlotsMaker(
        RecordMetadata, ("topic", "partition", "offset", "timestamp"))
except ImportError:  # pragma: no cover - the C extension was not built
    _metadata = RecordMetadata


def _builder_factory(compression: int) -> Callable[..., Any]:
    """What makes a batch's builder, given nothing or (producer id, epoch, base sequence):
    records.new_builder(compression, ...), or for uncompressed batches the C builder's class
    itself where it was built (the same builder, two Python calls less)."""
    builder_class = getattr(records, "RecordsBuilder", None)
    if compression == NO_COMPRESSION and builder_class is not None:
        return builder_class  # type: ignore[no-any-return]
    return lambda *producer_state: new_builder(compression, *producer_state)


def _park(batch: ProducerBatch, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
    """A future of the caller's own, set when `batch` is done (Producer._complete)."""
    fut = loop.create_future()
    if batch.parked is None:
        batch.parked = [fut]
    else:
        batch.parked.append(fut)
    return fut


class RecordFuture(_RecordRef):
    """The outcome of one sent record; `await` it for `RecordMetadata` or a KafkaError.

    Cheap by design (two fields, `_batch` and `_index`): it shares its batch's
    outcome, (base offset, error, log append time) once the batch is done, and
    computes its own offset as the batch's base offset plus its index. Whatever
    waits for it parks a future of its own on the batch (Producer._complete sets
    them): cancelling a task awaiting one record leaves the batch alone."""

    __slots__ = ()
    _batch: ProducerBatch

    def __await__(self):
        b = self._batch
        if b.outcome is None:
            yield from _park(b, asyncio.get_running_loop())
        return self.result()

    def done(self) -> bool:
        return self._batch.outcome is not None

    def result(self) -> RecordMetadata:
        outcome = self._batch.outcome
        if outcome is None:
            raise asyncio.InvalidStateError("the record's batch is not done yet")
        base, error, ts = outcome
        if error is not None:
            raise error
        b = self._batch
        tp = b.tp
        if ts < 0:
            ts = b.timestamp(self._index) if b.mixed_ts else b.first_ts
        return _metadata(tp.topic, tp.partition, -1 if base < 0 else base + self._index, ts)

    def exception(self) -> KafkaError | None:
        outcome = self._batch.outcome
        if outcome is None:
            raise asyncio.InvalidStateError("the record's batch is not done yet")
        return outcome[1]  # type: ignore[no-any-return]

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        """Call `fn(self)` in a loop turn after the batch is done (now, if it is), as a future does."""
        if self._batch.outcome is not None:
            asyncio.get_running_loop().call_soon(fn, self)
        else:
            _park(self._batch, asyncio.get_running_loop()).add_done_callback(lambda _f: fn(self))


    @property
    def topic_partition(self) -> TopicPartition:
        return self._batch.tp


class _OpenAppendPy:
    """The Python twin of minibroker._speedups.OpenAppend, `send`'s one-pass append, called
    `(batch, key, value, max_request_size)` once per record of `send`'s common case: the record
    goes into `batch`, its partition's open batch, when the batch takes it (not closed, within
    `batch.size`), it is within max.request.size and `buffer.memory` has room; then the batch's
    counters and the accumulator's bytes are updated as `ProducerBatch.try_append` and
    `RecordAccumulator.append` would, the sender is woken if the batch is now full, and the
    record's future is returned. None (nothing changed) otherwise: `_send` decides."""

    __slots__ = ("acc", "now_ms", "wakeup")

    def __init__(self, acc: RecordAccumulator, now_ms: Callable[[], int], wakeup: Callable[[], None]) -> None:
        self.acc, self.now_ms, self.wakeup = acc, now_ms, wakeup

    def __call__(self, b: ProducerBatch, key: bytes | None, value: bytes | None,
                 max_request_size: int) -> RecordFuture | None:
        if b.closed or b.builder is None:
            return None
        size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        total = b.size + size
        acc = self.acc
        if total > b.max_size or size > max_request_size or acc.buffered_bytes + size > acc.buffer_memory:
            return None
        now = self.now_ms()
        i = b.count
        b.builder.append(i, now, key, value, NO_HEADERS)
        b.count = i + 1
        if now != b.first_ts:
            b.mixed_ts = True
            if now > b.max_ts:
                b.max_ts = now
        b.size = total
        acc.buffered_bytes += size
        if total >= b.max_size:
            self.wakeup()
        return RecordFuture(b, i)


try:    # send's one-pass append in C where the extension was built (uncompressed batches' builder appended in C)
    from minibroker._speedups import OpenAppend as _OpenAppend
except ImportError:  # pragma: no cover - the C extension was not built
    _OpenAppend = None


def open_append(acc: RecordAccumulator, now_ms: Callable[[], int],
                wakeup: Callable[[], None]) -> Callable[..., RecordFuture | None]:
    """`send`'s one-pass append (`_OpenAppendPy`) for a producer's accumulator, clock and sender
    wake-up: minibroker._speedups.OpenAppend where it was built, the Python twin otherwise."""
    builder_class = getattr(records, "RecordsBuilder", None)
    if _OpenAppend is None or builder_class is None:
        return _OpenAppendPy(acc, now_ms, wakeup)
    return _OpenAppend(ProducerBatch, RecordFuture, builder_class, acc, now_ms, wakeup,  # type: ignore[no-any-return]
                       NO_HEADERS, RECORD_OVERHEAD)


class Producer:
    """`async with Producer("127.0.0.1:9092", {"acks": "all"}) as p: await (await p.send("t", b"v"))`."""

    def __init__(self, bootstrap_servers: str | list[str] | None = None,
                 config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.cfg = client_config(PRODUCER_DEFAULTS, config, kwargs, bootstrap_servers)
        self._now_ms = clock.installed().now_ms        # the clock installed now (the simulation's, in one)
        self.acks = parse_acks(self.cfg.get("acks"))
        self.request_timeout_ms = self.cfg.get_int("request.timeout.ms")
        self.max_request_size = self.cfg.get_int("max.request.size")
        self.max_block_ms = self.cfg.get_int("max.block.ms")
        self.retries = self.cfg.get_int("retries")
        self.delivery_timeout_ms = self.cfg.get_int("delivery.timeout.ms")
        self.max_in_flight = max(1, self.cfg.get_int("max.in.flight.requests.per.connection"))
        self.ignore_keys = self.cfg.get_bool("partitioner.ignore.keys")
        self.idempotent = self._idempotence(config, kwargs)
        # Idempotence state. Invariant: _next_seq[tp] is the sequence the next new batch of tp
        # gets under (_producer_id, _producer_epoch); _acked_seq[tp] the last sequence acknowledged.
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_seq: dict[TopicPartition, int] = {}
        self._acked_seq: dict[TopicPartition, int] = {}
        # Invariant: per partition, the batches not yet done that were sequenced under an older producer id;
        # while any is left the partition's new batches are held (RecordAccumulator.hold), so a batch under
        # the new id (sequence 0) is never written before them (Kafka's RecordAccumulator stops draining a
        # partition with in-flight batches of a stale producer id and epoch).
        self._stale: dict[TopicPartition, int] = {}
        self.net = ClientNetwork(self.cfg)
        self._encoder = ProduceEncoder(self.acks, self.request_timeout_ms)
        self._loop: asyncio.AbstractEventLoop | None = None
        try:
            compression = codec_id(self.cfg.get("compression.type"))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.acc = RecordAccumulator(
            batch_size=self.cfg.get_int("batch.size"), linger_ms=self.cfg.get_int("linger.ms"),
            buffer_memory=self.cfg.get_int("buffer.memory"), delivery_timeout_ms=self.delivery_timeout_ms,
            backoff=Backoff(self.cfg.get_int("retry.backoff.ms"), self.cfg.get_int("retry.backoff.max.ms")),
            new_builder=_builder_factory(compression), decode=decode_rows)
        self.partitioner = StickyPartitioner()
        self._sticky = self.partitioner.current                # topic -> its unkeyed records' partition now
        self._open = self.acc.open_batches                     # tp -> its open batch (the accumulator's own dict)
        self._append_open = open_append(self.acc, self._now_ms, self._wakeup)   # send's one-pass append
        self.net.listeners.append(self._on_metadata)
        # Invariant: _tps[t][p] == TopicPartition(t, p) for the p < _nparts[t]; same keys as _nparts
        self._tps: dict[str, list[TopicPartition]] = {}
        self._nparts: dict[str, int] = {}                      # partition count per topic, from metadata
        self._running = False                                  # started and not closed: send's fast check
        self._in_flight: dict[int, int] = {}               # Invariant: requests sent and unanswered per broker
        self._incomplete: set[ProducerBatch] = set()       # drained, not yet done
        self._space = asyncio.Event()
        # The sender. Invariants: _pass_handle is not None iff a pass is scheduled for the next loop turn;
        # _timer is the one pass a previous pass asked for after a delay; _in_pass while a pass runs;
        # _pid_task while an InitProducerId is under way (its end schedules a pass).
        self._pass_handle: asyncio.Handle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._in_pass = False
        self._pid_task: asyncio.Task | None = None
        self._started = False
        self._closed = False
        self.on_retry: Callable[[ProducerBatch, KafkaError], None] | None = None   # observability hook
        # Called once per batch when it is done: (batch, base offset or -1, error or None).
        # batch.tp and batch.records [(key, value, timestamp, headers)] say what it held.
        self.on_batch_done: Callable[[ProducerBatch, int, KafkaError | None], None] | None = None

    def _idempotence(self, config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> bool:
        """enable.idempotence against acks, retries and max.in.flight (Kafka's ProducerConfig rules)."""
        wanted = self.cfg.get_bool("enable.idempotence")
        explicit = "enable.idempotence" in (config or {}) or "enable_idempotence" in kwargs
        conflicts = []
        if self.acks != -1:
            conflicts.append("acks must be all")
        if self.retries <= 0:
            conflicts.append("retries must be > 0")
        if self.cfg.get_int("max.in.flight.requests.per.connection") > 5:
            conflicts.append("max.in.flight.requests.per.connection must be <= 5")
        if wanted and conflicts:
            if explicit:
                raise ConfigError("enable.idempotence=true: " + "; ".join(conflicts))
            return False
        return wanted

    async def _ensure_producer_id(self) -> None:
        """InitProducerId from any broker, retrying retriable errors (Kafka's
        TransactionManager does this before the first send)."""
        while self._producer_id < 0:
            try:
                _, resp = await self.net.request_any(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None},
                                                     timeout_ms=self.request_timeout_ms)
                if resp.get("error"):
                    raise KafkaError(resp["error"], resp.get("message", ""), remote=True)
                self._producer_id, self._producer_epoch = resp["producer_id"], resp["producer_epoch"]
                self._next_seq.clear()
                self._acked_seq.clear()
                self._hold_stale()
                log.debug("producer id %d epoch %d", self._producer_id, self._producer_epoch)
            except KafkaError as exc:
                if not exc.retriable and exc.code not in (ErrorCode.NETWORK_EXCEPTION,):
                    raise
                await asyncio.sleep(self.net.cache.refresh_backoff_ms / 1000)

    def _hold_stale(self) -> None:
        """Triggered by a new producer id: hold the partitions that still have batches sequenced under
        an older one (in flight, or queued to be retried)."""
        for tp in self._stale:
            self.acc.release_hold(tp)
        self._stale = {}
        for b in [*self._incomplete, *self.acc.queued()]:
            if b.outcome is None and b.base_seq >= 0 and b.producer_id != self._producer_id:
                self._stale[b.tp] = self._stale.get(b.tp, 0) + 1
        for tp in self._stale:
            self.acc.hold(tp)

    def _sequence(self, b: ProducerBatch) -> None:
        """A batch drained for the first time gets its partition's next sequence."""
        if b.base_seq < 0:
            seq = self._next_seq.get(b.tp, 0)
            b.set_producer_state(self._producer_id, self._producer_epoch, seq)
            self._next_seq[b.tp] = (seq + b.count) & 0x7FFFFFFF

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> Producer:
        if self._started:
            return self
        self._loop = asyncio.get_running_loop()
        self._started = True
        self._running = True
        self.net.start()
        self._wakeup()
        return self

    async def __aenter__(self) -> Producer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything buffered now and wait until every sent record is done."""
        self.acc.flushing += 1
        try:
            self._pass()
            pending = self._undone()
            while pending:
                done, _ = await asyncio.wait(pending, timeout=None if timeout_ms is None else timeout_ms / 1000)
                if not done and timeout_ms is not None:
                    raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"flush did not complete in {timeout_ms} ms")
                pending = self._undone()
        finally:
            self.acc.flushing -= 1

    def _undone(self) -> list[asyncio.Future]:
        """A future per batch sent or queued and not done yet, set when it is (made on demand: flush's)."""
        undone = list(self._incomplete) + [b for b in self.acc.queued() if b.outcome is None]
        for b in undone:
            if b.waiter is None:
                b.waiter = self._loop.create_future()        # type: ignore[union-attr]
        return [b.waiter for b in undone]

    async def close(self, timeout_ms: int | None = None) -> None:
        """Flush (unless timeout_ms == 0), then stop the sender and close connections."""
        if self._closed:
            return
        if self._started and timeout_ms != 0:
            try:
                await self.flush(timeout_ms)
            except KafkaError:
                pass
        self._closed = True
        self._running = False
        self.acc.closing = True
        for b in self.acc.abort_all():
            self._complete(b, -1, KafkaError(ErrorCode.NETWORK_EXCEPTION, "producer closed before the batch was sent"))
        self._no_pass_due()
        if self._pid_task is not None:
            self._pid_task.cancel()
            try:
                await self._pid_task
            except (asyncio.CancelledError, Exception):
                pass
        for b in list(self._incomplete):
            self._complete(b, -1, KafkaError(ErrorCode.NETWORK_EXCEPTION, "producer closed with the request in flight"))
        await self.net.close()

    # -- sending -----------------------------------------------------------------

    async def partitions_for(self, topic: str, timeout_ms: int | None = None) -> int:
        """The topic's partition count, fetching metadata if needed (up to max.block.ms)."""
        if not self._started:
            await self.start()
        n = self.net.cache.partition_count(topic)
        if n is not None:
            self.net.cache.want([topic])
            self._on_metadata()
            return n
        self.net.want_topics([topic])
        await self.net.wait_for(lambda: self.net.cache.partition_count(topic) is not None
                                or self._fatal_topic_error(topic), timeout_ms or self.max_block_ms,
                                f"topic {topic}")
        n = self.net.cache.partition_count(topic)
        if n is None:
            code = self.net.cache.topic_error(topic)
            raise KafkaError(code, f"topic {topic}", remote=True)
        self._on_metadata()
        return n

    def _fatal_topic_error(self, topic: str) -> bool:
        code = self.net.cache.topic_error(topic)
        return code not in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE)

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None, *,
                   partition: int | None = None, headers: Iterable[tuple[str, bytes | None]] | None = None,
                   timestamp_ms: int | None = None) -> RecordFuture:
        """Buffer one record; returns its future (await it for the RecordMetadata).
        Waits only for metadata of a new topic or for buffer space (max.block.ms).

        Runs once per record. The common case (running, topic known, no headers or
        timestamp, the partition's open batch takes the record) is handled here in one
        pass, with the partition chosen as `_send` would choose it and the record appended
        by `_append_open` (open_append: in C where built); all else is `_send`."""
        tps = self._tps.get(topic)
        if tps is not None and self._running and not headers and timestamp_ms is None:
            n = len(tps)
            if partition is None:
                if key is None or self.ignore_keys:
                    p = 0 if n == 1 else self._sticky.get(topic, -1)
                else:
                    p = partition_for_key(key, n)
            else:
                p = partition
            if 0 <= p < n:
                b = self._open.get(tps[p])
                if b is not None:
                    fut = self._append_open(b, key, value, self.max_request_size)
                    if fut is not None:
                        return fut
        return await self._send(topic, value, key, partition, headers, timestamp_ms)

    async def _send(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None,
                    headers: Iterable[tuple[str, bytes | None]] | None, timestamp_ms: int | None,
                    wake: bool = True) -> RecordFuture:
        """`send` for every record its one-pass case does not take: a stopped producer,
        an unknown topic, headers, a timestamp, a new batch, a full buffer; and send_and_wait's
        records (`wake` False: it runs the sender's pass itself)."""
        if not self._running:
            await self._ensure_running()
        n = self._nparts.get(topic)
        if n is None:
            n = await self.partitions_for(topic)
        if headers:
            hdrs: list | None = header_list(headers)
            size = record_size(key, value, hdrs)
        else:
            hdrs = None
            size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if partition is None:
            if key is not None and not self.ignore_keys:
                partition = partition_for_key(key, n)
            elif n == 1:
                partition = 0
            else:
                tps = self._tps[topic]
                partition = self.partitioner.partition(
                    topic, n, lambda p: self.acc.has_room(tps[p], size), self.net.cache.available_partitions)
        elif not 0 <= partition < n:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has {n} partitions, not {partition}")
        if size > self.max_request_size:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"record of {size} bytes is larger than max.request.size={self.max_request_size}")
        now = self._now_ms()
        tp = self._tps[topic][partition]
        while True:
            try:
                batch, index, new_batch, full = self.acc.append(
                    tp, key, value, hdrs, now if timestamp_ms is None else timestamp_ms, now, size)
                break
            except BufferFull:
                await self._wait_for_space()
                now = now_ms()
        if (new_batch or full) and wake:
            self._wakeup()
        return RecordFuture(batch, index)

    async def _ensure_running(self) -> None:
        if not self._started:
            await self.start()
        if self._closed:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "producer is closed")

    def _on_metadata(self) -> None:
        """After each metadata update: partition counts and TopicPartition objects per topic."""
        for topic in list(self.net.cache.wanted):
            n = self.net.cache.partition_count(topic)
            if n is None:
                self._nparts.pop(topic, None)
                self._tps.pop(topic, None)
            elif self._nparts.get(topic) != n:
                self._nparts[topic] = n
                self._tps[topic] = [TopicPartition(topic, p) for p in range(n)]

    async def send_and_wait(self, topic: str, value: bytes | None, key: bytes | None = None, *,
                            partition: int | None = None, headers: Iterable[tuple[str, bytes | None]] | None = None,
                            timestamp_ms: int | None = None) -> RecordMetadata:
        """`await (await send(...))`, with the sender's work done now rather than in a later loop turn:
        this task waits next. A wake-up for the sender would only ask for the pass `_send_now` runs.

        The common case is taken in one pass: nothing queued, the topic known, no headers or timestamp,
        the partition given or chosen by key (or the only one), and the record would go alone at once
        (`_send_now`'s fast case: its leader connected with a free request slot, `linger.ms` passed);
        then its batch is made, taken and written here (RecordAccumulator.take_alone) as `_send` and
        `_send_now` would have. Everything else goes through them."""
        acc = self.acc
        tps = self._tps.get(topic)
        if (tps is not None and not acc.queued_count and self._running and not self._in_pass and self.acks
                and not headers and timestamp_ms is None):
            n = len(tps)
            if partition is not None:
                p = partition
            elif key is not None and not self.ignore_keys:
                p = partition_for_key(key, n)
            else:
                p = 0 if n == 1 else -1                  # -1: the sticky partitioner's choice, in _send
            size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
            if 0 <= p < n and size <= self.max_request_size:
                tp = tps[p]
                net = self.net
                node = net.cache.leader_id(tp)
                conn = None if node is None or self._in_flight.get(node, 0) >= self.max_in_flight \
                    else net.live_connection(node)
                if conn is not None and (not self.idempotent or self._producer_id >= 0):
                    taken = acc.take_alone(tp, key, value, self._now_ms(), size, None if not self.idempotent else (
                        self._producer_id, self._producer_epoch, self._next_seq.get(tp, 0)))
                    if taken is not None:
                        return await self._write_alone(node, conn, *taken)
        fut = await self._send(topic, value, key, partition, headers, timestamp_ms, False)
        batch = fut._batch
        self._send_now(batch)
        if batch.outcome is None:         # `await fut`, parked on the producer's loop (asking for the running
            await _park(batch, self._loop)  # type: ignore[arg-type]   # loop costs a getpid syscall)
        return fut.result()

    async def _write_alone(self, node: int, conn: Connection, batch: ProducerBatch, records: bytes) -> RecordMetadata:
        """send_and_wait's batch `take_alone` took for `node`: as `_send_now` then `_drained` and `_write`
        would, its sequence counted, its request written on `conn`; then the record's outcome."""
        if batch.base_seq >= 0:
            self._next_seq[batch.tp] = (batch.base_seq + 1) & 0x7FFFFFFF
        self._no_pass_due()
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        self._incomplete.add(batch)
        if self.max_in_flight == 1:
            self.acc.mute(batch.tp)
        conn.send_request(_PRODUCE, self._encoder.body(batch.tp, records), partial(self._answered, node, [batch]),
                          timeout_ms=self.request_timeout_ms + 5000)
        if batch.outcome is None:
            fut = self._loop.create_future()  # type: ignore[union-attr]
            batch.parked = [fut]
            await fut
        return RecordFuture(batch, 0).result()

    async def _wait_for_space(self) -> None:
        self.acc.memory_waiters += 1
        self._wakeup()
        try:
            self._space.clear()
            if not await wait_event(self._space, self.max_block_ms / 1000):
                raise TimeoutError
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                             f"buffer.memory full for max.block.ms={self.max_block_ms}") from None
        finally:
            self.acc.memory_waiters -= 1

    # -- the sender --------------------------------------------------------------

    def _leader_of(self, tp: TopicPartition) -> int | None:
        return self.net.cache.leader_id(tp)

    def _wakeup(self) -> None:
        """Something may have become sendable: a pass in the next loop turn (one, however many ask)."""
        if self._pass_handle is None and self._started and not self._closed:
            assert self._loop is not None
            self._pass_handle = self._loop.call_soon(self._scheduled_pass)

    def _scheduled_pass(self) -> None:
        self._pass_handle = None
        self._pass()

    def _on_timer(self) -> None:
        self._timer = None
        self._wakeup()

    def _pass(self) -> None:
        """One sender pass, now (scheduled by `_wakeup`, due on the timer, or asked for by a caller
        about to wait); then the timer is set for the next one a delay calls for."""
        if self._pass_handle is not None:
            self._pass_handle.cancel()
            self._pass_handle = None
        if self._in_pass or self._closed or not self._started:
            return
        self._in_pass = True
        try:
            delay = self._run_once()
        except Exception:                       # a bug here must not silently stall every send
            log.exception("producer sender pass failed")
            for b in self.acc.abort_all() + list(self._incomplete):
                self._complete(b, -1, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "producer sender failed"))
            delay = NO_DELAY_BOUND
        finally:
            self._in_pass = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if delay < NO_DELAY_BOUND:
            assert self._loop is not None
            self._timer = self._loop.call_later(max(delay, 1) / 1000, self._on_timer)

    def _send_now(self, batch: ProducerBatch) -> None:
        """A pass for a caller about to wait for `batch`. When it is the only batch queued, ready
        (linger.ms passed), and its leader's connection has a free request slot, the pass would
        drain it alone: it is taken and written here without the pass's scans; else the full pass."""
        acc = self.acc
        if not self._in_pass and not self._closed and acc.sendable_alone(batch, now_ms()):
            node = self.net.cache.leader_id(batch.tp)
            if (node is not None and self._in_flight.get(node, 0) < self.max_in_flight
                    and (self._producer_id >= 0 or not self.idempotent) and self.net.connected(node)):
                self._no_pass_due()
                acc.take(batch)
                self._drained(node, [batch])
                return
        self._pass()

    def _no_pass_due(self) -> None:
        """Nothing is left queued to wait for: the only queued batch was just taken (`_send_now`,
        `_write_alone`), or `close` aborted them all. Drops the scheduled pass and the linger timer."""
        if self._pass_handle is not None:
            self._pass_handle.cancel()
            self._pass_handle = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _drained(self, node: int, batches: list[ProducerBatch]) -> None:
        """Batches just drained for `node`: sequences, request slot, then the request is written."""
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        for b in batches:
            if self.idempotent:
                self._sequence(b)
            self._incomplete.add(b)
            if self.max_in_flight == 1:
                self.acc.mute(b.tp)
        self._write(node, batches)

    def _run_once(self) -> int:
        """Kafka's Sender.runOnce: expire what waited too long, drain ready batches into one request
        per broker while a request slot is free, write them; returns ms until the next pass is due
        (NO_DELAY_BOUND: none, until something wakes the sender)."""
        while True:
            if not self.acc.queued_count:
                return NO_DELAY_BOUND
            now = now_ms()
            for b in self.acc.expired(now):
                self._complete(b, -1, KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"expiring {len(b)} record(s) for {b.tp}: {now - b.created_ms} ms has passed since "
                    f"batch creation (delivery.timeout.ms={self.delivery_timeout_ms})"))
            ready = self.acc.ready(now, self._leader_of)
            if ready.unknown_leader_topics:
                self.net.want_topics(ready.unknown_leader_topics)
                self.net.request_update()
            delay = ready.next_delay_ms
            nodes = set()
            for n in sorted(ready.nodes):
                if self._in_flight.get(n, 0) >= self.max_in_flight:
                    continue
                wait = self.net.ready_delay_ms(n, self._wakeup)      # connected, or wait for it
                if wait:
                    delay = min(delay, wait)
                else:
                    nodes.add(n)
            if nodes and self.idempotent and self._producer_id < 0:
                self._get_producer_id()              # its end schedules a pass
                nodes.clear()
            if nodes:
                for node, batches in self.acc.drain(now, nodes, self._leader_of, self.max_request_size).items():
                    self._drained(node, batches)
                continue
            if ready.unknown_leader_topics:
                delay = min(delay, self.net.cache.refresh_backoff_ms)
            if self.acc.has_queued():
                delay = min(delay, self.delivery_timeout_ms)
            return delay

    def _get_producer_id(self) -> None:
        if self._pid_task is None:
            self._pid_task = asyncio.ensure_future(self._producer_id_then_wake())

    async def _producer_id_then_wake(self) -> None:
        """InitProducerId for the sender; a fatal error fails every queued batch with it."""
        try:
            await self._ensure_producer_id()
        except KafkaError as exc:
            for b in self.acc.abort_all():
                self._complete(b, -1, exc)
        except Exception:
            log.exception("producer id request failed")
            for b in self.acc.abort_all():
                self._complete(b, -1, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "producer id request failed"))
        finally:
            self._pid_task = None
            self._wakeup()

    def _write(self, node: int, batches: list[ProducerBatch]) -> None:
        """Write one Produce request for `batches` to `node`; its answer comes to `_answered`."""
        body: Body
        if len(batches) == 1:
            b = batches[0]
            body = self._encoder.body(b.tp, encode(b))
        else:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for b in batches:
                by_topic.setdefault(b.tp.topic, []).append({"partition": b.tp.partition, "records": encode(b)})
            body = {"acks": self.acks, "timeout_ms": self.request_timeout_ms,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        if self.acks == 0:
            asyncio.ensure_future(self._send_no_response(node, batches, body))
            return
        self.net.send_request(node, _PRODUCE, body, partial(self._answered, node, batches),
                              timeout_ms=self.request_timeout_ms + 5000)

    async def _send_no_response(self, node: int, batches: list[ProducerBatch], body: Body) -> None:
        """acks=0: written and done (or failed, if the broker cannot be reached)."""
        try:
            await self.net.send_no_response(node, ApiKey.PRODUCE, body)
        except KafkaError as exc:
            self._answered(node, batches, None, exc)
            return
        self._in_flight[node] -= 1
        for b in batches:
            if self.max_in_flight == 1:
                self.acc.unmute(b.tp)
            self._complete(b, -1, None)
        if self.acc.has_queued():
            self._wakeup()

    def _answered(self, node: int, batches: list[ProducerBatch], resp: dict[str, Any] | None,
                  error: KafkaError | None) -> None:
        """The Produce request for `batches` was answered (`resp`) or failed (`error`); called from
        the connection's read callback, or a later loop turn for a failure."""
        self._in_flight[node] -= 1
        acc = self.acc
        if self.max_in_flight == 1:           # _drained muted their partitions
            for b in batches:
                acc.unmute(b.tp)
        if acc.queued_count:        # what waited for this request's slot or partition goes now
            self._wakeup()
        if error is not None:
            code = error.code if isinstance(error.code, int) else ErrorCode.NETWORK_EXCEPTION
            for b in batches:
                self._failed(b, code, f"broker {node}: {error}")
            return
        assert resp is not None
        if resp.get("error"):
            for b in batches:
                self._failed(b, resp["error"], f"broker {node}: {resp.get('message', '')}")
            return
        topics = resp.get("topics", ())
        if len(batches) == 1 and len(topics) == 1:        # the common case: one batch acknowledged
            b = batches[0]
            parts = topics[0].get("partitions", ())
            if len(parts) == 1 and not parts[0].get("error", 0) \
                    and (topics[0]["topic"], parts[0]["partition"]) == b.tp:
                r = parts[0]
                self._complete(b, r.get("base_offset", -1), None, r.get("log_append_time_ms", -1))
                return
        results: dict[tuple[str, int], dict[str, Any]] = {}      # (topic, partition): a TopicPartition's key
        for t in topics:
            topic = t["topic"]
            for p in t.get("partitions", ()):
                results[(topic, p["partition"])] = p
        for b in batches:
            r = results.get(b.tp)
            if r is None:
                self._failed(b, ErrorCode.UNKNOWN_SERVER_ERROR, f"broker {node} did not answer for {b.tp}")
            elif r.get("error", 0):
                cl = r.get("current_leader")
                if cl:
                    self.net.cache.update_leader(b.tp, cl.get("leader_id", -1), cl.get("leader_epoch", -1))
                self._failed(b, r["error"], f"broker {node}: {r.get('message') or ''}".rstrip(": "))
            else:
                self._complete(b, r.get("base_offset", -1), None, r.get("log_append_time_ms", -1))

    def _failed(self, batch: ProducerBatch, code: int, message: str) -> None:
        retriable = None
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and batch.base_seq >= 0 \
                and batch.producer_id == self._producer_id:
            # Kafka's rule: out of order while an earlier batch of the partition is unacknowledged
            # (it failed first and is retried before this one) is retriable; otherwise it is a real gap
            # that fails the batch, and sequences restart under a new producer id.
            retriable = batch.base_seq != ((self._acked_seq.get(batch.tp, -1) + 1) & 0x7FFFFFFF)
            if not retriable:
                self._producer_id = -1
        d = decide_retry(code, attempts=batch.attempts, created_ms=batch.created_ms, now_ms=now_ms(),
                         retries=self.retries, delivery_timeout_ms=self.delivery_timeout_ms, retriable=retriable)
        if d.refresh_metadata or code == ErrorCode.REQUEST_TIMED_OUT:
            self.net.request_update()
        err = KafkaError(code, message, remote=True)
        batch.last_error = code
        if d.retry and not self._closed:
            log.debug("retrying %r after %s", batch, err)
            if self.on_retry is not None:
                self.on_retry(batch, err)
            self._incomplete.discard(batch)
            self.acc.reenqueue(batch, now_ms())
            self._wakeup()
            return
        self._complete(batch, -1, err)

    def _complete(self, batch: ProducerBatch, base_offset: int, error: KafkaError | None,
                  log_append_time: int = -1) -> None:
        self._incomplete.discard(batch)
        if error is None and batch.base_seq >= 0 and batch.producer_id == self._producer_id:
            self._acked_seq[batch.tp] = (batch.base_seq + batch.count - 1) & 0x7FFFFFFF
        if self._stale and batch.outcome is None and batch.base_seq >= 0 and batch.producer_id != self._producer_id:
            left = self._stale.get(batch.tp, 0) - 1
            if left > 0:
                self._stale[batch.tp] = left
            elif batch.tp in self._stale:
                del self._stale[batch.tp]
                self.acc.release_hold(batch.tp)
                self._wakeup()
        if batch.outcome is None:
            batch.outcome = outcome = (base_offset, error, log_append_time)
            if batch.waiter is not None:
                batch.waiter.set_result(outcome)
            parked = batch.parked
            if parked is not None:
                batch.parked = None
                for fut in parked:
                    if not fut.done():
                        fut.set_result(None)
            self.acc.release(batch)
            if self.acc.memory_waiters:                  # a send() waits for memory (_wait_for_space)
                self._space.set()
            if self.on_batch_done is not None:
                self.on_batch_done(batch, base_offset, error)
