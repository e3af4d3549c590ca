from __future__ import annotations

import os

from minibroker.storage import fsutil


def test_write_all_finishes_short_writes_and_writevs(tmp_path, monkeypatch):
    real_write, real_writev = os.write, os.writev

    def short_write(fd, data):
        return real_write(fd, bytes(memoryview(data)[:3]))

    def short_writev(fd, bufs):
        first = bytes(memoryview(bufs[0])[:5]) if len(bufs[0]) > 5 else bytes(bufs[0])
        return real_writev(fd, [first])

    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    monkeypatch.setattr(os, "write", short_write)
    monkeypatch.setattr(os, "writev", short_writev)
    fsutil.write_all(fd, b"hello world")
    fsutil.write_all(fd, [b"ab", memoryview(b"0123456789")[2:], b"", bytearray(b"xyz")])
    monkeypatch.undo()
    os.close(fd)
    assert path.read_bytes() == b"hello worldab23456789xyz"
