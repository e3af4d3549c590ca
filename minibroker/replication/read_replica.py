"""Rules about which replicas a leader may count or send readers to: pure functions.

Owns: Kafka's RackAwareReplicaSelector (KIP-392, FF1-FF2) as the leader
applies it to a consumer fetch, and the ISR eligibility of a replica's
broker as metadata describes it (Partition.isReplicaIsrEligible: registered,
not fenced, not in controlled shutdown; H1, I3).

Must not know: metadata records, sockets, the clock, the log. The driver
passes what it read from the metadata image as plain values.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from minibroker.replication.leader import FollowerState

UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class BrokerView:
    """One broker as the metadata image describes it, for these rules."""
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False
    broker_epoch: int = UNKNOWN


def isr_eligibility(broker: BrokerView | None) -> tuple[bool, int]:
    """(eligible, broker epoch) of a replica's broker: an unregistered, fenced or
    shutting-down broker may not join or count towards the ISR (H1, I3)."""
    if broker is None:
        return False, UNKNOWN
    return not broker.fenced and not broker.in_controlled_shutdown, broker.broker_epoch


def select_read_replica(leader_id: int, leader_rack: str, client_rack: str, fetch_offset: int,
                        isr: Iterable[int], followers: Mapping[int, FollowerState],
                        brokers: Mapping[int, BrokerView]) -> int:
    """FF1-FF2 (RackAwareReplicaSelector): the leader if it is in the consumer's rack or no
    in-sync follower is; else the same-rack ISR follower holding `fetch_offset` with the
    highest LEO, then the latest catch-up, then the highest id."""
    if leader_rack == client_rack:
        return leader_id
    best: tuple[int, int, int] | None = None
    for r in isr:
        if r == leader_id:
            continue
        b = brokers.get(r)
        if b is None or b.fenced or b.rack != client_rack:
            continue
        f = followers.get(r)
        if f is None or f.leo < 0 or not max(f.log_start_offset, 0) <= fetch_offset <= f.leo:
            continue
        cand = (f.leo, f.last_caught_up_ms or 0, r)
        if best is None or cand > best:
            best = cand
    return best[2] if best is not None else leader_id
