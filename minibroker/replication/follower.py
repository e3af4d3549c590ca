"""Follower-side truncation arithmetic (R4, E3): pure functions, no state.

Owns only the arithmetic that turns a leader's diverging-epoch answer and the
follower's own epoch cache into a truncation offset. Must not know the log,
the epoch-cache file, the fetcher or the network.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

UNDEFINED = -1

EndOffsetFor = Callable[[int], "tuple[int, int]"]


def epoch_end_offset(entries: Sequence[tuple[int, int]], leo: int, requested: int) -> tuple[int, int]:
    """E3 `endOffsetFor(requested)` over an epoch cache given as ascending
    (epoch, start_offset) pairs, for a log whose end offset is `leo`."""
    if requested == UNDEFINED or not entries:
        return (UNDEFINED, UNDEFINED)
    latest_epoch = entries[-1][0]
    if requested == latest_epoch:
        return (requested, leo)
    if requested > latest_epoch:
        return (UNDEFINED, UNDEFINED)
    if requested < entries[0][0]:
        return (requested, entries[0][1])
    for i in range(len(entries) - 1, -1, -1):
        epoch, _ = entries[i]
        if epoch <= requested:
            return (epoch, entries[i + 1][1])
    raise AssertionError("unreachable: requested >= first epoch")


def truncation_offset(
    diverging_epoch: int,
    diverging_end_offset: int,
    local_end_offset_for: EndOffsetFor,
    local_leo: int,
) -> tuple[int, bool]:
    """Where to truncate after the leader answered divergingEpoch (R4).

    Returns (offset, done). `done` is False when the follower does not know
    the leader's epoch: it truncates to the end of its own nearest epoch and
    fetches again, and the next answer may truncate further (KIP-279).
    """
    if diverging_epoch == UNDEFINED:
        # The leader has no epoch at or below ours: trust its end offset.
        return (min(diverging_end_offset, local_leo), True)
    local_epoch, local_end = local_end_offset_for(diverging_epoch)
    if local_epoch == UNDEFINED or local_end == UNDEFINED:
        # We hold no entry at or below that epoch.
        return (min(diverging_end_offset, local_leo), True)
    if local_epoch == diverging_epoch:
        return (min(local_end, diverging_end_offset, local_leo), True)
    return (min(local_end, local_leo), False)
