"""Partition changes: leader election, ISR/ELR targets and epoch arithmetic.

One pure function, `build_partition_change`, turns a partition's current
state plus a target (new ISR, recovery state, election type) into the next
full `PartitionRecord`, or None when nothing would change. It follows Kafka's
`PartitionChangeBuilder.build` (kafka-semantics C3, C4, C5, C7, C9):

- ELR (when enabled): ISR >= min ISR clears ELR; otherwise
  ELR = (old ELR | old ISR) - target ISR - uncleanly shut down replicas.
- ONLINE/UNCLEAN election (C3): keep a still-valid leader; else the first
  valid replica in assignment order ("valid" = in the target ISR, or in the
  ELR when the ISR is empty, and acceptable); else the last known leader
  (ELR on, ISR and ELR empty; unclean); else, for UNCLEAN, the first
  acceptable replica (unclean); else -1.
- PREFERRED (C4): replicas[0] if valid; else the current leader if valid;
  else the next valid replica; else the last known leader; else -1.
- A leader taken from the ELR becomes the sole ISR member and leaves the
  ELR. An unclean leader forces ISR = [leader], RECOVERING, and clears ELR.
- C5: any change bumps the partition epoch by 1; setting the leader field
  (it changed, including to -1) also bumps the leader epoch. An ISR-only
  change keeps the leader epoch. A no-op yields None.
- Reassignment (KIP-455, C10): the change may carry target replicas and the
  adding / removing sets. Before the election it completes a reassignment
  whose adding replicas are all in the target ISR (Kafka's
  completeReassignmentIfNeeded): the removing replicas leave the replicas
  and the ISR (unless that would empty the ISR). Elections follow the target
  replicas' order, so a removed leader is replaced by the first valid one;
  a change that drops replicas bumps the leader epoch even when the leader
  stays (triggerLeaderEpochBumpForReplicaReassignmentIfNeeded), fencing the
  removed replicas' fetches.
- With ELR off the ISR never becomes empty: removing its last member leaves
  it unchanged (C2) and the partition goes leaderless.

One deliberate difference from the Kafka snapshot we read: its
`canElectLastKnownLeader` does not actually require the last known leader to
be acceptable (the check only logs). We require it, as KIP-966 intends: a
fenced broker is never made leader.

Must not know: brokers, topics, configs, the clock or the log. Callers pass
`acceptable` (registered, unfenced, not shutting down, not being removed).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from collections.abc import Callable, Collection, Sequence

from minibroker.metadata import NO_LEADER, RECOVERED, RECOVERING, PartitionRecord

_NO_CHANGE = -2


def _ids(xs: Sequence[int]) -> str:
    return "[" + ",".join(str(x) for x in xs) + "]"


class Election(enum.Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """The next state of one partition and how its leader (if changed) was chosen.

    Invariant: `after.partition_epoch == before.partition_epoch + 1`;
    `leader_changed` iff `after.leader_epoch == before.leader_epoch + 1`.
    `how` is "" (leader unchanged), "clean", "elr", "unclean",
    "last_known_leader" or "reassignment" (same leader, epoch bumped
    because replicas left).
    """
    before: PartitionRecord
    after: PartitionRecord
    leader_changed: bool
    how: str

    @property
    def unclean(self) -> bool:
        return self.how in ("unclean", "last_known_leader")


def build_partition_change(part: PartitionRecord, *, acceptable: Callable[[int], bool], min_isr: int,
                           elr_enabled: bool, election: Election = Election.ONLINE,
                           target_isr: Sequence[int] | None = None, target_recovery_state: int | None = None,
                           unclean_shutdown: Collection[int] = (), reason: str = "",
                           target_replicas: Sequence[int] | None = None, target_adding: Sequence[int] | None = None,
                           target_removing: Sequence[int] | None = None) -> PartitionChange | None:
    """The change that moves `part` toward the targets, or None if it would be a no-op."""
    t_isr = list(part.isr) if target_isr is None else list(target_isr)
    t_elr = list(part.elr)
    t_lrs = part.leader_recovery_state if target_recovery_state is None else target_recovery_state
    t_replicas = list(part.replicas) if target_replicas is None else list(target_replicas)
    t_adding = list(part.adding_replicas) if target_adding is None else list(target_adding)
    t_removing = list(part.removing_replicas) if target_removing is None else list(target_removing)

    # -- reassignment completion (completeReassignmentIfNeeded) -----------------
    if (t_adding or t_removing) and all(r in t_isr for r in t_adding):
        completed_isr = [r for r in t_isr if r not in t_removing]
        if completed_isr:
            done = [r for r in t_replicas if r not in t_removing]
            reason = (f"{reason}; " if reason else "") + f"reassignment completed: replicas {_ids(done)}"
            t_isr, t_replicas, t_adding, t_removing = completed_isr, done, [], []
    gone = set(part.replicas) - set(t_replicas)
    if gone:
        t_elr = [r for r in t_elr if r not in gone]

    if elr_enabled:
        if len(t_isr) >= min_isr:
            t_elr = []
        else:
            isr_set = set(t_isr)
            t_elr = sorted(r for r in set(t_elr) | set(part.isr)
                           if r not in isr_set and r not in unclean_shutdown and r not in gone)

    def valid(r: int) -> bool:
        return (r in t_isr or (not t_isr and r in t_elr)) and acceptable(r)

    def last_known_leader() -> int | None:
        if not elr_enabled or t_isr or t_elr or len(part.last_known_elr) != 1:
            return None
        r = part.last_known_elr[0]
        return r if acceptable(r) else None

    # -- election ------------------------------------------------------------
    node, unclean, how = NO_LEADER, False, ""
    if election is Election.PREFERRED:
        if t_replicas and valid(t_replicas[0]):
            node = t_replicas[0]
        elif part.leader != NO_LEADER and valid(part.leader):
            node = part.leader
        else:
            node = next((r for r in t_replicas[1:] if valid(r)), NO_LEADER)
    elif part.leader != NO_LEADER and valid(part.leader):
        node = part.leader
    else:
        node = next((r for r in t_replicas if valid(r)), NO_LEADER)
    if node == NO_LEADER:
        lkl = last_known_leader()
        if lkl is not None:
            node, unclean, how = lkl, True, "last_known_leader"
        elif election is Election.UNCLEAN:
            node = next((r for r in t_replicas if acceptable(r)), NO_LEADER)
            unclean, how = node != NO_LEADER, "unclean" if node != NO_LEADER else ""

    rec_leader = _NO_CHANGE
    rec_isr: list[int] | None = None
    rec_lrs: int | None = None
    if node != part.leader:
        if node in t_elr:
            t_isr = [node]
            t_elr = [r for r in t_elr if r != node]
            how = "elr"
        elif not how:
            how = "clean"
        rec_leader = node
        if unclean:
            rec_isr = [node]
            if part.leader_recovery_state != RECOVERING:
                rec_lrs = RECOVERING
    else:
        how = ""
        if gone and part.leader != NO_LEADER:
            rec_leader, how = part.leader, "reassignment"     # the removed replicas' fetches are fenced

    # -- ELR fields (maybeUpdateRecordElr) -----------------------------------
    if rec_isr is not None or not elr_enabled:
        t_elr = []
    rec_elr = t_elr if tuple(t_elr) != part.elr else None

    # -- ISR -----------------------------------------------------------------
    if rec_isr is None and (t_isr or elr_enabled) and tuple(t_isr) != part.isr:
        rec_isr = t_isr

    # -- LastKnownElr (maybeUpdateLastKnownLeader) -----------------------------
    rec_lkelr: list[int] | None = None
    if elr_enabled:
        if rec_isr is not None and not rec_isr and part.last_known_elr != (part.leader,):
            rec_lkelr = [part.leader]
        elif (rec_leader >= 0 or (part.leader != NO_LEADER and rec_leader != NO_LEADER)) and part.last_known_elr:
            rec_lkelr = []
    elif part.last_known_elr:
        rec_lkelr = []

    if t_lrs != part.leader_recovery_state:
        rec_lrs = t_lrs

    if rec_lkelr is None and any(r in gone for r in part.last_known_elr):
        rec_lkelr = [r for r in part.last_known_elr if r not in gone]
    replicas_changed = (tuple(t_replicas) != part.replicas or tuple(t_adding) != part.adding_replicas
                        or tuple(t_removing) != part.removing_replicas)
    if (rec_leader == _NO_CHANGE and rec_isr is None and rec_elr is None and rec_lkelr is None and rec_lrs is None
            and not replicas_changed):
        return None
    after = replace(
        part,
        replicas=tuple(t_replicas),
        adding_replicas=tuple(t_adding),
        removing_replicas=tuple(t_removing),
        isr=tuple(rec_isr) if rec_isr is not None else part.isr,
        leader=rec_leader if rec_leader != _NO_CHANGE else part.leader,
        leader_epoch=part.leader_epoch + 1 if rec_leader != _NO_CHANGE else part.leader_epoch,
        partition_epoch=part.partition_epoch + 1,
        elr=tuple(rec_elr) if rec_elr is not None else part.elr,
        last_known_elr=tuple(rec_lkelr) if rec_lkelr is not None else part.last_known_elr,
        leader_recovery_state=rec_lrs if rec_lrs is not None else part.leader_recovery_state,
        reason=reason,
    )
    return PartitionChange(part, after, rec_leader != _NO_CHANGE, how)


__all__ = ["Election", "PartitionChange", "build_partition_change", "RECOVERED", "RECOVERING"]
