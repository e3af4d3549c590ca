"""One log segment: a `.log` file of whole batches plus its two indexes.

Owns the segment's files, its size, next offset and max timestamp, and the
translation from offsets to file positions. Must not know about epochs,
recovery points, retention or the network: `PartitionLog` decides when to
roll, truncate, recover or delete. File names are the base offset as 20
zero-padded digits (`00000000000000000000.log`, `.index`, `.timeindex`).

Batches are stored exactly as they travel on the wire; reads return a byte
slice of the file (whole batches only). Appends use O_APPEND writes into the
page cache; fsync happens only through `dup_fds()`, from a flush thread.
"""
from __future__ import annotations

import os
from typing import Any, NamedTuple
from collections.abc import Callable, Iterator

from minibroker.records import (
    HEADER, HEADER_SIZE, LOG_OVERHEAD, batch_crc_ok, check_header, parse_header,
)
from minibroker.storage import fsutil
from minibroker.storage.index import FD_LOCK, OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"          # a retired segment file waiting for its unlink (D10)
_WALK_CHUNK = 16 * 1024
_RECOVER_CHUNK = 4 * 1024 * 1024
_I32_MAX = 2**31 - 1


def segment_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_name(name: str) -> int | None:
    """Base offset of a `<20 digits>.log` file name, else None."""
    if len(name) == 20 + len(LOG_SUFFIX) and name.endswith(LOG_SUFFIX) and name[:20].isdigit():
        return int(name[:20])
    return None


class Located(NamedTuple):
    """A batch found in a segment file."""
    position: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    size: int
    max_timestamp: int


class AppendedBatch(NamedTuple):
    """Where one batch of an append sits, relative to the appended bytes."""
    position: int
    size: int
    last_offset: int
    max_timestamp: int


class RecoveryResult(NamedTuple):
    valid_bytes: int
    truncated_bytes: int
    batches: int
    problem: str | None


class LogSegment:
    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int, *, fresh: bool) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = os.path.join(directory, segment_name(base_offset, LOG_SUFFIX))
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if fresh else 0)
        # Invariant: `_fd` is -1 when the segment's files are released (an
        # inactive or idle segment: reopened on demand through `fd`) or when
        # the segment is closed for good (`_closed`).
        self._fd = os.open(self.log_path, flags, 0o644)
        self._closed = False
        self.index = OffsetIndex(os.path.join(directory, segment_name(base_offset, INDEX_SUFFIX)), base_offset)
        self.time_index = TimeIndex(os.path.join(directory, segment_name(base_offset, TIME_INDEX_SUFFIX)), base_offset)
        if fresh:
            self.index.reset()
            self.time_index.reset()
        # Invariant: the file holds exactly `size` bytes of whole, valid batches.
        self.size = 0 if fresh else os.fstat(self.fd).st_size
        # Invariant: last offset + 1 of the last batch; base_offset when empty.
        self.next_offset = base_offset
        # Invariant: max timestamp over all batches; -1 when empty.
        self.max_timestamp = -1
        # Invariant: max timestamp of the first batch; None when empty.
        self.first_batch_timestamp: int | None = None
        # Wall-clock ms when this segment was created (fresh) or last written (opened).
        self.created_ms = int(os.fstat(self.fd).st_mtime * 1000)
        self._bytes_since_index = 0

    @classmethod
    def create(cls, directory: str, base_offset: int, index_interval_bytes: int) -> LogSegment:
        return cls(directory, base_offset, index_interval_bytes, fresh=True)

    @classmethod
    def open_existing(cls, directory: str, base_offset: int, index_interval_bytes: int) -> LogSegment:
        """Open files as found; call `load_clean()` or `recover()` next."""
        return cls(directory, base_offset, index_interval_bytes, fresh=False)

    @property
    def fd(self) -> int:
        """The .log file's descriptor, reopened if it was released; -1 once closed."""
        if self._fd >= 0 or self._closed:
            return self._fd
        with FD_LOCK:
            if self._fd < 0 and not self._closed:
                self._fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND)
            return self._fd

    @property
    def holds_fds(self) -> int:
        """How many descriptors the segment holds open now."""
        return (self._fd >= 0) + (self.index._fd >= 0) + (self.time_index._fd >= 0)

    def release_fds(self) -> None:
        """Triggered when the segment goes inactive or idle: close its three
        files until they are next needed,
        so a broker's descriptors follow its active segments, not its data."""
        with FD_LOCK:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        self.index.release()
        self.time_index.release()

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size})"

    @property
    def empty(self) -> bool:
        return self.size == 0

    @property
    def rolling_base_ms(self) -> int | None:
        """What segment.ms is measured from: the first batch's timestamp as in
        Kafka, but never earlier than the segment's creation, so that clients
        sending ancient timestamps cannot force a roll per batch."""
        if self.first_batch_timestamp is None:
            return None
        return max(self.first_batch_timestamp, self.created_ms)

    # ------------------------------------------------------------ loading

    def load_clean(self) -> str | None:
        """Trust the file after a clean shutdown: load and sanity-check the
        indexes, walk only the batches after the last index entry to find
        the next offset. Returns a problem message when anything is off (the
        caller then recovers this segment instead)."""
        self.size = os.fstat(self.fd).st_size
        problem = self.index.load() or self.time_index.load()
        if problem:
            return problem
        start = self.index.positions[-1] if len(self.index) else 0
        if start > self.size:
            return f"{self.index.path}: position {start} beyond segment size {self.size}"
        expected = self.base_offset + self.index.rel_offsets[-1] if len(self.index) else None
        next_offset = self.base_offset
        max_ts = self.time_index.last_timestamp
        pos = start
        try:
            for h in self._walk(pos, self.size, check=True):
                if h.position == start and expected is not None and h.last_offset != expected:
                    return f"{self.index.path}: last entry names offset {expected}, batch holds {h.last_offset}"
                next_offset = h.last_offset + 1
                max_ts = max(max_ts, h.max_timestamp)
                pos = h.position + h.size
        except ValueError as exc:
            return f"{self.log_path}: {exc}"
        if pos != self.size:
            return f"{self.log_path}: torn batch at byte {pos}"
        problem = self.index.sanity_check(self.size, next_offset) or self.time_index.sanity_check(next_offset)
        if problem:
            return problem
        self.next_offset = next_offset
        self.max_timestamp = max_ts
        self._bytes_since_index = self.size - start
        self.first_batch_timestamp = self._read_first_timestamp()
        return None

    def recover(self, on_batch: Callable[[int, int], None] | None = None) -> RecoveryResult:
        """Rebuild this segment's indexes from its batches, checking structure,
        CRC, offset contiguity (the first batch starts at the segment base)
        and non-decreasing epochs. Cuts the file at the first invalid or
        partial batch. `on_batch(epoch, base_offset)` is called per valid batch."""
        self.index.reset()
        self.time_index.reset()
        file_size = os.fstat(self.fd).st_size
        pos = 0
        expected = self.base_offset
        prev_epoch = -1
        batches = 0
        max_ts = -1
        first_ts: int | None = None
        self._bytes_since_index = 0
        problem: str | None = None
        buf = b""
        buf_start = 0
        while pos < file_size:
            rel = pos - buf_start
            if len(buf) - rel < HEADER_SIZE:
                buf = os.pread(self.fd, max(_RECOVER_CHUNK, HEADER_SIZE), pos)
                buf_start, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    problem = f"partial batch header ({len(buf)} bytes) at byte {pos}"
                    break
            h = parse_header(buf, rel)
            problem = check_header(h)
            if problem:
                problem = f"batch at byte {pos}: {problem}"
                break
            if pos + h.size > file_size:
                problem = f"torn batch at byte {pos}: {h.size} bytes claimed, {file_size - pos} on disk"
                break
            if rel + h.size > len(buf):
                buf = os.pread(self.fd, max(_RECOVER_CHUNK, h.size), pos)
                buf_start, rel = pos, 0
            if not batch_crc_ok(buf, rel, h.size):
                problem = f"batch at byte {pos} (offset {h.base_offset}): CRC32C mismatch"
                break
            if h.base_offset != expected:
                problem = f"batch at byte {pos}: base offset {h.base_offset}, expected {expected}"
                break
            if h.last_offset - self.base_offset > _I32_MAX:
                problem = f"batch at byte {pos}: offset {h.last_offset} does not fit segment {self.base_offset}"
                break
            if h.leader_epoch < 0 or h.leader_epoch < prev_epoch:
                problem = f"batch at byte {pos}: leader epoch {h.leader_epoch} after epoch {prev_epoch}"
                break
            if on_batch is not None:
                on_batch(h.leader_epoch, h.base_offset)
            max_ts = max(max_ts, h.max_timestamp)
            if first_ts is None:
                first_ts = h.max_timestamp
            self._index_batch(pos, h.size, h.last_offset, max_ts)
            prev_epoch = h.leader_epoch
            expected = h.last_offset + 1
            batches += 1
            pos += h.size
        truncated = file_size - pos
        if truncated:
            os.ftruncate(self.fd, pos)
        self.index.write_pending()
        self.time_index.write_pending()
        self.size = pos
        self.next_offset = expected
        self.max_timestamp = max_ts
        self.first_batch_timestamp = first_ts
        return RecoveryResult(pos, truncated, batches, problem if truncated else None)

    # ------------------------------------------------------------ writing

    def append(self, data: fsutil.Buffer | list[fsutil.Buffer], batches: list[tuple[int, int, int, int]],
               next_offset: int, size: int | None = None) -> None:
        """Append whole batches (already stamped; one buffer, or a list of
        buffers of `size` bytes in all, for writev) and index them. `batches`
        holds an AppendedBatch (position in `data`, size, last offset, max
        timestamp) per batch. On an I/O error the file is cut back and
        KafkaError(KAFKA_STORAGE_ERROR) raised."""
        start = self.size
        if size is None:
            size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else sum(len(d) for d in data)
        fd = self._fd
        if fd < 0:
            fd = self.fd
        n_index = n_time = -1               # the index sizes before this append's first entry (-1: none added)
        # The segment's fields change only once everything is written: an I/O error leaves them as they were.
        max_ts, first_ts, since = self.max_timestamp, self.first_batch_timestamp, self._bytes_since_index
        try:
            fsutil.write_all(fd, data)
            interval = self.index_interval_bytes
            for position, bsize, last_offset, batch_max_ts in batches:
                if batch_max_ts > max_ts:
                    max_ts = batch_max_ts
                if first_ts is None:
                    first_ts = batch_max_ts
                if since > interval:
                    if n_index < 0:
                        n_index, n_time = len(self.index), len(self.time_index.timestamps)
                    self.index.append(last_offset, start + position)
                    self.time_index.maybe_append(max_ts, last_offset)
                    since = 0
                since += bsize
        except OSError as exc:
            try:
                os.ftruncate(fd, start)
                if 0 <= n_index < len(self.index):
                    self.index.truncate_to_position(start)
                if 0 <= n_time < len(self.time_index.timestamps):
                    self.time_index.truncate_to_offset(self.next_offset)
            except OSError:
                pass
            raise fsutil.storage_error(self.log_path, exc) from exc
        self.size = start + size
        self.max_timestamp = max_ts
        self.first_batch_timestamp = first_ts
        self._bytes_since_index = since
        self.next_offset = next_offset

    def _index_batch(self, position: int, size: int, last_offset: int, max_ts_so_far: int) -> None:
        if self._bytes_since_index > self.index_interval_bytes:
            self.index.append(last_offset, position)
            self.time_index.maybe_append(max_ts_so_far, last_offset)
            self._bytes_since_index = 0
        self._bytes_since_index += size

    def on_become_inactive(self) -> None:
        """The segment stopped being the active one (roll or close): record its
        final max timestamp in the time index, as Kafka does."""
        if self.size and self.max_timestamp >= 0 and not self._closed:
            self.time_index.maybe_append(self.max_timestamp, self.next_offset - 1)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= `offset` (so a batch that
        holds `offset` goes entirely). Returns the new next offset."""
        found = self.translate_offset(offset)
        if found is None:
            return self.next_offset
        pos = found.position
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.next_offset = found.base_offset
        self.index.truncate_to_position(pos)
        self.time_index.truncate_to_offset(found.base_offset)
        last_indexed = self.index.positions[-1] if len(self.index) else 0
        max_ts = self.time_index.last_timestamp
        for h in self._walk(last_indexed, self.size):
            max_ts = max(max_ts, h.max_timestamp)
        self.max_timestamp = max_ts if self.size else -1
        self._bytes_since_index = self.size - last_indexed
        if self.size == 0:
            self.first_batch_timestamp = None
        return self.next_offset

    # ------------------------------------------------------------ reading

    def _walk(self, position: int, end: int, *, check: bool = False) -> Iterator[Located]:
        """Headers of the batches in [position, end), read in small chunks."""
        for pos, f in self._walk_fields(position, end, check=check):
            yield Located(pos, f[0], f[0] + f[6], f[2], f[1] + LOG_OVERHEAD, f[8])

    def producer_batches(self, from_offset: int) -> Iterator[tuple[int, int, int, int, int, int]]:
        """(producer id, producer epoch, base sequence, base offset, last
        offset, max timestamp) of each batch whose last offset >= `from_offset`,
        from the headers only (producer state recovery)."""
        for _pos, f in self._walk_fields(self.index.lookup(from_offset), self.size):
            if f[0] + f[6] >= from_offset:
                yield f[9], f[10], f[11], f[0], f[0] + f[6], f[8]

    def _walk_fields(self, position: int, end: int, *, check: bool = False) -> Iterator[tuple[int, tuple[Any, ...]]]:
        """(position, unpacked header) of the batches in [position, end)."""
        buf = b""
        buf_start = position
        pos = position
        last_size = 0
        while pos < end:
            rel = pos - buf_start
            if len(buf) - rel < HEADER_SIZE:
                # first, or after a big batch: just the next header; after a
                # small batch: a chunk of headers at once
                want = _WALK_CHUNK if 0 < last_size <= _WALK_CHUNK // 4 else HEADER_SIZE
                buf = os.pread(self.fd, min(want, max(end - pos, HEADER_SIZE)), pos)
                buf_start, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    if check:
                        raise ValueError(f"partial batch header at byte {pos}")
                    return
            f = HEADER.unpack_from(buf, rel)
            size = f[1] + LOG_OVERHEAD
            if check:
                problem = check_header(parse_header(buf, rel))
                if problem:
                    raise ValueError(f"batch at byte {pos}: {problem}")
                if pos + size > end:
                    raise ValueError(f"torn batch at byte {pos}")
            yield pos, f
            pos += size
            last_size = size

    def translate_offset(self, offset: int, start_position: int = 0) -> Located | None:
        """The first batch whose last offset >= `offset`, or None if none.
        `start_position` may name a known batch start at or before it."""
        pos = max(self.index.lookup(offset), start_position)
        for h in self._walk(pos, self.size):
            if h.last_offset >= offset:
                return h
        return None

    def _boundary_at_or_below(self, limit: int, start: int) -> Located | None:
        """The first batch (from `start`) that ends beyond `limit`: every
        batch before it ends at or before `limit`. None if all of them do."""
        pos = max(self.index.floor_position(limit), start)
        for h in self._walk(pos, self.size):
            if h.position + h.size > limit:
                return h
        return None

    def read(self, start_position: int, max_bytes: int, upper_bound_offset: int,
             min_one_batch: bool) -> tuple[bytes, int, int]:
        """Raw bytes of the whole batches from `start_position` (a batch start)
        whose last offset < `upper_bound_offset`, at most `max_bytes` unless
        `min_one_batch` and the first batch alone is larger (KIP-74).
        Returns (bytes, end position, offset of the next batch)."""
        end, next_offset = self.size, self.next_offset
        if upper_bound_offset < self.next_offset:
            bound = self.translate_offset(upper_bound_offset, start_position)
            if bound is not None:
                end, next_offset = bound.position, bound.base_offset
        if end <= start_position:
            return b"", start_position, next_offset
        limit = start_position + max(max_bytes, 0)
        if limit < end:
            cut = self._boundary_at_or_below(limit, start_position)
            if cut is not None and cut.position < end:
                if cut.position > start_position:
                    end, next_offset = cut.position, cut.base_offset
                elif not min_one_batch:
                    return b"", start_position, cut.base_offset
                else:
                    end, next_offset = cut.position + cut.size, cut.last_offset + 1
        return os.pread(self.fd, end - start_position, start_position), end, next_offset

    def read_batch(self, batch: Located) -> bytes:
        """The bytes of one batch `_walk` found (a cold path's record-level look: ListOffsets by time)."""
        return os.pread(self.fd, batch.size, batch.position)

    def read_batch_header(self, position: int) -> Located:
        f = HEADER.unpack(os.pread(self.fd, HEADER_SIZE, position))
        return Located(position, f[0], f[0] + f[6], f[2], f[1] + LOG_OVERHEAD, f[8])

    def _read_first_timestamp(self) -> int | None:
        if self.size < HEADER_SIZE:
            return None
        return self.read_batch_header(0).max_timestamp

    # ------------------------------------------------------------ lifecycle

    def dup_fds(self) -> list[int]:
        """Duplicates of the three fds, for fsync from a flush thread; the
        caller closes them. Safe even if the segment is closed meanwhile."""
        return [os.dup(self.fd), self.index.dup_fd(), self.time_index.dup_fd()]

    def close(self) -> None:
        if not self._closed:
            self.on_become_inactive()
            self._close_log_fd()
        self.index.close()
        self.time_index.close()

    def delete(self) -> None:
        """Close and unlink the segment's files now (blocking: unlinking frees their page cache)."""
        self._close_for_good()
        for path in self._paths():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def abandon(self) -> None:
        """Triggered when its partition is deleted: close its files for good without writing
        pending index entries (its directory is about to be renamed and removed)."""
        self._close_for_good()

    def retire(self) -> list[str]:
        """Triggered when the segment leaves its log (retention, truncation): close its files for
        good and rename them `*.deleted` (D10), cheap enough for the event loop. Returns the
        paths to unlink later, off the loop (`SegmentTrash`)."""
        self._close_for_good()
        out = []
        for path in self._paths():
            try:
                os.rename(path, path + DELETED_SUFFIX)
            except FileNotFoundError:
                continue
            out.append(path + DELETED_SUFFIX)
        return out

    def _paths(self) -> tuple[str, str, str]:
        return self.log_path, self.index.path, self.time_index.path

    def _close_for_good(self) -> None:
        self._close_log_fd()
        self.index.discard()
        self.time_index.discard()

    def _close_log_fd(self) -> None:
        with FD_LOCK:
            self._closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
