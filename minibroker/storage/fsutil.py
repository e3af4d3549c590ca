"""Small file-system helpers shared by the storage modules.

`assert_off_event_loop` guards every call that fsyncs: fsync must never run
on an asyncio event-loop thread (run it via `asyncio.to_thread`).
"""
from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Sequence

from minibroker.errors import ErrorCode, KafkaError


def assert_off_event_loop(what: str) -> None:
    """Raise RuntimeError when called from a thread running an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{what} blocks on fsync; call it from a worker thread "
                       f"(await asyncio.to_thread(...)), not on the event loop")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


Buffer = bytes | bytearray | memoryview
_IOV_MAX = min(getattr(os, "sysconf", lambda _: 1024)("SC_IOV_MAX") or 1024, 1024)


def write_all(fd: int, data: Buffer | Sequence[Buffer]) -> None:
    """Write every byte of `data` (one buffer, or a list written with writev)
    to `fd`; os.write/os.writev may write fewer bytes than asked."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        n = os.write(fd, data)
        if n == len(data):                  # the common case: all of it at once
            return
        if n <= 0:  # pragma: no cover - regular files do not return 0
            raise OSError(errno.EIO, "write returned 0")
        mv = memoryview(data)[n:]
        while mv:
            n = os.write(fd, mv)
            if n <= 0:  # pragma: no cover - regular files do not return 0
                raise OSError(errno.EIO, "write returned 0")
            mv = mv[n:]
        return
    if len(data) <= _IOV_MAX:
        total = sum(len(b) for b in data)
        n = os.writev(fd, data)
        if n == total:
            return
        data = [memoryview(b"".join(data))[n:]]  # rare short write: finish the rest
    views = [memoryview(b).cast("B") for b in data if len(b)]
    i = 0
    while i < len(views):
        n = os.writev(fd, views[i:i + _IOV_MAX])
        if n <= 0:  # pragma: no cover
            raise OSError(errno.EIO, "writev returned 0")
        while i < len(views) and n >= len(views[i]):
            n -= len(views[i])
            i += 1
        if n:
            views[i] = views[i][n:]


def storage_error(path: str, exc: BaseException) -> KafkaError:
    return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{path}: {exc}")
