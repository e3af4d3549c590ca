"""Which records of `__consumer_offsets` to write again so time retention only deletes superseded ones.

Owns: the rule that keeps the topic bounded without compaction. The topic
has time retention (`retention.ms` = offsets.retention.minutes); a segment
is deleted once its newest record is older than that. So every live key is
written again (same value) once its last write is older than half the
retention: any record older than the retention then has a newer copy or a
tombstone, and deleting it loses nothing. Offsets of an Empty group whose
commit is older than offsets.retention.minutes expire (Kafka's offset
expiration): they are dropped from the group and not written again, so
retention removes them from the log too.

Must not know: the log, records' encoding, the clock (`now_ms` is handed in).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from minibroker.coordinator.group import Group, GroupState


@dataclass
class Refresh:
    offsets: list[tuple[str, tuple[str, int]]] = field(default_factory=list)   # (group, (topic, partition))
    groups: list[str] = field(default_factory=list)
    expired: list[tuple[str, tuple[str, int]]] = field(default_factory=list)
    expired_groups: list[str] = field(default_factory=list)     # Empty, no offsets left, metadata too old


def maybe_refresh(groups: Iterable[Group], now_ms: int, retention_ms: int,
                  busy: set[tuple[str, tuple[str, int] | None]]) -> Refresh:
    """Triggered by the driver's periodic check. `busy` holds keys with a write in flight
    ((group, tp) for offsets, (group, None) for group metadata): they are left alone."""
    out = Refresh()
    refresh_after = retention_ms // 2
    for g in groups:
        if g.state is GroupState.DEAD:
            continue
        for tp in sorted(g.offsets):
            if (g.group_id, tp) in busy:
                continue
            o = g.offsets[tp]
            if g.state is GroupState.EMPTY and now_ms - o.commit_timestamp_ms >= retention_ms:
                out.expired.append((g.group_id, tp))
            elif now_ms - g.offset_written_ms.get(tp, o.commit_timestamp_ms) >= refresh_after:
                out.offsets.append((g.group_id, tp))
        if (g.group_id, None) in busy or g.generation_id <= 0:
            continue
        left = len(g.offsets) - sum(1 for gid, _ in out.expired if gid == g.group_id)
        if g.state is GroupState.EMPTY and not left and now_ms - g.metadata_written_ms >= retention_ms:
            out.expired_groups.append(g.group_id)
        elif now_ms - g.metadata_written_ms >= refresh_after:
            out.groups.append(g.group_id)
    return out
