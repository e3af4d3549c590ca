"""Sparse per-segment indexes: offset -> file position, and max timestamps.

Owns the `.index` and `.timeindex` files of one segment and their in-memory
copies. Must not know about batches or CRCs; `LogSegment` decides when to
add entries. Neither file is checksummed: they are sanity-checked on a clean
open and rebuilt from the log whenever a segment is recovered (D3).

`.index` entries are 8 bytes, big-endian: the *last* offset of an indexed
batch relative to the segment base (i32) and the batch's start position
(i32). `.timeindex` entries are 12 bytes: the max timestamp so far (i64) and
the relative last offset of the batch that reached it (i32).
"""
from __future__ import annotations

import bisect
import os
import threading
import struct
from array import array

from minibroker.storage import fsutil

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_PENDING_LIMIT = 4096
# Serialises lazy reopening and releasing of segment and index files, which a
# flush thread (dup_fds) and the event loop may both trigger.
FD_LOCK = threading.Lock()


class _IndexFile:
    ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # Invariant: `_fd` is -1 when the file is released (reopened on demand
        # through `fd`) or closed for good (`_closed`).
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._closed = False
        # Entries appended in memory but not yet written to the file. The file
        # may lag (it is never trusted past a crash); dup_fd() and close()
        # write them out first, so a flush or clean shutdown leaves it whole.
        self._pending = bytearray()

    @property
    def fd(self) -> int:
        """The file's descriptor, reopened if it was released; -1 once closed."""
        if self._fd >= 0 or self._closed:
            return self._fd
        with FD_LOCK:
            if self._fd < 0 and not self._closed:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            return self._fd

    def release(self) -> None:
        """Close the file until it is next needed. Pending entries stay in
        memory and are written when it is (the file may lag, see above)."""
        with FD_LOCK:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _write(self, entry: bytes) -> None:
        self._pending += entry
        if len(self._pending) >= _PENDING_LIMIT:
            self.write_pending()

    def write_pending(self) -> None:
        if self._pending and not self._closed:
            fsutil.write_all(self.fd, self._pending)
        self._pending.clear()

    def _read_raw(self) -> bytes:
        size = os.fstat(self.fd).st_size
        return os.pread(self.fd, size, 0) if size else b""

    def _truncate_file(self, n_entries: int) -> None:
        self.write_pending()
        os.ftruncate(self.fd, n_entries * self.ENTRY.size)

    def dup_fd(self) -> int:
        self.write_pending()
        return os.dup(self.fd)

    def close(self) -> None:
        if not self._closed:
            self.write_pending()
            with FD_LOCK:
                self._closed = True
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1

    def delete(self) -> None:
        self.discard()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def discard(self) -> None:
        """Close for good without writing pending entries (the file is about to go)."""
        self._pending.clear()
        self.close()


class OffsetIndex(_IndexFile):
    ENTRY = _OFFSET_ENTRY

    def __init__(self, path: str, base_offset: int) -> None:
        super().__init__(path, base_offset)
        # Invariant: both strictly increasing; rel_offsets[i] is the last
        # offset (relative) of the batch starting at positions[i].
        self.rel_offsets = array("i")
        self.positions = array("i")

    def load(self) -> str | None:
        """Read the file into memory; return a problem message if it is not sane."""
        raw = self._read_raw()
        if len(raw) % self.ENTRY.size:
            return f"{self.path}: size {len(raw)} is not a multiple of {self.ENTRY.size}"
        rel = array("i")
        pos = array("i")
        for r, p in self.ENTRY.iter_unpack(raw):
            if r < 0 or p < 0 or (rel and (r <= rel[-1] or p <= pos[-1])):
                return f"{self.path}: entry ({r}, {p}) is out of order"
            rel.append(r)
            pos.append(p)
        self.rel_offsets, self.positions = rel, pos
        return None

    def sanity_check(self, segment_size: int, next_offset: int) -> str | None:
        if self.positions and self.positions[-1] >= segment_size:
            return f"{self.path}: last position {self.positions[-1]} is beyond the segment size {segment_size}"
        if self.rel_offsets and self.base_offset + self.rel_offsets[-1] >= next_offset:
            return f"{self.path}: last offset {self.base_offset + self.rel_offsets[-1]} is not below {next_offset}"
        return None

    def __len__(self) -> int:
        return len(self.positions)

    def append(self, last_offset: int, position: int) -> None:
        rel = last_offset - self.base_offset
        self._write(self.ENTRY.pack(rel, position))
        self.rel_offsets.append(rel)
        self.positions.append(position)

    def lookup(self, offset: int) -> int:
        """Start position of the last indexed batch whose last offset <= `offset`
        (0 when none): scanning forward from there finds `offset`."""
        i = bisect.bisect_right(self.rel_offsets, offset - self.base_offset)
        return self.positions[i - 1] if i else 0

    def floor_position(self, position: int) -> int:
        """The greatest indexed batch start <= `position` (0 when none)."""
        i = bisect.bisect_right(self.positions, position)
        return self.positions[i - 1] if i else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches starting at or after `position`."""
        n = bisect.bisect_left(self.positions, position)
        if n < len(self.positions):
            del self.positions[n:]
            del self.rel_offsets[n:]
            self._truncate_file(n)

    def reset(self) -> None:
        self.rel_offsets = array("i")
        self.positions = array("i")
        self._pending.clear()
        self._truncate_file(0)


class TimeIndex(_IndexFile):
    ENTRY = _TIME_ENTRY

    def __init__(self, path: str, base_offset: int) -> None:
        super().__init__(path, base_offset)
        # Invariant: timestamps strictly increase, rel_offsets do not decrease.
        self.timestamps = array("q")
        self.rel_offsets = array("i")

    def load(self) -> str | None:
        raw = self._read_raw()
        if len(raw) % self.ENTRY.size:
            return f"{self.path}: size {len(raw)} is not a multiple of {self.ENTRY.size}"
        ts = array("q")
        rel = array("i")
        for t, r in self.ENTRY.iter_unpack(raw):
            if r < 0 or (ts and (t <= ts[-1] or r < rel[-1])):
                return f"{self.path}: entry ({t}, {r}) is out of order"
            ts.append(t)
            rel.append(r)
        self.timestamps, self.rel_offsets = ts, rel
        return None

    def sanity_check(self, next_offset: int) -> str | None:
        if self.rel_offsets and self.base_offset + self.rel_offsets[-1] >= next_offset:
            return f"{self.path}: last offset {self.base_offset + self.rel_offsets[-1]} is not below {next_offset}"
        return None

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, last_offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        rel = last_offset - self.base_offset
        self._write(self.ENTRY.pack(timestamp, rel))
        self.timestamps.append(timestamp)
        self.rel_offsets.append(rel)

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop entries whose batch offset is >= `next_offset`."""
        n = bisect.bisect_left(self.rel_offsets, next_offset - self.base_offset)
        if n < len(self.rel_offsets):
            del self.timestamps[n:]
            del self.rel_offsets[n:]
            self._truncate_file(n)

    def reset(self) -> None:
        self.timestamps = array("q")
        self.rel_offsets = array("i")
        self._pending.clear()
        self._truncate_file(0)
