"""The per-partition producer-state snapshot file (Kafka's `<offset>.snapshot`).

Owns the on-disk format of `producer-state.snapshot` in a partition
directory: a 4-byte CRC32C of the body, then the body, the msgpack of
`ProducerState.snapshot()` (its `through` offset says up to which log
offset, exclusive, the state was built). Written atomically (tmp, fsync,
rename, directory fsync) at clean shutdown and on the offset-checkpoint
timer; deleted when the log is truncated (the state it holds may describe
removed batches). A missing, torn or corrupt file reads as None: the
caller rebuilds from batch headers. Must not know the state's rules.
Writes block on fsync: never call on the event loop.
"""
from __future__ import annotations

import os
import struct
from typing import Any

import msgpack
from crc32c import crc32c

from minibroker.storage import fsutil

SNAPSHOT_FILE = "producer-state.snapshot"
_CRC = struct.Struct(">I")


def snapshot_path(directory: str) -> str:
    return os.path.join(directory, SNAPSHOT_FILE)


def write_snapshot(directory: str, data: dict[str, Any]) -> None:
    fsutil.assert_off_event_loop("write_snapshot")
    body = msgpack.packb(data)
    path = snapshot_path(directory)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fsutil.write_all(fd, [_CRC.pack(crc32c(body)), body])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsutil.fsync_dir(directory)


def read_snapshot(directory: str) -> dict[str, Any] | None:
    try:
        with open(snapshot_path(directory), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    if len(raw) < _CRC.size or _CRC.unpack_from(raw)[0] != crc32c(raw[_CRC.size:]):
        return None
    try:
        data = msgpack.unpackb(raw[_CRC.size:])
    except (ValueError, msgpack.ExtraData, msgpack.UnpackException):
        return None
    return data if isinstance(data, dict) else None


def delete_snapshot(directory: str) -> None:
    try:
        os.unlink(snapshot_path(directory))
    except FileNotFoundError:
        pass
