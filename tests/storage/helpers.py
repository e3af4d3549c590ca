"""Shared helpers for the storage tests."""
from __future__ import annotations

from minibroker.records import build_batch

T0 = 1_700_000_000_000


def batch(n: int = 3, *, ts: int = T0, size: int = 10, tag: int = 0) -> bytes:
    """A client batch of `n` records with distinct values."""
    return build_batch([(None, f"{tag}:{i}:".encode().ljust(size, b"x"), ts) for i in range(n)])


class ManualClock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now
