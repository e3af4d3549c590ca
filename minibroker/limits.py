"""Size limits that tie the frame limit, the largest batch and fetch responses together.

Owns the arithmetic (issue 10, KIP-74): a fetch returns at least one whole
batch, so every batch a leader accepts, plus the fetch response around it,
must fit in one frame (socket.request.max.bytes) or the follower could never
fetch it, and, since one fetch carries every partition between two brokers,
replication of all of them would stop. Pure functions; knows no sockets,
files or clocks.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

# Room kept in a frame for a fetch response's own fields and its other
# partitions' entries (about 100 bytes each: some thousands of them).
FETCH_RESPONSE_RESERVE_BYTES = 1 << 20
FETCH_ENTRY_RESERVE_BYTES = 256


def max_message_bytes_limit(frame_limit: int) -> int:
    """The largest max.message.bytes a follower can always fetch."""
    return max(0, frame_limit - FETCH_RESPONSE_RESERVE_BYTES)


def clamp_batch_size(cfg: Any, frame_limit: int) -> Any:
    """A LogConfig whose max_message_bytes is at most max_message_bytes_limit."""
    limit = max_message_bytes_limit(frame_limit)
    return replace(cfg, max_message_bytes=limit) if cfg.max_message_bytes > limit else cfg


def fetch_records_budget(max_bytes: int, frame_limit: int, entries: int) -> int:
    """Record bytes a fetch response of `entries` partitions may carry: the
    request's max_bytes, never more than what leaves room in the frame."""
    room = frame_limit - 4096 - FETCH_ENTRY_RESERVE_BYTES * entries
    return max(0, min(max_bytes, room))
