"""The simulation's disk: real files under a temporary directory, fsync tracked.

Owns: while installed, `os.fsync` records how long each file (by inode) was
when it was last fsynced, instead of waiting for the device (the files stay
in the page cache of this one process, which no crash of a simulated
process can lose); `power_loss(dir)` cuts every file under a directory back
to its fsynced length and removes files never fsynced, as a machine that
lost power would (renames and directory entries are not tracked: a file
renamed after its fsync keeps its data).

Must not know: which process owns which file beyond its directory.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager


class SimDisk:
    """Invariant: `durable[(dev, ino)]` is the size of that file at its last fsync."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.durable: dict[tuple[int, int], int] = {}
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        st = os.fstat(fd)
        self.fsyncs += 1
        if stat.S_ISREG(st.st_mode):
            self.durable[(st.st_dev, st.st_ino)] = st.st_size

    @contextmanager
    def installed(self) -> Iterator[SimDisk]:
        real = os.fsync
        os.fsync = self.fsync  # type: ignore[assignment]
        try:
            yield self
        finally:
            os.fsync = real

    def power_loss(self, directory: str) -> int:
        """Drop what was not fsynced under `directory`; returns how many files changed."""
        changed = 0
        for base, dirs, files in os.walk(directory):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(base, name)
                st = os.stat(path)
                size = self.durable.get((st.st_dev, st.st_ino))
                if size is None:
                    os.unlink(path)
                    changed += 1
                elif size < st.st_size:
                    os.truncate(path, size)
                    changed += 1
        return changed
