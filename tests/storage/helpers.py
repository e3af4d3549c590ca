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


def stamped(n: int, base: int, epoch: int, *, size: int = 10, tag: int | None = None, ts: int = T0) -> bytes:
    """A batch as a leader would have stamped it: offsets base..base+n-1."""
    from minibroker.records import stamp
    return stamp(batch(n, size=size, tag=base if tag is None else tag, ts=ts), base, epoch)


def write_batches(log, layout: list[tuple[int, int]], **kw) -> list[tuple[int, int, bytes]]:
    """Append (n_records, epoch) batches as a follower; return (base, last, bytes) per batch."""
    out = []
    for n, epoch in layout:
        base = log.log_end_offset
        data = stamped(n, base, epoch, **kw)
        log.append_as_follower(data)
        out.append((base, base + n - 1, data))
    return out


def abandon(log) -> None:
    """Drop a log the way a killed process would: close fds, flush nothing."""
    import os
    for seg in log._segments:
        for f in (seg, seg.index, seg.time_index):
            if f._fd >= 0:
                os.close(f._fd)
            f._fd, f._closed = -1, True
    log._closed = True


def read_all(log) -> bytes:
    """Every byte of the log from its start, via the read path."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 24)
        assert chunk, f"empty read at {offset}"
        out.append(chunk)
        from minibroker.records import scan_headers
        offset = list(scan_headers(chunk))[-1].last_offset + 1
    return b"".join(out)
