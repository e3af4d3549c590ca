"""Opening a partition directory: trust a clean shutdown, recover otherwise.

Owns the load-time decisions of D5/D6 (Kafka's LogLoader): which segments to
trust, which to scan, where to cut a torn or corrupt tail, which later
segments to delete, and how to trim the epoch cache and the recovery point.
Must not know about the network, the HW or other partitions; `LogManager`
supplies the checkpointed recovery point and log start offset.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from minibroker.storage.checkpoint import LEADER_EPOCH_FILE, LeaderEpochCheckpointFile
from minibroker.storage.epoch_cache import LeaderEpochCache
from minibroker.storage.segment import (
    DELETED_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, parse_segment_name,
)


@dataclass
class LoadInfo:
    """What opening the log did; the `recovery` event carries it."""
    clean_shutdown: bool
    segments_loaded: int = 0
    segments_recovered: int = 0
    batches_scanned: int = 0
    bytes_truncated: int = 0
    segments_deleted: list[int] = field(default_factory=list)
    problem: str | None = None
    recovered_from_offset: int | None = None
    log_end_offset: int = 0
    recovery_point: int = 0
    log_start_offset: int = 0
    epoch_entries_dropped: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class LoadedLog:
    segments: list[LogSegment]
    epoch_cache: LeaderEpochCache
    log_start_offset: int
    recovery_point: int
    info: LoadInfo
    epoch_file_entries: list[tuple[int, int]]


def _cleanup_stray_files(directory: str, names: list[str], bases: set[int]) -> None:
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(".tmp"):
            os.unlink(path)  # an interrupted checkpoint write; the old file stands
            continue
        if name.endswith(DELETED_SUFFIX):
            os.unlink(path)  # a retired segment file whose delayed unlink had not run (D10)
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            if name.endswith(suffix) and len(name) == 20 + len(suffix) and name[:20].isdigit():
                if int(name[:20]) not in bases:
                    os.unlink(path)  # index of a segment that is gone


def load_log(directory: str, index_interval_bytes: int, *, recovery_point: int,
             log_start_offset: int, clean_shutdown: bool) -> LoadedLog:
    """Open every segment of `directory`, recovering as D6 describes.

    Clean shutdown: segments are trusted (indexes only sanity-checked; a
    segment whose index fails is recovered). Otherwise every segment from the
    one holding `recovery_point` on is scanned with full CRC checks; the
    first invalid or partial batch cuts its file there and deletes all later
    segments. Epoch-cache entries of the scanned range are rebuilt from the
    batches, then the cache is trimmed to [log start, LEO]."""
    os.makedirs(directory, exist_ok=True)
    names = os.listdir(directory)
    bases = sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)
    _cleanup_stray_files(directory, names, set(bases))
    cache = LeaderEpochCache(LeaderEpochCheckpointFile(os.path.join(directory, LEADER_EPOCH_FILE)).read())
    before_entries = cache.entries
    info = LoadInfo(clean_shutdown=clean_shutdown)

    segments = [LogSegment.open_existing(directory, b, index_interval_bytes) for b in bases]
    info.segments_loaded = len(segments)
    recover_from: int | None = None
    if segments:
        if clean_shutdown:
            trusted_until = len(segments)
        else:
            trusted_until = 0
            for i, seg in enumerate(segments):
                if seg.base_offset <= recovery_point:
                    trusted_until = i
        for i in range(trusted_until):
            problem = segments[i].load_clean()
            if problem is None and i > 0 and segments[i].base_offset != segments[i - 1].next_offset:
                problem = (f"segment {segments[i].base_offset} does not start at the previous "
                           f"segment's end {segments[i - 1].next_offset}")
            if problem is not None:
                info.problem = problem
                trusted_until = i
                break
        if trusted_until < len(segments):
            recover_from = trusted_until

    if recover_from is not None:
        start_offset = segments[recover_from].base_offset
        info.recovered_from_offset = start_offset
        cache.truncate_from_end(start_offset)
        cut_at: int | None = None
        for i in range(recover_from, len(segments)):
            seg = segments[i]
            if i > 0 and seg.base_offset != segments[i - 1].next_offset:
                info.problem = (f"segment {seg.base_offset} does not start at the previous "
                                f"segment's end {segments[i - 1].next_offset}")
                cut_at = i
                break
            result = seg.recover(cache.assign)
            info.segments_recovered += 1
            info.batches_scanned += result.batches
            if result.truncated_bytes:
                info.bytes_truncated += result.truncated_bytes
                info.problem = f"{seg.log_path}: {result.problem}"
                cut_at = i + 1
                break
        if cut_at is not None:
            for seg in segments[cut_at:]:
                info.bytes_truncated += seg.size if seg.fd >= 0 else 0
                info.segments_deleted.append(seg.base_offset)
                seg.delete()
            del segments[cut_at:]

    if segments:
        log_start_offset = max(log_start_offset, segments[0].base_offset)
    if not segments or segments[-1].next_offset < log_start_offset:
        for seg in segments:
            info.segments_deleted.append(seg.base_offset)
            seg.delete()
        segments = [LogSegment.create(directory, log_start_offset, index_interval_bytes)]
        cache.clear()

    leo = segments[-1].next_offset
    cache.truncate_from_end(leo)
    cache.truncate_from_start(log_start_offset)
    after = set(cache.entries)
    info.epoch_entries_dropped = [e for e in before_entries if e not in after]
    rp = leo if clean_shutdown and recover_from is None else min(recovery_point, leo)
    info.log_end_offset = leo
    info.recovery_point = rp
    info.log_start_offset = log_start_offset
    return LoadedLog(segments, cache, log_start_offset, rp, info, before_entries)


__all__ = ["LoadInfo", "LoadedLog", "load_log"]
