"""The controller's metadata log on disk and in memory (KRaft's __cluster_metadata, single node).

Owns: the file `<metadata.log.dir>/metadata.log`, the records retained in
memory since the log start (in wire form, ready to serve), which of them
are durable (fsynced), and the tasks waiting for durability or for new
records. Must not know what a record means: `ControllerState` decides, this
keeps.

File format: a sequence of entries, each `>II` (body length, CRC32C of the
body) then a msgpack map. An optional snapshot comes first, framed by
`{"type": "snapshot_begin", "offset": N}` and `{"type": "snapshot_end",
"offset": N}`: the image of every record below offset N. Records follow,
in offset order from N. A torn or corrupt tail (a crash mid-write) is
dropped and truncated away on load. Compaction writes a new file beside the
old one, fsyncs it and renames it over (atomic), so a snapshot is whole or
absent.

Writes go through one flusher task: appends are batched, then written and
fsynced in a thread; `durable_end` moves after the fsync, and only durable
records are served (`read`) or acknowledged (`wait_durable`).
"""
from __future__ import annotations

import asyncio
import logging
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack
from crc32c import crc32c

from minibroker.errors import ErrorCode, KafkaError
from minibroker.metadata import MetadataRecord, from_wire, to_wire

log = logging.getLogger("minibroker.controller.log")

FILE_NAME = "metadata.log"
_HEAD = struct.Struct(">II")


class MetadataLogError(RuntimeError):
    """The metadata log cannot be read or written; the controller must stop."""


@dataclass
class Loaded:
    """What a log file held. Invariant: `records` offsets run consecutively from `snapshot_end`."""
    snapshot: list[tuple[int, MetadataRecord]] = field(default_factory=list)
    snapshot_end: int = 0
    records: list[tuple[int, MetadataRecord]] = field(default_factory=list)
    dropped_bytes: int = 0


def encode_entry(obj: dict[str, Any]) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return _HEAD.pack(len(body), crc32c(body)) + body


def _decode_entries(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """Entries up to the first torn or corrupt one, and the byte position where the valid prefix ends."""
    out: list[dict[str, Any]] = []
    pos, n = 0, len(data)
    while n - pos >= _HEAD.size:
        length, crc = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + length
        if end > n:
            break
        body = data[pos + _HEAD.size:end]
        if crc32c(body) != crc:
            break
        try:
            obj = msgpack.unpackb(body, raw=False)
        except Exception:  # msgpack raises several unrelated types
            break
        if not isinstance(obj, dict):
            break
        out.append(obj)
        pos = end
    return out, pos


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MetadataLog:
    """Invariant: log_start <= durable_end <= end; `_wire[i]` is the record at
    offset log_start + i; bytes of records in [durable_end, end) are in
    `_pending` or being written."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, FILE_NAME)
        self.log_start = 0
        self.end = 0
        self.durable_end = 0
        self._wire: list[dict[str, Any]] = []
        self._pending: list[bytes] = []
        self._fd: int | None = None
        self._wake: asyncio.Event | None = None
        self._flusher: asyncio.Task | None = None
        self._durable_waiters: list[tuple[int, asyncio.Future]] = []
        self._record_waiters: list[asyncio.Future] = []
        self.failed: BaseException | None = None

    # ---------------------------------------------------------------- startup
    def load(self) -> Loaded:
        """Read the file (creating the directory if needed); drop and truncate a torn tail."""
        os.makedirs(self.directory, exist_ok=True)
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        entries, valid = _decode_entries(data)
        loaded = Loaded(dropped_bytes=len(data) - valid)
        if loaded.dropped_bytes:
            log.warning("metadata log %s: dropping %d bytes of torn or corrupt tail at byte %d",
                        self.path, loaded.dropped_bytes, valid)
            with open(self.path, "r+b") as f:
                f.truncate(valid)
                f.flush()
                os.fsync(f.fileno())
        i = 0
        if entries and entries[0].get("type") == "snapshot_begin":
            end = int(entries[0]["offset"])
            i = 1
            while i < len(entries) and entries[i].get("type") != "snapshot_end":
                loaded.snapshot.append(self._decode(entries[i]))
                i += 1
            if i >= len(entries):
                raise MetadataLogError(f"{self.path}: snapshot without its end marker")
            i += 1
            loaded.snapshot_end = end
        expect = loaded.snapshot_end
        for e in entries[i:]:
            off, rec = self._decode(e)
            if off != expect:
                raise MetadataLogError(f"{self.path}: record at offset {off} where {expect} was expected")
            loaded.records.append((off, rec))
            expect += 1
        self.log_start = loaded.snapshot_end
        self._wire = [to_wire(rec, off) for off, rec in loaded.records]
        self.end = self.durable_end = expect
        return loaded

    def _decode(self, e: dict[str, Any]) -> tuple[int, MetadataRecord]:
        try:
            return from_wire(e)
        except ValueError as exc:
            raise MetadataLogError(f"{self.path}: {exc}") from None

    def compact(self, image: list[tuple[int, MetadataRecord]], end: int) -> None:
        """Replace the file by a snapshot of `image` (everything below `end`); no records retained.
        Blocking: call at startup, before serving."""
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(encode_entry({"type": "snapshot_begin", "offset": end}))
            f.write(b"".join(encode_entry(to_wire(rec, off)) for off, rec in image))
            f.write(encode_entry({"type": "snapshot_end", "offset": end}))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.directory)
        self.log_start = self.end = self.durable_end = end
        self._wire = []

    def start(self) -> None:
        """Open the file for appending and start the flusher (needs a running loop)."""
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._wake = asyncio.Event()
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop(), name="metadata-log-flusher")

    async def close(self) -> None:
        """Flush what is pending, stop the flusher, close the file."""
        if self._flusher is not None:
            if self.failed is None and self.durable_end < self.end:
                try:
                    await self.wait_durable(self.end - 1)
                except KafkaError:
                    pass
            self._flusher.cancel()
            try:
                await self._flusher
            except (asyncio.CancelledError, Exception):
                pass
            self._flusher = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # ---------------------------------------------------------------- writing
    def append(self, records: list[tuple[int, MetadataRecord]]) -> None:
        """Triggered by every controller decision that produced records (already in offset order)."""
        if self.failed is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"metadata log failed: {self.failed}")
        for off, rec in records:
            if off != self.end:
                raise MetadataLogError(f"append at offset {off}, log end is {self.end}")
            wire = to_wire(rec, off)
            self._wire.append(wire)
            self._pending.append(encode_entry(wire))
            self.end = off + 1
        if records and self._wake is not None:
            self._wake.set()

    async def _flush_loop(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._pending:
                continue
            data, self._pending = b"".join(self._pending), []
            target = self.end
            try:
                await loop.run_in_executor(None, self._write_sync, data)
            except Exception as exc:  # an I/O error on the metadata log is fatal
                log.critical("metadata log %s: write/fsync failed: %s", self.path, exc)
                self.failed = exc
                self._fail_waiters(exc)
                return
            self.durable_end = target
            self._wake_waiters()

    def _write_sync(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)

    def _wake_waiters(self) -> None:
        keep = []
        for off, fut in self._durable_waiters:
            if off < self.durable_end:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((off, fut))
        self._durable_waiters = keep
        waiters, self._record_waiters = self._record_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _fail_waiters(self, exc: BaseException) -> None:
        err = KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"metadata log write failed: {exc}")
        for _, fut in self._durable_waiters:
            if not fut.done():
                fut.set_exception(err)
        self._durable_waiters = []
        for fut in self._record_waiters:
            if not fut.done():
                fut.set_result(None)
        self._record_waiters = []

    async def wait_durable(self, offset: int) -> None:
        """Return once the record at `offset` (and all before it) is fsynced."""
        if offset < self.durable_end:
            return
        if self.failed is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"metadata log failed: {self.failed}")
        fut = asyncio.get_running_loop().create_future()
        self._durable_waiters.append((offset, fut))
        await fut

    # ---------------------------------------------------------------- reading
    def read(self, from_offset: int, max_records: int) -> list[dict[str, Any]]:
        """Durable records from `from_offset` (>= log_start), at most max_records, in wire form."""
        lo = from_offset - self.log_start
        hi = min(self.durable_end - self.log_start, lo + max_records)
        return self._wire[lo:hi] if hi > lo else []

    async def wait_for_records(self, from_offset: int, max_wait_ms: int) -> None:
        """Park until a durable record at or beyond `from_offset` exists, or max_wait_ms passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        while self.durable_end <= from_offset and self.failed is None:
            left = deadline - loop.time()
            if left <= 0:
                return
            fut = loop.create_future()
            self._record_waiters.append(fut)
            try:
                await asyncio.wait_for(fut, left)
            except TimeoutError:
                return
            finally:
                if fut in self._record_waiters:
                    self._record_waiters.remove(fut)
