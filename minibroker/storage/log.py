"""PartitionLog: the on-disk log of one partition replica.

Owns the segments of `<data>/<topic>-<partition>/`, the log start offset,
the log end offset (LEO), the recovery point (everything below it is
fsynced) and the leader-epoch cache with its `leader-epoch-checkpoint`.
Must not know about the HW, the ISR, the network or other partitions: the
HW is passed in where retention needs it, and persisted by `LogManager`.

Threading: every method is called from one thread (the event loop), except
`flush()`, `persist_epoch_cache()` and `close()`, which block on fsync and
must run in a worker thread (`await asyncio.to_thread(log.flush)`); they
raise RuntimeError on an event-loop thread. `flush()` may run while appends,
reads, rolls, truncations and deletions continue on the loop: it fsyncs
duplicated fds of a snapshot taken under `_lock`.

Durability (Kafka's default, D9): appends go to the page cache; nothing is
fsynced per write. `needs_flush(now_ms)` says when `flush.messages`,
`flush.ms` or a segment roll call for a flush, `due_flush_offset(now_ms)`
how far (a roll alone: up to the new segment); the recovery point advances
only when a flush completes. With `flush_on_acks_all`, the broker calls
`flush(last_offset + 1)` before answering an acks=all produce.

Leader-epoch checkpoint: Kafka writes it on every new entry (since KAFKA-15046
without an fsync on the produce path, which its log flush does). Here a new
entry only marks the cache dirty, and it is written (atomically, with fsync)
by `persist_epoch_cache()` or by the next `flush()` *before* that flush moves
the recovery point. So the file always holds every entry below the recovery
point; entries above it are rebuilt from the batches on recovery. The one
thing a crash can lose is an election-time entry with no data after it, which
Kafka's truncation rules make harmless. `epoch_checkpoint_due` says when the
periodic flusher should write it sooner: for every change but entries that
came with appended batches (a follower's first batch of each epoch costs no
checkpoint write until the next flush).

Events (`kind`, reason): `truncation` (extra `side`: "end" for truncate_to,
"epochs" for a truncate_to at or above the LEO that only dropped epoch entries,
"full" for truncate_fully_and_start_at, "start" for log-start moves and
segment deletion) and `recovery` (on opening an existing log).
"""
from __future__ import annotations

import bisect
import os
import threading
from typing import NamedTuple
from collections.abc import Callable, Iterator

from minibroker import clock
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event, EventSink, discard
from minibroker.records import (
    BatchHeader, batch_headers, iter_records, single_producer_batch, stamp_chunks, stamp_prefix, validate_batches,
)
from minibroker.storage import fsutil
from minibroker.storage.checkpoint import LEADER_EPOCH_FILE, LeaderEpochCheckpointFile
from minibroker.storage.epoch_cache import LeaderEpochCache
from minibroker.storage.loader import LoadInfo, load_log
from minibroker.storage.log_config import LogConfig
from minibroker.storage.segment import AppendedBatch, Located, LogSegment
from minibroker.storage.trash import SegmentTrash

_I32_MAX = 2**31 - 1
_MAX_READ_HINTS = 256
# Makes a NamedTuple from a tuple of all its fields without its Python-level __new__ (as its _make does).
_new = tuple.__new__


class AppendResult(NamedTuple):
    first_offset: int
    last_offset: int


class UnexpectedAppendOffset(KafkaError):
    """A follower append whose first batch does not start at the LEO (or
    whose batches are not contiguous). Nothing was written; the fetcher
    should refetch from `expected`."""

    def __init__(self, expected: int, got: int, message: str = "") -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE,
                         message or f"follower append starts at offset {got}, log end offset is {expected}")
        self.expected = expected
        self.got = got


def wall_clock_ms() -> int:
    return clock.now_ms()


def _partition_name(directory: str) -> str:
    return os.path.basename(os.path.normpath(directory))


class PartitionLog:
    def __init__(self, directory: str, config: LogConfig, *, recovery_point: int = 0,
                 log_start_offset: int = 0, clean_shutdown: bool = False,
                 event_sink: EventSink = discard, clock: Callable[[], int] | None = None,
                 trash: SegmentTrash | None = None) -> None:
        """Open (recovering as needed) or create the log in `directory`.
        Prefer `LogManager.get_or_create`, which passes the checkpointed
        recovery point, log start offset and clean-shutdown state, and its
        trash: without one, segments leaving the log are unlinked at once."""
        self.directory = directory
        self.name = _partition_name(directory)
        self.config = config
        self._trash = trash
        self._sink = event_sink
        self._clock = clock or wall_clock_ms
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        loaded = load_log(directory, config.index_interval_bytes, recovery_point=recovery_point,
                          log_start_offset=log_start_offset, clean_shutdown=clean_shutdown)
        # Invariant: sorted by base offset, contiguous, never empty; the last is active.
        self._segments: list[LogSegment] = loaded.segments
        self._bases: list[int] = [s.base_offset for s in self._segments]
        # Invariant: first segment base <= log_start_offset <= LEO. Plain attributes (read on every
        # append, fetch and HW move), set only here, under `_lock` by each mutation that moves them:
        # read-only outside this class.
        self.log_start_offset: int = loaded.log_start_offset
        # Invariant: log_end_offset == self._segments[-1].next_offset (the LEO) after every mutation.
        self.log_end_offset: int = self._segments[-1].next_offset
        # Invariant: recovery_point <= LEO; everything below it is fsynced.
        self._recovery_point = loaded.recovery_point
        self.epoch_cache: LeaderEpochCache = loaded.epoch_cache
        self._epoch_file = LeaderEpochCheckpointFile(os.path.join(directory, LEADER_EPOCH_FILE))
        # Invariant: the cache version last written to the epoch checkpoint (no file reads as no entries).
        self._epoch_persisted_version = (self.epoch_cache.version
                                         if loaded.epoch_file_entries == self.epoch_cache.entries
                                         and (os.path.exists(self._epoch_file.path) or not loaded.epoch_file_entries)
                                         else -1)
        # Invariant: a cache version reached from the persisted one by entries of appended batches only
        # (-1: none). Those entries start above the recovery point and a recovery rebuilds them from the
        # batches, so the checkpoint need not be written for them before the next flush.
        self._epoch_rebuildable_version = -1
        self._truncations = 0
        # True when a truncation lowered the recovery point since the
        # LogManager last checkpointed it (it rewrites the file promptly).
        self.recovery_point_lowered = False
        # Where sequential readers will ask next: offset -> (segment, batch
        # start). Invariant: cleared whenever batches are removed, so every
        # hint names a live segment and a batch boundary in it.
        self._read_hints: dict[int, tuple[LogSegment, int]] = {}
        self._dir_dirty = True
        self._roll_flush_pending: int | None = None
        self._last_flush_ms = self._clock()
        self._closed = False
        # Invariant: the bytes the last leader append stored, when it made them in one piece (one batch) and
        # nobody took them yet (`take_stamped`), else None.
        self._stamped: bytes | None = None
        now = self._clock()
        for seg in self._segments:
            seg.created_ms = min(seg.created_ms, now)
            seg.release_fds()           # reopened on first use: an idle replica holds no fds
        # The inactive segment a read last opened; released when another one is read.
        self._open_inactive: LogSegment | None = None
        self.load_info: LoadInfo = loaded.info
        info = loaded.info
        if info.segments_loaded == 0:
            return
        self._emit("recovery", None, info.log_end_offset,
                   "clean shutdown: segments trusted" if clean_shutdown and info.recovered_from_offset is None
                   else (info.problem or "recovered without loss"),
                   clean_shutdown=info.clean_shutdown, recovered_from=info.recovered_from_offset,
                   segments_recovered=info.segments_recovered, batches_scanned=info.batches_scanned,
                   bytes_truncated=info.bytes_truncated, segments_deleted=list(info.segments_deleted),
                   recovery_point=info.recovery_point, log_start_offset=info.log_start_offset,
                   epoch_entries_dropped=[list(e) for e in info.epoch_entries_dropped])

    @classmethod
    def open(cls, directory: str, config: LogConfig | None = None, **kwargs: object) -> PartitionLog:
        """`PartitionLog(directory, config or LogConfig(), **kwargs)`."""
        return cls(directory, config or LogConfig(), **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------ state

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def epoch_cache_dirty(self) -> bool:
        return self.epoch_cache.version != self._epoch_persisted_version

    @property
    def epoch_checkpoint_due(self) -> bool:
        """The cache differs from the checkpoint by more than entries a recovery would rebuild from
        the batches (an election's entry, a truncation): write it now, not only at the next flush."""
        version = self.epoch_cache.version
        return version != self._epoch_persisted_version and version != self._epoch_rebuildable_version

    def _assigned_from_batches(self, before: int) -> None:
        """After the cache went from version `before` to now by entries of batches just appended."""
        if before == self._epoch_persisted_version or before == self._epoch_rebuildable_version:
            self._epoch_rebuildable_version = self.epoch_cache.version

    def _emit(self, kind: str, before: object, after: object, reason: str, **extra: object) -> None:
        self._sink(Event(kind, self._clock(), self.name, before, after, reason, extra))

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self._segments:
            seg.index_interval_bytes = config.index_interval_bytes

    # ------------------------------------------------------------ epochs

    def assign_leader_epoch(self, epoch: int) -> bool:
        """Becoming leader at `epoch`: add (epoch, LEO) to the epoch cache
        before any data (E2). Then persist it off the loop with
        `persist_epoch_cache()` (or let the next flush do it)."""
        with self._lock:
            return self.epoch_cache.assign(epoch, self.log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, its end offset) per E3; (-1, -1) if unknown."""
        return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def last_batch_epoch(self) -> int | None:
        """Epoch of the batch holding LEO - 1 (None for an empty log)."""
        if self.log_end_offset <= self.log_start_offset:
            return None
        return self.epoch_cache.epoch_for_offset(self.log_end_offset - 1)

    # ------------------------------------------------------------ appends

    def append_as_leader(self, batches: bytes | bytearray | memoryview, leader_epoch: int, *,
                         now_ms: int | None = None) -> AppendResult:
        """Produce path (leader): validate the client batches (framing, CRC,
        sizes), stamp base offsets from the LEO and `leader_epoch`, record the
        epoch in the cache, roll if needed, append. Raises KafkaError:
        CORRUPT_MESSAGE / MESSAGE_TOO_LARGE / INVALID_REQUEST from validation,
        RECORD_LIST_TOO_LARGE above segment.bytes, FENCED_LEADER_EPOCH when
        the cache already holds a newer epoch, KAFKA_STORAGE_ERROR on I/O
        failure, INVALID_TIMESTAMP for a record outside the config's window
        around `now_ms` (KIP-937; not checked without `now_ms`). Nothing is
        written when it raises."""
        cfg = self.config
        window = None if now_ms is None else cfg.timestamp_window(now_ms)
        one = single_producer_batch(batches, cfg.max_message_bytes, window)
        if one is not None:
            return self._append_one_as_leader(batches, one, leader_epoch, now_ms)
        info = validate_batches(batches, max_message_bytes=cfg.max_message_bytes, timestamp_window=window)
        latest = self._check_leader_append(info.size, leader_epoch)
        with self._lock:
            if self._closed:
                self._check_open()
            base = self.log_end_offset
            chunks, next_offset = stamp_chunks(batches, info.batches, base, leader_epoch)
            self._maybe_roll_locked(info.size, next_offset - 1, now_ms)
            if latest != leader_epoch:
                before = self.epoch_cache.version
                if self.epoch_cache.assign(leader_epoch, base):
                    self._assigned_from_batches(before)
            appended = []
            offset = base
            for h in info.batches:
                offset += h.last_offset_delta + 1
                appended.append(AppendedBatch(h.position, h.size, offset - 1, h.max_timestamp))
            self._segments[-1].append(chunks, appended, next_offset, info.size)
            self.log_end_offset = next_offset
            self._stamped = None
        return _new(AppendResult, (base, next_offset - 1))

    def _append_one_as_leader(self, batch: bytes | bytearray | memoryview, one: tuple[int, int, int],
                              leader_epoch: int, now_ms: int | None) -> AppendResult:
        """append_as_leader for a payload of exactly one valid batch: the same
        checks and effects with less Python work per call."""
        size, lod, max_ts = one
        latest = self._check_leader_append(size, leader_epoch)
        with self._lock:
            if self._closed:
                self._check_open()
            base = self.log_end_offset
            last = base + lod
            self._maybe_roll_locked(size, last, now_ms)
            if latest != leader_epoch:
                before = self.epoch_cache.version
                if self.epoch_cache.assign(leader_epoch, base):
                    self._assigned_from_batches(before)
            stamped = b"".join((stamp_prefix(base, size, leader_epoch), memoryview(batch)[16:]))
            self._segments[-1].append(stamped, [(0, size, last, max_ts)], last + 1, size)
            self.log_end_offset = last + 1
            self._stamped = stamped
        return _new(AppendResult, (base, last))

    def take_stamped(self) -> bytes | None:
        """The bytes the last leader append stored, once, when it made them in one piece: the partition keeps
        them for its tail cache instead of stamping the batch again (the log holds no reference after)."""
        stamped, self._stamped = self._stamped, None
        return stamped

    def check_as_leader(self, batches: bytes | bytearray | memoryview, now_ms: int | None) -> None:
        """The validation `append_as_leader` applies to client batches (framing, CRC, sizes, the
        timestamp window, segment.bytes), appending nothing. Called for a duplicate idempotent
        batch, which Kafka validates as any other before its producer-state check answers it.
        Raises the KafkaError `append_as_leader` would."""
        cfg = self.config
        window = None if now_ms is None else cfg.timestamp_window(now_ms)
        one = single_producer_batch(batches, cfg.max_message_bytes, window)
        if one is not None:
            self._check_fits_segment(one[0])
        else:
            self._check_fits_segment(validate_batches(batches, max_message_bytes=cfg.max_message_bytes,
                                                      timestamp_window=window).size)

    def _check_fits_segment(self, size: int) -> None:
        if size > self.config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                             f"{size} bytes of batches exceed segment.bytes={self.config.segment_bytes}")

    def _check_leader_append(self, size: int, leader_epoch: int) -> int | None:
        """The leader-append checks that need no lock: `size` fits a segment,
        `leader_epoch` is not negative and not older than the cache's latest.
        Returns that latest epoch (None for an empty cache)."""
        self._check_fits_segment(size)
        if leader_epoch < 0:
            raise ValueError(f"leader epoch {leader_epoch} is negative")
        latest = self.epoch_cache.latest_epoch
        if latest is not None and leader_epoch < latest:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"{self.name}: append at epoch {leader_epoch} but the log is at epoch {latest}")
        return latest

    def append_as_follower(self, batches: bytes | bytearray | memoryview, *, now_ms: int | None = None) -> int:
        """Replication path (follower): append the leader's batches verbatim.
        Checks framing and CRC, that the first batch starts at the LEO and
        the rest follow contiguously, and that epochs are stamped and never
        decrease. Updates the epoch cache from batch epochs. Returns the new
        last offset (LEO - 1); an empty `batches` is a no-op.
        Raises UnexpectedAppendOffset or KafkaError(CORRUPT_MESSAGE)."""
        return self.append_batches_as_follower(batches, now_ms=now_ms)[0]

    def append_batches_as_follower(self, batches: bytes | bytearray | memoryview, *, now_ms: int | None = None
                                   ) -> tuple[int, list[BatchHeader]]:
        """`append_as_follower`, with the headers of the batches appended (parsed once, for the caller)."""
        size = len(batches)
        if size == 0:
            return self.log_end_offset - 1, []
        headers = batch_headers(batches)
        leo = expected = self.log_end_offset
        cache = self.epoch_cache
        latest = cache.latest_entry
        if latest is not None and latest[1] < leo and leo > self.log_start_offset:
            prev_epoch = latest[0]                       # the last batch's epoch, as last_batch_epoch() says
        else:
            last = self.last_batch_epoch()
            prev_epoch = -1 if last is None else last
        appended = []
        for h in headers:
            base, epoch = h.base_offset, h.leader_epoch
            if base != expected:
                raise UnexpectedAppendOffset(leo, headers[0].base_offset,
                                             None if h is headers[0] else
                                             f"follower batches are not contiguous: batch at {base}, "
                                             f"expected {expected}")
            if epoch < 0 or epoch < prev_epoch:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"{self.name}: batch at offset {base} has epoch {epoch} after epoch {prev_epoch}")
            prev_epoch = epoch
            expected = base + h.last_offset_delta + 1
            appended.append((h.position, h.size, expected - 1, h.max_timestamp))
        with self._lock:
            if self._closed:
                self._check_open()
            if self.log_end_offset != leo:
                raise UnexpectedAppendOffset(self.log_end_offset, leo)
            self._maybe_roll_locked(size, expected - 1, now_ms)
            if latest is None or latest[0] != prev_epoch or latest[1] > leo \
                    or headers[0].leader_epoch != prev_epoch:      # else every assign is a no-op
                before = cache.version
                for h in headers:
                    cache.assign(h.leader_epoch, h.base_offset)
                if cache.version != before:
                    self._assigned_from_batches(before)
            self._segments[-1].append(batches, appended, expected, size)
            self.log_end_offset = expected
        return expected - 1, headers

    def producer_batches(self, from_offset: int) -> Iterator[tuple[int, int, int, int, int, int]]:
        """(producer id, epoch, base sequence, base offset, last offset, max timestamp) of
        every batch from the one holding `from_offset` to the LEO, read from
        batch headers only (producer state recovery; blocking file reads)."""
        for seg in list(self._segments):
            if seg.next_offset > from_offset:
                yield from seg.producer_batches(from_offset)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.name}: log is closed")

    # ------------------------------------------------------------ rolling

    def maybe_roll(self, incoming_bytes: int = 0, *, now_ms: int | None = None) -> bool:
        """Start a new active segment at the LEO if the active one is full
        (segment.bytes), too old (segment.ms, by its first batch's timestamp)
        or would overflow 32-bit relative offsets (D2). Returns whether it rolled."""
        with self._lock:
            return self._maybe_roll_locked(incoming_bytes, self.log_end_offset, now_ms)

    def _maybe_roll_locked(self, incoming_bytes: int, incoming_last_offset: int, now_ms: int | None) -> bool:
        active = self._segments[-1]
        size = active.size
        if size == 0:
            return False
        cfg = self.config
        if not (size > cfg.segment_bytes - incoming_bytes or incoming_last_offset - active.base_offset > _I32_MAX):
            rolling_base = active.rolling_base_ms
            if rolling_base is None:
                return False
            now = self._clock() if now_ms is None else now_ms
            if now - rolling_base <= cfg.segment_ms:
                return False
        self._roll_locked()
        return True

    def _roll_locked(self) -> None:
        active = self._segments[-1]
        active.on_become_inactive()
        active.release_fds()
        new = LogSegment.create(self.directory, active.next_offset, self.config.index_interval_bytes)
        new.created_ms = self._clock()
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._dir_dirty = True
        self._roll_flush_pending = new.base_offset

    def roll(self) -> None:
        """Force a new active segment (no-op when the active one is empty)."""
        with self._lock:
            if not self._segments[-1].empty:
                self._roll_locked()

    # ------------------------------------------------------------ reads

    def _segment_index_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def offset_for_timestamp(self, timestamp: int, upper_bound_offset: int) -> tuple[int, int] | None:
        """ListOffsets by time (KIP-79), as Kafka's segment search: (offset, timestamp) of the first
        record at or above the log start whose timestamp >= `timestamp`, looked for inside the first
        batches whose max timestamp is; None if there is none or it is at or above `upper_bound_offset`
        (the HW). Segments are skipped by their max timestamp, batches by their headers; only a
        matching batch is decoded. Blocking reads: call off the event loop."""
        with self._lock:
            segments = list(self._segments)
        start = self.log_start_offset
        for seg in segments:
            if seg.max_timestamp < timestamp:
                continue
            for h in seg._walk(0, seg.size):
                if h.base_offset >= upper_bound_offset:
                    return None
                if h.last_offset < start or h.max_timestamp < timestamp:
                    continue
                for r in iter_records(seg.read_batch(h), min_offset=start):
                    if r.timestamp >= timestamp:
                        return (r.offset, r.timestamp) if r.offset < upper_bound_offset else None
        return None

    def offset_of_max_timestamp(self, upper_bound_offset: int) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (-3, KIP-734): (offset, timestamp) of the first record holding the
        largest timestamp among the batches below `upper_bound_offset` that reach the log start (the first
        such batch, then the first such record in it, as Kafka's `offsetOfMaxTimestamp`), or None.
        Blocking reads: call off the event loop."""
        with self._lock:
            segments = list(self._segments)
        start = self.log_start_offset
        best: tuple[LogSegment, Located] | None = None
        for seg in segments:
            if seg.size == 0 or (best is not None and seg.max_timestamp <= best[1].max_timestamp):
                continue
            for h in seg._walk(0, seg.size):
                if h.last_offset >= upper_bound_offset:
                    break
                if h.last_offset >= start and (best is None or h.max_timestamp > best[1].max_timestamp):
                    best = (seg, h)
        if best is None:
            return None
        seg, h = best
        for r in iter_records(seg.read_batch(h)):       # Kafka's: even below a log start moved mid-batch
            if r.timestamp == h.max_timestamp:
                return r.offset, r.timestamp
        return h.last_offset, h.max_timestamp

    def read(self, fetch_offset: int, max_bytes: int, upper_bound_offset: int | None = None, *,
             min_one_batch: bool = True) -> bytes:
        """Fetch path: the raw bytes of whole batches, starting with the batch
        that holds `fetch_offset`, holding only batches whose last offset <
        `upper_bound_offset` (HW for consumers, LEO (default) for followers),
        at most `max_bytes` except that one whole batch is returned even if
        larger (KIP-74) unless `min_one_batch` is False. Reads one segment
        per call. b"" when nothing qualifies (e.g. fetch_offset == LEO or at
        or above the bound). Raises KafkaError(OFFSET_OUT_OF_RANGE) when
        `fetch_offset` is outside [log_start_offset, LEO]."""
        if self._closed:
            self._check_open()
        try:
            return self._read(fetch_offset, max_bytes, upper_bound_offset, min_one_batch)
        except OSError as exc:
            raise fsutil.storage_error(self.directory, exc) from exc

    def _read(self, fetch_offset: int, max_bytes: int, upper_bound_offset: int | None,
              min_one_batch: bool) -> bytes:
        leo = self.log_end_offset
        if fetch_offset < self.log_start_offset or fetch_offset > leo:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"{self.name}: fetch offset {fetch_offset} outside "
                             f"[{self.log_start_offset}, {leo}]")
        upper = leo if upper_bound_offset is None else min(upper_bound_offset, leo)
        if fetch_offset >= upper:
            return b""
        hint = self._read_hints.pop(fetch_offset, None)
        if hint is not None and hint[1] < hint[0].size:
            seg, position = hint
            if upper < seg.next_offset and seg.read_batch_header(position).last_offset >= upper:
                return b""
        else:
            i = self._segment_index_for(fetch_offset)
            while True:
                if i >= len(self._segments):
                    return b""
                seg = self._segments[i]
                found = seg.translate_offset(fetch_offset)
                if found is not None:
                    break
                i += 1
            if found.last_offset >= upper:
                return b""
            position = found.position
        data, end, next_offset = seg.read(position, max_bytes, upper, min_one_batch)
        if seg is not self._segments[-1] and seg is not self._open_inactive:
            self._note_inactive_read(seg)
        if data:
            if len(self._read_hints) >= _MAX_READ_HINTS:
                self._read_hints.clear()
            self._read_hints[next_offset] = (seg, end)
        return data

    def _note_inactive_read(self, seg: LogSegment) -> None:
        """At most one inactive segment per log keeps its files open after a
        read (sequential readers of old data reuse it); the previous one is
        released, under the lock that flush() takes to duplicate fds."""
        with self._lock:
            prev, self._open_inactive = self._open_inactive, seg
            if prev is not None and prev is not self._segments[-1]:
                prev.release_fds()

    def batch_containing(self, offset: int) -> tuple[int, int, int] | None:
        """(base offset, last offset, leader epoch) of the batch holding `offset`."""
        if offset < self.log_start_offset or offset >= self.log_end_offset:
            return None
        i = self._segment_index_for(offset)
        for seg in self._segments[i:]:
            found = seg.translate_offset(offset)
            if found is not None:
                return found.base_offset, found.last_offset, found.leader_epoch
        return None

    # ------------------------------------------------------------ truncation

    def truncate_to(self, offset: int, *, reason: str = "truncate_to") -> int:
        """Divergence/truncation: remove every batch holding an offset >=
        `offset`. Whole batches only: when `offset` falls inside a batch the
        log ends at that batch's base offset. Trims the epoch cache from the
        end and lowers the recovery point. Returns the new LEO (which may be
        below `offset`; the caller clamps its HW to it). No-op at or above
        the LEO for the data, but not for the epoch cache: entries starting
        at or above the LEO are still dropped (E4, Kafka's `truncateTo`),
        because this broker may have led an epoch and appended nothing in it
        before another leader was elected; keeping that entry makes every
        later divergence answer look new (issue 9's livelock). Emits a
        `truncation` event whenever the log or the epoch cache changed."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        before = self.log_end_offset
        if offset >= before:
            with self._lock:
                stale = self.epoch_cache.truncate_from_end(before)
            if stale:
                self._emit("truncation", before, before,
                           f"{reason}; dropped epoch entries {' '.join(f'{e}:{o}' for e, o in stale)} "
                           "starting at or after the LEO "
                           "(an epoch led here without appends)",
                           side="epochs", requested_offset=offset, segments_deleted=[],
                           epoch_entries_removed=[list(e) for e in stale])
            return before
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, reason=reason)
            return offset
        with self._lock:
            keep = bisect.bisect_right(self._bases, offset)
            dropped = self._segments[keep:]
            del self._segments[keep:]
            del self._bases[keep:]
            try:
                self._retire(dropped)
                self._read_hints.clear()
                actual = self._segments[-1].truncate_to(offset)
            finally:                    # the LEO follows the segments even when a file operation failed
                self.log_end_offset = self._segments[-1].next_offset
            self.log_start_offset = min(self.log_start_offset, actual)
            removed = self.epoch_cache.truncate_from_end(actual)
            if actual < self._recovery_point:
                self._recovery_point = actual
                self.recovery_point_lowered = True
            if self._roll_flush_pending is not None and self._roll_flush_pending > actual:
                self._roll_flush_pending = None
            self._truncations += 1
            self._dir_dirty = True
        self._emit("truncation", before, actual, reason, side="end", requested_offset=offset,
                   segments_deleted=[s.base_offset for s in dropped],
                   epoch_entries_removed=[list(e) for e in removed])
        return actual

    def _retire(self, segments: list[LogSegment]) -> None:
        """Segments leaving the log: renamed `*.deleted` now, unlinked by the trash after
        file.delete.delay.ms, off the event loop (D10); unlinked now without a trash."""
        if self._trash is None:
            for seg in segments:
                seg.delete()
            return
        self._trash.add([p for seg in segments for p in seg.retire()],
                        self._clock() + self.config.file_delete_delay_ms)

    def truncate_fully_and_start_at(self, offset: int, *, reason: str = "truncate_fully_and_start_at") -> None:
        """Drop the whole log and restart it empty at `offset` (a follower
        whose LEO is below the leader's log start). Clears the epoch cache."""
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        before = self.log_end_offset
        with self._lock:
            self._check_open()
            self._read_hints.clear()
            self._retire(self._segments)
            new = LogSegment.create(self.directory, offset, self.config.index_interval_bytes)
            new.created_ms = self._clock()
            self._segments = [new]
            self._bases = [offset]
            self.log_start_offset = offset
            self.log_end_offset = offset
            self.recovery_point_lowered = self.recovery_point_lowered or offset < self._recovery_point
            self._recovery_point = offset
            self._roll_flush_pending = None
            self.epoch_cache.clear()
            self._truncations += 1
            self._dir_dirty = True
        self._emit("truncation", before, offset, reason, side="full", log_start_offset=offset)

    def maybe_increment_log_start_offset(self, new_start: int, *, reason: str = "log start offset moved") -> bool:
        """Move the log start offset forward (DeleteRecords, or a follower
        following the leader's log start). Trims the epoch cache from the
        start; whole segments below it go in the next `delete_old_segments`.
        Raises KafkaError(OFFSET_OUT_OF_RANGE) above the LEO."""
        if new_start <= self.log_start_offset:
            return False
        if new_start > self.log_end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"{self.name}: log start offset {new_start} above the log end offset "
                             f"{self.log_end_offset}")
        before = self.log_start_offset
        with self._lock:
            self.log_start_offset = new_start
            self.epoch_cache.truncate_from_start(new_start)
        self._emit("truncation", before, new_start, reason, side="start")
        return True

    # ------------------------------------------------------------ retention

    def delete_old_segments(self, now_ms: int | None = None, *, high_watermark: int | None = None) -> int:
        """Retention pass (Kafka's deleteOldSegments): delete whole oldest
        segments that breach retention.ms (by their max timestamp),
        retention.bytes, or lie wholly below the log start offset. Never
        deletes a segment holding offsets at or above `high_watermark`
        (default: the LEO). If every segment goes, a fresh active segment is
        rolled first. Moves the log start offset up. Returns how many were deleted."""
        segs = self._segments
        if len(segs) == 1 and segs[0].size == 0:
            return 0                          # an empty log (the many idle partitions): nothing to weigh
        now = self._clock() if now_ms is None else now_ms
        hw = self.log_end_offset if high_watermark is None else high_watermark
        cfg = self.config
        total = self.size_bytes
        excess = total - cfg.retention_bytes if cfg.retention_bytes >= 0 else -1
        deletable = 0
        reasons: list[str] = []
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if nxt is None and seg.empty:
                break
            if hw < upper:
                break
            why = None
            if nxt is not None and nxt.base_offset <= self.log_start_offset:
                why = "below log start offset"
            elif cfg.retention_ms >= 0 and seg.max_timestamp >= 0 and now - seg.max_timestamp > cfg.retention_ms:
                why = f"retention.ms={cfg.retention_ms} breached"
            elif excess >= 0 and excess - seg.size >= 0:
                excess -= seg.size
                why = f"retention.bytes={cfg.retention_bytes} breached"
            if why is None:
                break
            reasons.append(why)
            deletable += 1
        if not deletable:
            return 0
        before = self.log_start_offset
        with self._lock:
            if deletable == len(self._segments):
                self._roll_locked()
            self._read_hints.clear()
            doomed = self._segments[:deletable]
            del self._segments[:deletable]
            del self._bases[:deletable]
            self._retire(doomed)
            self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
            self._recovery_point = max(self._recovery_point, self.log_start_offset)
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            self._dir_dirty = True
        self._emit("truncation", before, self.log_start_offset, "; ".join(sorted(set(reasons))),
                   side="start", segments_deleted=[s.base_offset for s in doomed])
        return deletable

    # ------------------------------------------------------------ durability

    def needs_flush(self, now_ms: int | None = None) -> bool:
        """Whether the flush policy calls for `flush()` now (see `due_flush_offset`)."""
        return self.due_flush_offset(now_ms) is not None

    def due_flush_offset(self, now_ms: int | None = None) -> int | None:
        """How far the flush the policy calls for now should reach, None when none is due: the
        LEO when flush.messages unflushed offsets or flush.ms since the last flush with unflushed
        data call for one; when only a roll does, the base of the segment it started (D9, Kafka's
        flushUptoOffsetExclusive(newSegment.baseOffset)), so the active segment is not fsynced
        while the loop appends to it."""
        unflushed = self.log_end_offset - self._recovery_point
        if unflushed > 0 and (unflushed >= self.config.flush_messages or (
                (self._clock() if now_ms is None else now_ms) - self._last_flush_ms >= self.config.flush_ms)):
            return self.log_end_offset
        return self._roll_flush_pending

    def flush(self, up_to: int | None = None) -> int:
        """fsync the log up to offset `up_to` (default: the LEO), after writing
        a dirty epoch checkpoint, then advance the recovery point. Blocking:
        run in a worker thread. Thread-safe against appends and other flushes.
        Returns the recovery point."""
        fsutil.assert_off_event_loop("PartitionLog.flush")
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return self._recovery_point
                leo = self.log_end_offset
                target = leo if up_to is None else min(up_to, leo)
                epoch_snapshot = None
                if self.epoch_cache_dirty:
                    epoch_snapshot = (self.epoch_cache.entries, self.epoch_cache.version)
                fds: list[int] = []
                for seg in self._segments:
                    if (not seg.empty and seg.next_offset > self._recovery_point
                            and seg.base_offset < target):
                        fds.extend(seg.dup_fds())
                        if seg is not self._segments[-1] and seg is not self._open_inactive:
                            seg.release_fds()
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                generation = self._truncations
            try:
                if epoch_snapshot is not None:
                    self._epoch_file.write(epoch_snapshot[0])
                for fd in fds:
                    os.fsync(fd)
                if dir_dirty:
                    fsutil.fsync_dir(self.directory)
            except OSError as exc:
                if self._closed:                # abandoned meanwhile (its directory renamed): nothing to keep
                    return self._recovery_point
                self._dir_dirty = self._dir_dirty or dir_dirty
                raise fsutil.storage_error(self.directory, exc) from exc
            finally:
                for fd in fds:
                    os.close(fd)
            with self._lock:
                if epoch_snapshot is not None:
                    self._epoch_persisted_version = epoch_snapshot[1]
                if generation == self._truncations and target > self._recovery_point:
                    self._recovery_point = min(target, self.log_end_offset)
                if self._roll_flush_pending is not None and self._roll_flush_pending <= self._recovery_point:
                    self._roll_flush_pending = None
                self._last_flush_ms = self._clock()
                return self._recovery_point

    def persist_epoch_cache(self) -> None:
        """Write `leader-epoch-checkpoint` if the cache changed. Blocking."""
        fsutil.assert_off_event_loop("PartitionLog.persist_epoch_cache")
        with self._flush_lock:
            with self._lock:
                if not self.epoch_cache_dirty or self._closed:
                    return
                entries, version = self.epoch_cache.entries, self.epoch_cache.version
            try:
                self._epoch_file.write(entries)
            except OSError:
                if self._closed:                # abandoned meanwhile (its directory renamed)
                    return
                raise
            with self._lock:
                self._epoch_persisted_version = version

    def abandon(self) -> None:
        """Triggered when the partition is deleted (its topic deleted or created again, or the replica
        moved away): close every file for good without a flush or a checkpoint, so that its directory
        can be renamed at once and removed later. Cheap enough for the event loop (as `retire` is
        for a segment); a flush in flight on a worker thread finds the log closed and stops quietly."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for seg in self._segments:
                seg.abandon()

    def close(self) -> None:
        """Flush everything, persist the epoch cache, close files. Blocking."""
        fsutil.assert_off_event_loop("PartitionLog.close")
        if self._closed:
            return
        with self._lock:
            active = self._segments[-1]
            active.on_become_inactive()
            fds = active.dup_fds()
        try:
            for fd in fds:
                os.fsync(fd)
        finally:
            for fd in fds:
                os.close(fd)
        self.flush()
        self.persist_epoch_cache()
        with self._lock:
            for seg in self._segments:
                seg.close()
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed
