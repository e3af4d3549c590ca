"""One consumer group under Kafka's classic group protocol, as a pure state machine.

Owns: the group's state (Empty, PreparingRebalance, CompletingRebalance,
Stable, Dead), its members and pending members (KIP-394: a first JoinGroup
without a member id is answered MEMBER_ID_REQUIRED with the id to rejoin
with), the generation id, the chosen protocol and leader, the join and sync
barriers (parked JoinGroup/SyncGroup requests are answered by decisions
later, when the barrier completes), session, rebalance and initial-delay
deadlines driven by `now_ms`, the fencing of stale members
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS), the
validation of offset commits against the generation, static membership
(KIP-345: which member id holds each group instance id, a restarted static
member taking its old member's place and assignment without a rebalance,
FENCED_INSTANCE_ID for the member id it replaced), and the group's committed
offsets.

Must not know: sockets, the log or how records are encoded (the driver,
minibroker.coordinator.service, stores what `StoreGroup` and commits
describe), clocks, random ids (the driver hands in the id a new member gets),
which assignor the members use (the leader member assigns; the group only
carries the bytes), asyncio. It reads one thing of the members' protocol
bytes, as Kafka's ClassicGroup does: the topics a "consumer" group's members
subscribe to (the ConsumerProtocolSubscription prefix every version shares),
which OffsetDelete must not delete the offsets of.

As Kafka's GroupCoordinator/ClassicGroup: a rebalance waits until every
member has rejoined or the largest rebalance timeout passes (members that
did not rejoin are removed); the first rebalance of an Empty group waits
group.initial.rebalance.delay.ms more for others to join; the leader's
SyncGroup carries every member's assignment, which the group stores before
answering the parked SyncGroups. A static member that has not rejoined
stays in the next generation (only dynamic ones are removed there); its
session timeout removes it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from minibroker.protocol.consumer_subscription import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE, decode_subscription
from minibroker.errors import ErrorCode

NO_GENERATION = -1
NO_MEMBER = ""


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupSettings:
    """The broker's group.* settings (Kafka's names and defaults)."""
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 2**31 - 1


@dataclass
class Member:
    """Invariant: `protocols` is non-empty, in the member's order of preference."""
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    # Invariant: a parked JoinGroup's token while the member waits at the join barrier, else None.
    join_token: int | None = None
    # Invariant: a parked SyncGroup's token while the member waits for its assignment, else None.
    sync_token: int | None = None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True)
class JoinResponse:
    """The answer to the JoinGroup parked (or answered at once) under `token`."""
    token: int
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = NO_MEMBER
    member_id: str = NO_MEMBER
    # (member id, group instance id, metadata): filled for the leader only.
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    # JoinGroup v9+: a static leader rejoining a Stable group keeps the assignment it made (KIP-814).
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResponse:
    token: int
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class StoreGroup:
    """Write the group's metadata (its state after this generation) to the offsets topic."""
    group_id: str
    generation_id: int


@dataclass(frozen=True)
class GroupEvent:
    kind: str          # group_state | member_joined | member_removed | member_replaced
    before: str
    after: str
    reason: str


Decision = JoinResponse | SyncResponse | StoreGroup | GroupEvent


@dataclass(frozen=True)
class OffsetDeletion:
    """What OffsetDelete decided: a group-level error (nothing else then), each asked partition's
    error by topic in the request's order, and the committed offsets to tombstone (those asked,
    not refused, that the group has), which the driver stores before `expire` drops them."""
    error: ErrorCode
    results: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...] = ()
    tombstones: tuple[tuple[str, int], ...] = ()


@dataclass
class Group:
    """Invariants: `leader` is a member id in `members` or NO_MEMBER; in
    PreparingRebalance `join_deadline_ms` >= 0; in CompletingRebalance
    `sync_deadline_ms` >= 0; EMPTY iff no members (outside a rebalance)."""
    group_id: str
    settings: GroupSettings = field(default_factory=GroupSettings)
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = NO_MEMBER
    members: dict[str, Member] = field(default_factory=dict)
    # member id -> deadline to rejoin with it (MEMBER_ID_REQUIRED handed out).
    pending: dict[str, int] = field(default_factory=dict)
    # Invariant: group instance id -> the member id holding it, exactly for the members with one.
    static_members: dict[str, str] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # When each offset's and the metadata's latest record was written (minibroker.coordinator.retention).
    offset_written_ms: dict[tuple[str, int], int] = field(default_factory=dict)
    metadata_written_ms: int = 0
    state_timestamp_ms: int = -1
    join_deadline_ms: int = -1
    join_started_ms: int = -1
    initial_delay: bool = False
    sync_deadline_ms: int = -1
    # Invariant: while sync_deadline_ms >= 0, the members of this generation that have not sent its
    # SyncGroup (Kafka's pending sync members); removed at the deadline, in CompletingRebalance or Stable.
    pending_sync: set[str] = field(default_factory=set)
    # Invariant: the topics the members of the current generation subscribe to (Kafka's subscribedTopics),
    # set when a generation starts and when the group is restored; None when unknown (not a "consumer"
    # group, or its protocol bytes could not be read): then a "consumer" group counts as subscribed to all.
    subscribed_topics: frozenset[str] | None = None

    # ------------------------------------------------------------------ JoinGroup

    def maybe_join(self, token: int, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool, new_member_id: str,
                   now_ms: int, supports_skip_assignment: bool = False) -> list[Decision]:
        """Triggered by a JoinGroup request; `new_member_id` is the id a member joining without one gets.
        A static member (`group_instance_id`) joining without a member id gets one at once (no
        MEMBER_ID_REQUIRED round trip, as Kafka) and, if its instance id is held, takes that member's place."""
        s = self.settings
        if self.state is GroupState.DEAD:
            return [JoinResponse(token, ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)]
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return [JoinResponse(token, ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)]
        if not protocol_type or not protocols or not self._supports(protocol_type, protocols):
            return [JoinResponse(token, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)]
        if member_id == NO_MEMBER and group_instance_id is not None:
            held = self.static_members.get(group_instance_id)
            if held is not None:
                return self._replace_static(token, group_instance_id, held, new_member_id, session_timeout_ms,
                                            rebalance_timeout_ms, protocols, supports_skip_assignment, now_ms)
            if len(self.members) + len(self.pending) >= s.max_size:
                return [JoinResponse(token, ErrorCode.UNKNOWN_SERVER_ERROR)]
            member_id = new_member_id
            self.pending[member_id] = now_ms + session_timeout_ms
        elif member_id == NO_MEMBER:
            if len(self.members) + len(self.pending) >= s.max_size:
                return [JoinResponse(token, ErrorCode.UNKNOWN_SERVER_ERROR)]
            if require_known_member_id:
                self.pending[new_member_id] = now_ms + session_timeout_ms
                return [JoinResponse(token, ErrorCode.MEMBER_ID_REQUIRED, member_id=new_member_id)]
            member_id = new_member_id
            self.pending[member_id] = now_ms + session_timeout_ms
        if member_id in self.pending:
            if group_instance_id is not None and group_instance_id in self.static_members:
                return [JoinResponse(token, ErrorCode.FENCED_INSTANCE_ID, member_id=member_id)]
            del self.pending[member_id]
            self.members[member_id] = Member(member_id, group_instance_id, client_id, client_host,
                                             session_timeout_ms, rebalance_timeout_ms, protocol_type,
                                             list(protocols), last_heartbeat_ms=now_ms, join_token=token)
            if group_instance_id is not None:
                self.static_members[group_instance_id] = member_id
            if self.protocol_type is None:
                self.protocol_type = protocol_type
            static = f", group instance id {group_instance_id}" if group_instance_id is not None else ""
            out: list[Decision] = [GroupEvent("member_joined", "", member_id,
                                              f"member {member_id} ({client_id}{static}) joins group {self.group_id}")]
            return out + self._maybe_prepare_rebalance(now_ms, f"adding new member {member_id}") \
                + self._maybe_complete_join(now_ms)
        error = self.validate_member(member_id, group_instance_id)
        if error != ErrorCode.NONE:
            return [JoinResponse(token, error, member_id=member_id)]
        m = self.members[member_id]
        changed = m.protocols != list(protocols)
        m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        m.last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            out = []
            if m.join_token is not None:
                # A retried join replaces the one parked (Kafka answers the old one with
                # UNKNOWN_MEMBER_ID... only in static membership; classic members just rejoin).
                out.append(JoinResponse(m.join_token, ErrorCode.REBALANCE_IN_PROGRESS, member_id=member_id))
            m.protocols, m.join_token = list(protocols), token
            return out + self._maybe_complete_join(now_ms)
        if self.state is GroupState.COMPLETING_REBALANCE and not changed:
            return [self._join_response(m, token)]
        if self.state is GroupState.STABLE and not changed and member_id != self.leader:
            return [self._join_response(m, token)]
        m.protocols, m.join_token = list(protocols), token
        reason = "leader rejoins" if member_id == self.leader and not changed else \
            f"member {member_id} changes its protocol metadata"
        return self._maybe_prepare_rebalance(now_ms, reason) + self._maybe_complete_join(now_ms)

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's validateMember, for every request naming a member: a group instance id must be held,
        by this member id (else FENCED_INSTANCE_ID: a newer instance took it), and the member must exist."""
        if group_instance_id is not None:
            held = self.static_members.get(group_instance_id)
            if held is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if held != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def _replace_static(self, token: int, instance: str, old_id: str, new_id: str, session_timeout_ms: int,
                        rebalance_timeout_ms: int, protocols: list[tuple[str, bytes]], supports_skip_assignment: bool,
                        now_ms: int) -> list[Decision]:
        """Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: a static member restarted (it joins
        without a member id) takes its old member's place, assignment and leadership under `new_id`; a
        request the old member id still has parked is answered FENCED_INSTANCE_ID. A Stable group whose
        selected protocol does not change is stored and answered at once, without a rebalance."""
        old = self.members.pop(old_id)
        self.pending_sync.discard(old_id)            # as Kafka's replaceStaticMember
        out: list[Decision] = []
        if old.join_token is not None:
            out.append(JoinResponse(old.join_token, ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
        if old.sync_token is not None:
            out.append(SyncResponse(old.sync_token, ErrorCode.FENCED_INSTANCE_ID))
        current_leader = self.leader
        m = Member(new_id, instance, old.client_id, old.client_host, session_timeout_ms, rebalance_timeout_ms,
                   old.protocol_type, list(protocols), old.assignment, last_heartbeat_ms=now_ms, join_token=token)
        self.members[new_id] = m
        self.static_members[instance] = new_id
        if self.leader == old_id:
            self.leader = new_id
        out.append(GroupEvent("member_replaced", old_id, new_id, f"group {self.group_id}: static member {instance} "
                                                                 f"rejoins as {new_id}, replacing {old_id}"))
        if self.state is GroupState.STABLE:
            if self._select_protocol() == self.protocol_name:
                m.join_token = None
                if supports_skip_assignment:
                    answer = self._join_response(m, token)
                    answer = JoinResponse(token, ErrorCode.NONE, self.generation_id, self.protocol_type,
                                          self.protocol_name, self.leader, new_id, answer.members,
                                          skip_assignment=new_id == self.leader)
                else:                   # the old leader id: a leader must not assign again in a Stable group
                    answer = JoinResponse(token, ErrorCode.NONE, self.generation_id, self.protocol_type,
                                          self.protocol_name, current_leader, new_id)
                return out + [StoreGroup(self.group_id, self.generation_id), answer]
            return out + self._maybe_prepare_rebalance(
                now_ms, f"static member {instance} rejoined as {new_id} with a change of the selected protocol") \
                + self._maybe_complete_join(now_ms)
        if self.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning under the old member id: rebalance so the new one gets its share.
            return out + self._maybe_prepare_rebalance(now_ms, f"static member {instance} rejoined as {new_id} "
                                                               "while the group was completing a rebalance") \
                + self._maybe_complete_join(now_ms)
        return out + self._maybe_complete_join(now_ms)

    def _supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {n for n, _ in protocols}
        return bool(names & self._candidates())

    def _candidates(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def _join_response(self, m: Member, token: int) -> JoinResponse:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if m.member_id == self.leader:
            members = tuple((x.member_id, x.group_instance_id, x.metadata(self.protocol_name or ""))
                            for x in self.members.values())
        return JoinResponse(token, ErrorCode.NONE, self.generation_id, self.protocol_type, self.protocol_name,
                            self.leader, m.member_id, members)

    def _transition(self, to: GroupState, now_ms: int, reason: str) -> list[Decision]:
        before = self.state
        self.state = to
        self.state_timestamp_ms = now_ms
        return [GroupEvent("group_state", before.value, to.value, f"group {self.group_id}: {reason}")]

    def _maybe_prepare_rebalance(self, now_ms: int, reason: str) -> list[Decision]:
        """Kafka's maybePrepareRebalance: only from Empty, Stable or CompletingRebalance."""
        if self.state not in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return []
        out: list[Decision] = []
        if self.state is GroupState.COMPLETING_REBALANCE:
            out += self._fail_parked_syncs(ErrorCode.REBALANCE_IN_PROGRESS)
        self.initial_delay = self.state is GroupState.EMPTY
        self.join_started_ms = now_ms
        self.sync_deadline_ms = -1
        self.pending_sync.clear()
        timeout = self._rebalance_timeout()
        self.join_deadline_ms = now_ms + (min(self.settings.initial_rebalance_delay_ms, timeout)
                                          if self.initial_delay else timeout)
        return out + self._transition(GroupState.PREPARING_REBALANCE, now_ms, f"preparing to rebalance ({reason})")

    def _rebalance_timeout(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _fail_parked_syncs(self, error: ErrorCode) -> list[Decision]:
        out: list[Decision] = []
        for m in self.members.values():
            if m.sync_token is not None:
                out.append(SyncResponse(m.sync_token, error))
                m.sync_token = None
        return out

    def _all_joined(self) -> bool:
        return not self.pending and all(m.join_token is not None for m in self.members.values())

    def _maybe_complete_join(self, now_ms: int) -> list[Decision]:
        """The join barrier: all members rejoined (outside the initial delay), or its deadline passed."""
        if self.state is not GroupState.PREPARING_REBALANCE:
            return []
        if self.initial_delay:
            if now_ms < self.join_deadline_ms:
                return []
            # Kafka's InitialDelayedJoin: extend by the delay while new members keep coming,
            # up to the rebalance timeout from the start.
            if not self._all_joined() and now_ms < self.join_started_ms + self._rebalance_timeout():
                self.initial_delay = False
                self.join_deadline_ms = self.join_started_ms + self._rebalance_timeout()
                return []
        elif not self._all_joined() and now_ms < self.join_deadline_ms:
            return []
        out: list[Decision] = []
        for m in list(self.members.values()):
            if m.join_token is None and m.group_instance_id is None:
                out += self._remove(m.member_id, f"member {m.member_id} did not rejoin before the "
                                                 f"rebalance timeout ({m.rebalance_timeout_ms} ms)")
        joined = [m.member_id for m in self.members.values() if m.join_token is not None]
        if self.members and not joined:
            # Only static members that have not rejoined: wait another rebalance timeout for them
            # (Kafka's "could not complete rebalance because no members rejoined").
            self.join_deadline_ms = now_ms + self._rebalance_timeout()
            return out
        self.pending.clear()
        self.generation_id += 1
        self.join_deadline_ms = -1
        self.initial_delay = False
        if not self.members:
            self.protocol_type = self.protocol_name = None
            self.leader = NO_MEMBER
            self.subscribed_topics = self.compute_subscribed_topics()
            out += self._transition(GroupState.EMPTY, now_ms, f"generation {self.generation_id} has no members")
            out.append(StoreGroup(self.group_id, self.generation_id))
            return out
        if self.leader not in joined:
            self.leader = joined[0]                   # Kafka's maybeElectNewJoinedLeader
        self.protocol_name = self._select_protocol()
        self.subscribed_topics = self.compute_subscribed_topics()
        out += self._transition(GroupState.COMPLETING_REBALANCE, now_ms,
                                f"generation {self.generation_id} with {len(self.members)} member(s), "
                                f"leader {self.leader}, protocol {self.protocol_name}")
        self.sync_deadline_ms = now_ms + self._rebalance_timeout()
        self.pending_sync = set(self.members)
        for m in self.members.values():
            if m.join_token is not None:          # a static member that has not rejoined gets no answer
                out.append(self._join_response(m, m.join_token))
                m.join_token = None
            m.last_heartbeat_ms = now_ms
        return out

    def _select_protocol(self) -> str:
        """Kafka's selectProtocol: each member votes for its most preferred candidate; most votes
        wins, ties broken by the order of the first member's preference (deterministic)."""
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n, _ in m.protocols if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values()))
        order = [n for n, _ in first.protocols if n in candidates]
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))

    def _remove(self, member_id: str, reason: str) -> list[Decision]:
        m = self.members.pop(member_id)
        self.pending_sync.discard(member_id)
        if m.group_instance_id is not None and self.static_members.get(m.group_instance_id) == member_id:
            del self.static_members[m.group_instance_id]
        out: list[Decision] = [GroupEvent("member_removed", member_id, "", f"group {self.group_id}: {reason}")]
        if m.join_token is not None:
            out.append(JoinResponse(m.join_token, ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        if m.sync_token is not None:
            out.append(SyncResponse(m.sync_token, ErrorCode.UNKNOWN_MEMBER_ID))
        if member_id == self.leader:
            self.leader = next(iter(self.members), NO_MEMBER)
        return out

    # ------------------------------------------------------------------ SyncGroup

    def maybe_sync(self, token: int, member_id: str, generation_id: int, protocol_type: str | None,
                   protocol_name: str | None, assignments: list[tuple[str, bytes]], now_ms: int,
                   group_instance_id: str | None = None) -> list[Decision]:
        """Triggered by a SyncGroup request (the leader's carries every member's assignment)."""
        if self.state is GroupState.DEAD:
            return [SyncResponse(token, ErrorCode.COORDINATOR_NOT_AVAILABLE)]
        error = self.validate_member(member_id, group_instance_id)
        if error != ErrorCode.NONE:
            return [SyncResponse(token, error)]
        m = self.members[member_id]
        if generation_id != self.generation_id:
            return [SyncResponse(token, ErrorCode.ILLEGAL_GENERATION)]
        if (protocol_type is not None and protocol_type != self.protocol_type) or \
                (protocol_name is not None and protocol_name != self.protocol_name):
            return [SyncResponse(token, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)]
        m.last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return [SyncResponse(token, ErrorCode.REBALANCE_IN_PROGRESS)]
        self.pending_sync.discard(member_id)
        if not self.pending_sync:
            self.sync_deadline_ms = -1
        if self.state is GroupState.STABLE:
            return [SyncResponse(token, ErrorCode.NONE, self.protocol_type, self.protocol_name, m.assignment)]
        if m.sync_token is not None:
            return [SyncResponse(token, ErrorCode.REBALANCE_IN_PROGRESS)]
        m.sync_token = token
        if member_id != self.leader:
            return []
        given = dict(assignments)
        for x in self.members.values():
            x.assignment = given.get(x.member_id, b"")
        out: list[Decision] = [StoreGroup(self.group_id, self.generation_id)]
        out += self._transition(GroupState.STABLE, now_ms, f"leader {member_id} sent the assignment of "
                                                           f"generation {self.generation_id}")
        return out + self._answer_parked_syncs()

    def _answer_parked_syncs(self) -> list[Decision]:
        out: list[Decision] = []
        for x in self.members.values():
            if x.sync_token is not None:
                out.append(SyncResponse(x.sync_token, ErrorCode.NONE, self.protocol_type, self.protocol_name,
                                        x.assignment))
                x.sync_token = None
        return out

    def maybe_store_failed(self, now_ms: int, reason: str) -> list[Decision]:
        """Triggered when the driver could not store the group's metadata: rebalance again (as Kafka,
        the assignment is reset and the members rejoin)."""
        for m in self.members.values():
            m.assignment = b""
        return self._maybe_prepare_rebalance(now_ms, f"storing the group failed: {reason}")

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup

    def heartbeat(self, member_id: str, generation_id: int, now_ms: int,
                  group_instance_id: str | None = None) -> ErrorCode:
        """Triggered by a Heartbeat request."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self.validate_member(member_id, group_instance_id)
        if error != ErrorCode.NONE:
            return error
        m = self.members[member_id]
        if self.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        m.last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def maybe_leave(self, members: list[tuple[str, str | None]], now_ms: int) -> tuple[list[ErrorCode], list[Decision]]:
        """Triggered by a LeaveGroup request naming (member id, group instance id) pairs: one error per
        member, and what the leaving triggers. An empty member id with a group instance id removes the
        static member holding it (an administrative removal, the admin client's `removeMembersFromConsumerGroup`)."""
        errors: list[ErrorCode] = []
        out: list[Decision] = []
        for mid, instance in members:
            if self.state is GroupState.DEAD:
                errors.append(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                continue
            if mid == NO_MEMBER:
                held = self.static_members.get(instance) if instance is not None else None
                if held is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                else:
                    errors.append(ErrorCode.NONE)
                    out += self._member_gone(held, now_ms, f"static member {instance} ({held}) removed by request")
                continue
            if mid in self.pending:
                del self.pending[mid]
                errors.append(ErrorCode.NONE)
                out += self._maybe_complete_join(now_ms)
                continue
            error = self.validate_member(mid, instance)
            errors.append(error)
            if error == ErrorCode.NONE:
                out += self._member_gone(mid, now_ms, f"member {mid} left the group")
        return errors, out

    def _member_gone(self, member_id: str, now_ms: int, reason: str) -> list[Decision]:
        out = self._remove(member_id, reason)
        # An empty barrier completes at once (the last member gone: a new, empty generation).
        return out + self._maybe_prepare_rebalance(now_ms, reason) + self._maybe_complete_join(now_ms)

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> list[Decision]:
        """Triggered by the driver's timer: expired sessions, pending ids, join and sync deadlines."""
        out: list[Decision] = []
        for mid, deadline in list(self.pending.items()):
            if now_ms >= deadline:
                del self.pending[mid]
        for m in list(self.members.values()):
            if m.join_token is None and m.sync_token is None and \
                    now_ms >= m.last_heartbeat_ms + m.session_timeout_ms:
                out += self._member_gone(m.member_id, now_ms, f"member {m.member_id} sent no heartbeat for its "
                                                              f"session timeout ({m.session_timeout_ms} ms)")
        if self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and \
                0 <= self.sync_deadline_ms <= now_ms:
            for mid in [mid for mid in self.members if mid in self.pending_sync]:
                out += self._remove(mid, f"member {mid} sent no SyncGroup within the rebalance timeout")
            out += self._maybe_prepare_rebalance(now_ms, "members did not sync in time")
        if self.state is GroupState.PREPARING_REBALANCE:
            out += self._maybe_complete_join(now_ms)
        return out

    # ------------------------------------------------------------------ offsets and admin

    def validate_commit(self, member_id: str, generation_id: int, group_instance_id: str | None = None) -> ErrorCode:
        """Kafka's doCommitOffsets checks: a simple (generation -1) commit only to an Empty group,
        else the committing member (and its group instance id) and its generation must be current."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and member_id == NO_MEMBER and self.state is GroupState.EMPTY:
            return ErrorCode.NONE
        error = self.validate_member(member_id, group_instance_id)
        if error != ErrorCode.NONE:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members subscribe to, read from their metadata for the chosen protocol
        (Kafka's computeSubscribedTopics); None when that cannot be known. Triggered when a
        generation starts and when a stored group is restored."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(decode_subscription(m.metadata(self.protocol_name)))
        except (ValueError, UnicodeDecodeError):
            return None
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        """Kafka's isSubscribedToTopic: unknown subscriptions count as all topics for a "consumer" group."""
        if self.subscribed_topics is None:
            return self.protocol_type == CONSUMER_PROTOCOL_TYPE
        return topic in self.subscribed_topics

    def maybe_delete_offsets(self, topics: list[tuple[str, list[int]]]) -> OffsetDeletion:
        """Triggered by OffsetDelete (KIP-496), as Kafka's validateOffsetDelete and deleteOffsets: a Dead
        group is GROUP_ID_NOT_FOUND; a group with members that is not a "consumer" group NON_EMPTY_GROUP;
        otherwise each partition of a topic the members subscribe to is GROUP_SUBSCRIBED_TO_TOPIC and
        every other one NONE, its committed offset (if any) to be tombstoned. An Empty group has no
        subscriptions, so all its offsets can go."""
        if self.state is GroupState.DEAD:
            return OffsetDeletion(ErrorCode.GROUP_ID_NOT_FOUND)
        if self.state is not GroupState.EMPTY and self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return OffsetDeletion(ErrorCode.NON_EMPTY_GROUP)
        results: list[tuple[str, tuple[tuple[int, ErrorCode], ...]]] = []
        tombstones: list[tuple[str, int]] = []
        for topic, partitions in topics:
            if self.is_subscribed_to(topic):
                results.append((topic, tuple((p, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC) for p in partitions)))
                continue
            results.append((topic, tuple((p, ErrorCode.NONE) for p in partitions)))
            tombstones += [(topic, p) for p in partitions if (topic, p) in self.offsets]
        return OffsetDeletion(ErrorCode.NONE, tuple(results), tuple(dict.fromkeys(tombstones)))

    def commit(self, offsets: dict[tuple[str, int], CommittedOffset], written_ms: int) -> None:
        """Triggered once committed offsets are stored (or replayed from the log)."""
        self.offsets.update(offsets)
        for tp in offsets:
            self.offset_written_ms[tp] = written_ms

    def expire(self, tps: list[tuple[str, int]]) -> None:
        """Triggered by offset expiration (minibroker.coordinator.retention), and by OffsetDelete once
        its tombstones are stored."""
        for tp in tps:
            self.offsets.pop(tp, None)
            self.offset_written_ms.pop(tp, None)

    def maybe_delete(self, now_ms: int) -> tuple[ErrorCode, list[Decision]]:
        """Triggered by DeleteGroups: only an Empty group is deleted (it becomes Dead)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if self.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP, []
        self.offsets.clear()
        self.offset_written_ms.clear()
        return ErrorCode.NONE, self._transition(GroupState.DEAD, now_ms, "deleted")

    def is_empty_and_unused(self) -> bool:
        return self.state is GroupState.EMPTY and not self.offsets and self.generation_id == 0
