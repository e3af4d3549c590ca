"""Small file-system helpers shared by the storage modules.

`assert_off_event_loop` guards every call that fsyncs: fsync must never run
on an asyncio event-loop thread (run it via `asyncio.to_thread`).
"""
from __future__ import annotations

import asyncio
import errno
import os

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


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of `data` to `fd` (os.write may write fewer)."""
    mv = memoryview(data)
    while mv:
        n = os.write(fd, mv)
        if n <= 0:  # pragma: no cover - regular files do not return 0
            raise OSError(errno.EIO, "write returned 0")
        mv = mv[n:]


def storage_error(path: str, exc: BaseException) -> KafkaError:
    return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{path}: {exc}")
