"""Checkpoint files: Kafka's text format, written atomically.

Owns the on-disk format of `replication-offset-checkpoint`,
`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and the
per-partition `leader-epoch-checkpoint` (semantics doc D4)::

    0                 <- version
    2                 <- entry count
    orders 0 1523     <- "topic partition offset", or "epoch startOffset"
    orders 1 877

Writes go to `<file>.tmp`, which is flushed and fsynced, renamed over the
file, and the directory is fsynced: a crash leaves the old file or the new
one, never a mix. A leftover `.tmp` is ignored on read and overwritten by the
next write. Reading an absent or empty file, or one without a count line,
gives no entries; any other malformation raises `CorruptCheckpointError`
naming the file and line, never a silent zero. Every write blocks on fsync,
so it must run off the event loop.
"""
from __future__ import annotations

import os
from typing import TypeVar
from collections.abc import Callable, Iterable

from minibroker.errors import ErrorCode, KafkaError
from minibroker.storage import fsutil

VERSION = 0
T = TypeVar("T")

HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"


class CorruptCheckpointError(KafkaError):
    """A checkpoint file that cannot be trusted. Not retriable: an operator
    must look at the file (or delete it to fall back to recovery)."""

    def __init__(self, path: str, problem: str, line_no: int | None = None) -> None:
        where = f"{path}" if line_no is None else f"{path}, line {line_no}"
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, f"malformed checkpoint file {where}: {problem}")
        self.path = path
        self.line_no = line_no

    @property
    def retriable(self) -> bool:
        return False


def write_checkpoint(path: str, lines: Iterable[str]) -> None:
    """Atomically replace `path` with version 0, the count, and `lines`.
    Blocks on fsync: never call on the event loop."""
    fsutil.assert_off_event_loop("write_checkpoint")
    entries = list(lines)
    body = "".join(f"{line}\n" for line in entries)
    data = f"{VERSION}\n{len(entries)}\n{body}".encode()
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fsutil.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsutil.fsync_dir(os.path.dirname(os.path.abspath(path)))


def read_checkpoint(path: str, parse: Callable[[list[str]], T]) -> list[T]:
    """Read a checkpoint file; `parse` turns one line's space-separated fields
    into an entry and raises ValueError when they are malformed."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(path, f"not UTF-8 ({exc})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return []
    try:
        version = int(lines[0])
    except ValueError:
        raise CorruptCheckpointError(path, f"version {lines[0]!r} is not an integer", 1) from None
    if version != VERSION:
        raise CorruptCheckpointError(path, f"unrecognised version {version}", 1)
    if len(lines) < 2:
        return []
    try:
        expected = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(path, f"entry count {lines[1]!r} is not an integer", 2) from None
    if expected < 0:
        raise CorruptCheckpointError(path, f"negative entry count {expected}", 2)
    entries: list[T] = []
    for i, line in enumerate(lines[2:], start=3):
        fields = line.split(" ")
        try:
            entries.append(parse(fields))
        except ValueError as exc:
            raise CorruptCheckpointError(path, f"malformed entry {line!r} ({exc})", i) from None
    if len(entries) != expected:
        raise CorruptCheckpointError(path, f"expected {expected} entries, found {len(entries)}")
    return entries


def _parse_offset_entry(fields: list[str]) -> tuple[tuple[str, int], int]:
    if len(fields) != 3 or not fields[0]:
        raise ValueError("want 'topic partition offset'")
    partition, offset = int(fields[1]), int(fields[2])
    if partition < 0:
        raise ValueError("negative partition")
    return (fields[0], partition), offset


def _parse_epoch_entry(fields: list[str]) -> tuple[int, int]:
    if len(fields) != 2:
        raise ValueError("want 'epoch startOffset'")
    epoch, start = int(fields[0]), int(fields[1])
    if epoch < 0 or start < 0:
        raise ValueError("negative epoch or offset")
    return epoch, start


class OffsetCheckpointFile:
    """`topic partition offset` entries for a whole data dir (HW, recovery
    point, log start offset)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for tp, offset in read_checkpoint(self.path, _parse_offset_entry):
            out[tp] = offset
        return out

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        lines = []
        for (topic, partition), offset in sorted(offsets.items()):
            if " " in topic or "\n" in topic:
                raise ValueError(f"topic {topic!r} cannot be written to a checkpoint")
            lines.append(f"{topic} {partition} {offset}")
        write_checkpoint(self.path, lines)


class LeaderEpochCheckpointFile:
    """`epoch startOffset` entries of one partition's leader-epoch cache."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> list[tuple[int, int]]:
        return read_checkpoint(self.path, _parse_epoch_entry)

    def write(self, entries: Iterable[tuple[int, int]]) -> None:
        write_checkpoint(self.path, [f"{e} {o}" for e, o in entries])
