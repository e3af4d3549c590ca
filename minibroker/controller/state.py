"""The controller core: every cluster-metadata decision, as a pure state machine.

Owns: the metadata image (brokers, topics, partitions; see `Cluster` and
`TopicTable`), the next metadata-log offset, and the decisions of Kafka's
QuorumController / ReplicationControlManager / ClusterControlManager:
broker registration and epochs, heartbeats, fencing (C1/C2), controlled
shutdown, topic creation (C8, placement §16), elections (C3/C4/C7), epochs
(C5), AlterPartition validation (C6), ELR (C9), partition reassignment (C10)
and auto-rebalance.

Must not know: sockets, asyncio, files or the clock. Every event takes
`now_ms` and returns an `Outcome`: the records to append to the metadata log
(already applied to the image, with their offsets), the `Event`s to emit,
and the response body for the requester. The driver persists the records
before it answers. On restart the driver feeds the log back through
`replay`, which applies records exactly as the live path does, so the image
after a restart equals the image before it.

A broker's epoch is the offset of its registration record (as Kafka's); a
broker that registers again with a new incarnation gets a new, higher one.
`current_metadata_offset` in heartbeats is the offset of the last metadata
record the broker has applied (-1 if none): a fenced broker is unfenced once
it is >= its registration record's offset.
"""
from __future__ import annotations

import base64
import random
from dataclasses import dataclass, field, replace
from typing import Any
from collections.abc import Callable, Iterable, Mapping, Sequence

from minibroker.controller.cluster import BrokerState, Cluster
from minibroker.controller.election import Election, PartitionChange, build_partition_change
from minibroker.controller.placement import PlacementError, assign_replicas
from minibroker.controller.settings import ControllerSettings
from minibroker.controller.topics import TopicTable, topic_config_error, topic_name_error
from minibroker.errors import ErrorCode
from minibroker.events import Event
from minibroker.config import DEFAULTS
from minibroker.dynamic_config import LIST_CONFIGS, ResourceType, broker_config_error, topic_default
from minibroker.metadata import (CLUSTER_DEFAULT, NO_LEADER, RECOVERED, RECOVERING, BrokerConfigRecord, BrokerRecord,
                                 Endpoint, MetadataRecord, PartitionRecord, RemoveTopicRecord, TopicRecord)

PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1


@dataclass
class Outcome:
    """What one event decided. Invariant: `records` offsets are consecutive
    and already applied to the image."""
    records: list[tuple[int, MetadataRecord]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    response: dict[str, Any] = field(default_factory=dict)

    @property
    def last_offset(self) -> int:
        return self.records[-1][0] if self.records else -1


def _fmt(ids: Iterable[int]) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


class ControllerState:
    """Invariant: `next_offset` is one past the last record applied; the image
    equals the replay of every record below it."""

    def __init__(self, settings: ControllerSettings | None = None, *, rng: random.Random | None = None,
                 fixed_placement_start: int = -1) -> None:
        self.settings = settings or ControllerSettings()
        self.rng = rng or random.Random()
        # Tests pin Kafka's fixedStartIndex to get the §16 vectors; -1 = random.
        self.fixed_placement_start = fixed_placement_start
        self.cluster = Cluster()
        self.topics = TopicTable()
        # Invariant: dynamic broker configs by broker id (CLUSTER_DEFAULT: all); no empty maps.
        self.broker_configs: dict[int, dict[str, str]] = {}
        self.next_offset = 0
        # Offset of the record that last set each entity (for snapshots).
        self._entity_offsets: dict[Any, int] = {}
        self._out: list[tuple[int, MetadataRecord]] = []
        # Invariant: non-empty only between a `tick` that raised and the driver's `take_partial`.
        self._unpersisted: list[Outcome] = []
        self._events: list[Event] = []
        self._now = 0
        self.next_rebalance_ms: int | None = None
        self.next_unclean_check_ms: int | None = None

    # ------------------------------------------------------------------ log
    def replay(self, offset: int, rec: MetadataRecord, now_ms: int = 0) -> None:
        """Triggered by log replay at startup (and snapshot loading): apply one record."""
        self._apply(offset, rec, now_ms)

    def finish_replay(self, now_ms: int, next_offset: int | None = None) -> None:
        """Triggered once replay is done: every broker gets a fresh session (as a newly active
        Kafka controller does), and the log end is set (a snapshot's end offset may exceed the
        offsets of the records inside it)."""
        if next_offset is not None:
            self.next_offset = max(self.next_offset, next_offset)
        self.cluster.restart_sessions(now_ms)
        self._schedule_timers(now_ms)

    def _apply(self, offset: int, rec: MetadataRecord, now_ms: int) -> None:
        if isinstance(rec, BrokerRecord):
            self.cluster.apply(rec, now_ms)
            self._entity_offsets[("b", rec.broker_id)] = offset
        elif isinstance(rec, TopicRecord):
            self.topics.apply(rec)
            self._entity_offsets[("t", rec.topic)] = offset
        elif isinstance(rec, PartitionRecord):
            self.topics.apply(rec)
            self._entity_offsets[("p", rec.topic, rec.partition)] = offset
        elif isinstance(rec, RemoveTopicRecord):
            for p in self.topics.partitions.get(rec.topic, {}):
                self._entity_offsets.pop(("p", rec.topic, p), None)
            self._entity_offsets.pop(("t", rec.topic), None)
            self.topics.apply(rec)
        elif isinstance(rec, BrokerConfigRecord):
            if rec.configs:
                self.broker_configs[rec.broker_id] = dict(rec.configs)
            else:
                self.broker_configs.pop(rec.broker_id, None)
            self._entity_offsets[("c", rec.broker_id)] = offset
        else:  # pragma: no cover - from_wire only yields the four types
            raise ValueError(f"unknown metadata record {rec!r}")
        self.next_offset = max(self.next_offset, offset + 1)

    def _append(self, rec: MetadataRecord) -> int:
        off = self.next_offset
        self._apply(off, rec, self._now)
        self._out.append((off, rec))
        return off

    def _emit(self, kind: str, partition: str = "", before: Any = None, after: Any = None, reason: str = "",
              **extra: Any) -> None:
        self._events.append(Event(kind, self._now, partition, before, after, reason, extra))

    def _begin(self, now_ms: int) -> None:
        self._now = now_ms
        self._out = []
        self._events = []

    def _finish(self, response: dict[str, Any] | None = None) -> Outcome:
        out = Outcome(self._out, self._events, response if response is not None else {"error": 0})
        self._out, self._events = [], []
        return out

    def take_partial(self) -> Outcome:
        """Triggered when an event handler raised (a bug): the records it had already applied,
        so the driver can still persist them and the image never runs ahead of the log."""
        done, self._unpersisted = self._unpersisted, []
        last = self._finish({"error": int(ErrorCode.UNKNOWN_SERVER_ERROR)})
        records = [r for o in done for r in o.records] + last.records
        events = [e for o in done for e in o.events] + last.events
        return Outcome(records, events, last.response)

    def image(self) -> list[tuple[int, MetadataRecord]]:
        """The whole current image as records (a snapshot): brokers, then each topic and its partitions."""
        out: list[tuple[int, MetadataRecord]] = []
        for b in sorted(self.cluster.brokers):
            out.append((self._entity_offsets.get(("b", b), -1), self.cluster.brokers[b]))
        for b in sorted(self.broker_configs):
            out.append((self._entity_offsets.get(("c", b), -1), BrokerConfigRecord(b, dict(self.broker_configs[b]))))
        for t in sorted(self.topics.topics):
            out.append((self._entity_offsets.get(("t", t), -1), self.topics.topics[t]))
            for p in sorted(self.topics.partitions[t]):
                out.append((self._entity_offsets.get(("p", t, p), -1), self.topics.partitions[t][p]))
        return out

    # -------------------------------------------------------------- helpers
    def _topic_config(self, topic: str, key: str) -> str | None:
        """The topic's override, else the cluster-wide dynamic default (per-broker dynamic
        configs act on that broker's own leaders, not on the controller's decisions)."""
        t = self.topics.topics.get(topic)
        if t is not None and key in t.configs:
            return t.configs[key]
        return self.broker_configs.get(CLUSTER_DEFAULT, {}).get(key)

    def unclean_enabled(self, topic: str) -> bool:
        v = self._topic_config(topic, "unclean.leader.election.enable")
        return v.strip().lower() == "true" if v is not None else self.settings.unclean_leader_election_enable

    def effective_min_isr(self, topic: str, replication_factor: int) -> int:
        """min(min.insync.replicas, RF), as Kafka 3.7+."""
        v = self._topic_config(topic, "min.insync.replicas")
        mis = int(v) if v is not None else self.settings.min_insync_replicas
        return max(1, min(mis, replication_factor))

    def _has_leaderships(self, b: int) -> bool:
        return any(p.leader == b for p in self.topics.all_partitions())

    def _build(self, part: PartitionRecord, *, acceptable: Callable[[int], bool], election: Election,
               target_isr: Sequence[int] | None = None, target_recovery_state: int | None = None,
               unclean_shutdown: Sequence[int] = (), reason: str = "", target_replicas: Sequence[int] | None = None,
               target_adding: Sequence[int] | None = None,
               target_removing: Sequence[int] | None = None) -> PartitionChange | None:
        return build_partition_change(
            part, acceptable=acceptable, min_isr=self.effective_min_isr(part.topic, len(part.target_replicas)),
            elr_enabled=self.settings.elr_enabled, election=election, target_isr=target_isr,
            target_recovery_state=target_recovery_state, unclean_shutdown=unclean_shutdown, reason=reason,
            target_replicas=target_replicas, target_adding=target_adding, target_removing=target_removing)

    def _commit_change(self, change: PartitionChange, cause: str) -> PartitionRecord:
        """Append a partition change and emit its events (election/offline, ISR and ELR moves)."""
        before, after = change.before, change.after
        self._append(after)
        name = after.name
        if change.how == "reassignment":
            self._emit("leader_epoch_bump", name, before.leader_epoch, after.leader_epoch, after.reason,
                       leader=after.leader, partition_epoch=after.partition_epoch, cause=cause)
        elif change.leader_changed:
            if after.leader == NO_LEADER:
                self._emit("offline", name, before.leader, NO_LEADER, after.reason,
                           leader_epoch=after.leader_epoch, isr=list(after.isr), elr=list(after.elr), cause=cause)
            else:
                self._emit("election", name, before.leader, after.leader, after.reason,
                           leader_epoch=after.leader_epoch, partition_epoch=after.partition_epoch,
                           how=change.how, unclean=change.unclean, isr=list(after.isr), cause=cause)
        if after.isr != before.isr:
            removed = [r for r in before.isr if r not in after.isr]
            added = [r for r in after.isr if r not in before.isr]
            if removed:
                self._emit("isr_shrink", name, list(before.isr), list(after.isr), after.reason,
                           removed=removed, partition_epoch=after.partition_epoch, cause=cause)
            if added:
                self._emit("isr_expand", name, list(before.isr), list(after.isr), after.reason,
                           added=added, partition_epoch=after.partition_epoch, cause=cause)
        if (after.replicas, after.adding_replicas, after.removing_replicas) != (
                before.replicas, before.adding_replicas, before.removing_replicas):
            if after.reassigning:
                phase = "changed" if before.reassigning else "started"
            elif before.reassigning and after.replicas != before.target_replicas:
                phase = "cancelled"
            else:
                phase = "completed"             # its new replicas in the ISR, or nothing to wait for
            self._emit("reassignment", name, list(before.replicas), list(after.replicas), after.reason,
                       phase=phase, adding=list(after.adding_replicas), removing=list(after.removing_replicas),
                       partition_epoch=after.partition_epoch, cause=cause)
        if after.elr != before.elr or after.last_known_elr != before.last_known_elr:
            self._emit("elr_change", name, {"elr": list(before.elr), "last_known_elr": list(before.last_known_elr)},
                       {"elr": list(after.elr), "last_known_elr": list(after.last_known_elr)}, after.reason,
                       cause=cause)
        return after

    def _update_partitions(self, parts: Iterable[PartitionRecord], *, reason: str, cause: str,
                           remove: int = NO_LEADER, add: int = NO_LEADER,
                           unclean_shutdown: int = NO_LEADER) -> None:
        """Kafka's generateLeaderAndIsrUpdates: drop `remove`/`unclean_shutdown` from each ISR
        (and ELR for the latter) and re-elect where the leader is no longer valid."""
        gone = {remove, unclean_shutdown} - {NO_LEADER}

        def acceptable(r: int) -> bool:
            return r not in gone and (r == add or self.cluster.is_active(r))

        for part in list(parts):
            election = Election.UNCLEAN if self.unclean_enabled(part.topic) else Election.ONLINE
            change = self._build(part, acceptable=acceptable, election=election,
                                 target_isr=[r for r in part.isr if r not in gone],
                                 unclean_shutdown=[unclean_shutdown] if unclean_shutdown != NO_LEADER else (),
                                 reason=reason)
            if change is not None:
                self._commit_change(change, cause)

    def _set_broker(self, b: int, **changes: Any) -> None:
        cur = self.cluster.brokers[b]
        new = replace(cur, **changes)
        if new != cur:
            self._append(new)

    def _parts_with_in_isr(self, b: int) -> list[PartitionRecord]:
        return [p for p in self.topics.all_partitions() if b in p.isr]

    # ------------------------------------------------------ broker lifecycle
    def register_broker(self, now_ms: int, broker_id: int, incarnation_id: str, rack: str | None,
                        listeners: Sequence[Endpoint | dict[str, Any]], previous_broker_epoch: int = -1) -> Outcome:
        """Triggered by BrokerRegistration. A new incarnation gets a new broker epoch (the offset
        of its registration record) and starts fenced; the previous incarnation is cleaned up as
        a shutdown (clean when `previous_broker_epoch` equals its epoch, else unclean: with ELR
        on, an unclean one also leaves every ELR). The same incarnation registering again keeps
        its epoch."""
        self._begin(now_ms)
        if broker_id < 0:
            return self._finish({"error": int(ErrorCode.INVALID_REQUEST), "broker_epoch": -1,
                                 "message": f"broker id must be >= 0, got {broker_id}"})
        eps = tuple(e if isinstance(e, Endpoint) else Endpoint(e["name"], e["host"], int(e["port"]))
                    for e in listeners)
        if not eps:
            return self._finish({"error": int(ErrorCode.INVALID_REQUEST), "broker_epoch": -1,
                                 "message": "a broker must register at least one listener"})
        rack = rack or None
        existing = self.cluster.brokers.get(broker_id)
        session = self.cluster.sessions.get(broker_id)
        if existing is not None and session is not None and incarnation_id and \
                session.incarnation_id == incarnation_id:
            self._set_broker(broker_id, rack=rack, listeners=eps)
            session.last_contact_ms = now_ms
            return self._finish({"error": 0, "broker_epoch": existing.broker_epoch})

        clean = existing is not None and previous_broker_epoch == existing.broker_epoch
        if existing is not None:
            if self.settings.elr_enabled and not clean:
                reason = (f"broker {broker_id} re-registered after an unclean shutdown "
                          f"(previous epoch {previous_broker_epoch}, registered {existing.broker_epoch}): "
                          "removed from ISR and ELR")
                parts = [p for p in self.topics.all_partitions() if broker_id in p.isr or broker_id in p.elr]
                self._update_partitions(parts, reason=reason, cause="unclean_shutdown", unclean_shutdown=broker_id)
            else:
                how = "a clean" if clean else "an unclean"
                reason = (f"broker {broker_id} re-registered after {how} shutdown: "
                          "previous incarnation removed from ISRs")
                self._update_partitions(self._parts_with_in_isr(broker_id), reason=reason, cause="reregistration",
                                        remove=broker_id)
        epoch = self.next_offset
        rec = BrokerRecord(broker_id, epoch, rack, eps, fenced=True, in_controlled_shutdown=False)
        self._append(rec)
        sess = self.cluster.sessions[broker_id]
        sess.incarnation_id = incarnation_id
        sess.last_contact_ms = now_ms
        self._emit("broker_registered", "", None, epoch,
                   f"broker {broker_id} registered with epoch {epoch}"
                   + ("" if existing is None else f" (previous epoch {existing.broker_epoch}, "
                                                  f"{'clean' if clean else 'unclean'} shutdown)"),
                   broker_id=broker_id, broker_epoch=epoch, rack=rack,
                   previous_broker_epoch=existing.broker_epoch if existing is not None else -1,
                   clean_shutdown=clean)
        return self._finish({"error": 0, "broker_epoch": epoch})

    def heartbeat(self, now_ms: int, broker_id: int, broker_epoch: int, current_metadata_offset: int,
                  want_fence: bool = False, want_shut_down: bool = False) -> Outcome:
        """Triggered by BrokerHeartbeat: refresh the session and move the broker between
        fenced / unfenced / controlled shutdown / shut down (calculateNextBrokerState)."""
        self._begin(now_ms)
        stale = self.cluster.stale_broker_epoch(broker_id, broker_epoch)
        if stale is not None:
            return self._finish({"error": int(ErrorCode.STALE_BROKER_EPOCH), "message": stale,
                                 "is_caught_up": False, "is_fenced": True, "should_shut_down": False})
        session = self.cluster.sessions[broker_id]
        cur = self.cluster.state(broker_id)
        nxt = self.cluster.next_state(broker_id, want_fence=want_fence, want_shut_down=want_shut_down,
                                      metadata_offset=current_metadata_offset,
                                      has_leaderships=lambda: self._has_leaderships(broker_id))
        if nxt is not cur:
            if nxt is BrokerState.UNFENCED:
                self._unfence(broker_id, current_metadata_offset)
            elif nxt is BrokerState.CONTROLLED_SHUTDOWN:
                self._enter_controlled_shutdown(broker_id)
            elif nxt is BrokerState.FENCED:
                self._fence(broker_id, f"broker {broker_id} fenced: requested by the broker (want_fence)")
            else:
                why = ("controlled shutdown complete" if cur is BrokerState.CONTROLLED_SHUTDOWN
                       else "shutdown requested")
                self._fence(broker_id, f"broker {broker_id} shut down: {why}")
        session.last_contact_ms = now_ms
        session.metadata_offset = current_metadata_offset
        caught_up = current_metadata_offset >= self.cluster.registration_offset(broker_id)
        return self._finish({"error": 0, "is_caught_up": caught_up, "is_fenced": nxt.fenced,
                             "should_shut_down": nxt is BrokerState.SHUTDOWN_NOW})

    def _fence(self, b: int, reason: str) -> None:
        """Kafka's handleBrokerFenced: leave every ISR (re-electing where it led), then fence."""
        self._update_partitions(self._parts_with_in_isr(b), reason=reason, cause="fenced", remove=b)
        was = self.cluster.brokers[b]
        self._set_broker(b, fenced=True, in_controlled_shutdown=False)
        if not was.fenced:
            self._emit("fenced", "", "unfenced", "fenced", reason, broker_id=b, broker_epoch=was.broker_epoch)

    def _unfence(self, b: int, metadata_offset: int) -> None:
        """Kafka's handleBrokerUnfenced: unfence, then re-elect every leaderless partition."""
        reg = self.cluster.registration_offset(b)
        reason = f"broker {b} unfenced: caught up to metadata offset {metadata_offset} (registered at {reg})"
        self._set_broker(b, fenced=False, in_controlled_shutdown=False)
        self._emit("unfenced", "", "fenced", "unfenced", reason, broker_id=b, broker_epoch=reg)
        leaderless = [p for p in self.topics.all_partitions() if p.leader == NO_LEADER]
        self._update_partitions(leaderless, reason=f"broker {b} unfenced: electing leaderless partitions",
                                cause="unfenced", add=b)

    def _enter_controlled_shutdown(self, b: int) -> None:
        """Kafka's handleBrokerInControlledShutdown: mark it, leave every ISR, move leadership."""
        reason = f"broker {b} in controlled shutdown"
        self._set_broker(b, in_controlled_shutdown=True)
        self._update_partitions(self._parts_with_in_isr(b), reason=reason, cause="controlled_shutdown", remove=b)
        self.cluster.sessions[b].controlled_shutdown_offset = self.next_offset - 1
        self._emit("controlled_shutdown", "", "unfenced", "controlled_shutdown", reason, broker_id=b,
                   broker_epoch=self.cluster.brokers[b].broker_epoch)

    def maybe_fence_one_stale_broker(self, now_ms: int) -> Outcome | None:
        """Triggered by the liveness timer: fence the one unfenced broker silent longest past
        broker.session.timeout.ms (one per call, as Kafka); None if there is none."""
        stale = self.cluster.find_one_stale(now_ms, self.settings.session_timeout_ms)
        if stale is None:
            return None
        self._begin(now_ms)
        b, silent = stale
        self._fence(b, f"broker {b} fenced: no heartbeat for {silent} ms "
                       f"(broker.session.timeout.ms={self.settings.session_timeout_ms})")
        return self._finish()

    def on_liveness_gap(self, now_ms: int, gap_ms: int) -> Outcome:
        """Triggered when the driver's liveness timer ran `gap_ms` late (the controller
        process was frozen or starved). Heartbeats sent meanwhile could not be read, so the
        brokers' silence is the controller's, not theirs: as a newly active Kafka controller
        does, every session's last contact restarts now. Nothing is fenced for it."""
        self._begin(now_ms)
        for session in self.cluster.sessions.values():
            session.last_contact_ms = max(session.last_contact_ms, now_ms)
        self._emit("controller_resumed", "", None, None,
                   f"liveness check ran {gap_ms} ms late (controller paused or starved): "
                   f"broker sessions restart now instead of fencing brokers it could not hear")
        return self._finish()

    # ----------------------------------------------------------------- topics
    def create_topics(self, now_ms: int, topics: Sequence[dict[str, Any]], validate_only: bool = False) -> Outcome:
        """Triggered by CreateTopics (forwarded by a broker). Each topic succeeds or fails alone."""
        self._begin(now_ms)
        seen: dict[str, int] = {}
        for t in topics:
            seen[t["topic"]] = seen.get(t["topic"], 0) + 1
        results = []
        limit = self.settings.max_partitions_per_request
        requested = sum(_requested_partitions(t, self.settings.num_partitions) for t in topics)
        if requested > limit:
            msg = (f"Excessively large number of partitions per request: {requested} requested, the limit is "
                   f"{limit} (minibroker.max.partitions.per.request).")
            return self._finish({"topics": [self._topic_result(t["topic"], ErrorCode.POLICY_VIOLATION, msg)
                                            for t in topics]})
        load = self._replicas_per_broker()
        for t in topics:
            name = t["topic"]
            if seen[name] > 1:
                results.append(self._topic_result(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
                continue
            code, msg, plan = self._plan_topic(t)
            if code is ErrorCode.NONE:
                assert plan is not None
                code, msg = self._maybe_refuse_broker_load(load, plan)
            if code is not ErrorCode.NONE or validate_only:
                results.append(self._topic_result(name, code, msg))
                continue
            assert plan is not None
            results.append(self._create_topic(name, t.get("configs") or {}, plan))
        return self._finish({"topics": results})

    def _replicas_per_broker(self) -> dict[int, int]:
        load: dict[int, int] = {}
        for rec in self.topics.all_partitions():
            for b in rec.replicas:
                load[b] = load.get(b, 0) + 1
        return load

    def _maybe_refuse_broker_load(self, load: dict[int, int], plan: list[list[int]]) -> tuple[ErrorCode, str]:
        """POLICY_VIOLATION when the plan would put more replicas on a broker than
        minibroker.max.partitions.per.broker; otherwise the plan is counted in `load`."""
        limit = self.settings.max_partitions_per_broker
        added: dict[int, int] = {}
        for replicas in plan:
            for b in replicas:
                added[b] = added.get(b, 0) + 1
        for b in sorted(added):
            if load.get(b, 0) + added[b] > limit:
                return (ErrorCode.POLICY_VIOLATION, f"Broker {b} would host {load.get(b, 0) + added[b]} partition "
                        f"replicas, above the limit of {limit} (minibroker.max.partitions.per.broker).")
        for b, n in added.items():
            load[b] = load.get(b, 0) + n
        return ErrorCode.NONE, ""

    def delete_topics(self, now_ms: int, names: Sequence[str]) -> Outcome:
        """Triggered by DeleteTopics (forwarded by a broker): one RemoveTopicRecord per
        existing topic; brokers then stop their replicas and delete the files."""
        self._begin(now_ms)
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        results = []
        for name in names:
            if counts[name] > 1:
                results.append(self._topic_result(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
                continue
            topic = self.topics.topics.get(name)
            if topic is None:
                results.append(self._topic_result(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  "This server does not host this topic-partition."))
                continue
            partitions = len(self.topics.partitions.get(name, {}))
            self._append(RemoveTopicRecord(name))
            self._emit("topic_deleted", name, {"partitions": partitions}, None,
                       f"topic {name} deleted ({partitions} partition(s))", topic=name, topic_id=topic.topic_id)
            results.append(self._topic_result(name, ErrorCode.NONE, ""))
        return self._finish({"topics": results})

    @staticmethod
    def _topic_result(name: str, code: ErrorCode, message: str, **extra: Any) -> dict[str, Any]:
        return {"topic": name, "error": int(code), "message": message, **extra}

    def _plan_topic(self, t: dict[str, Any]) -> tuple[ErrorCode, str, list[list[int]] | None]:
        name: str = t["topic"]
        err = topic_name_error(name)
        if err is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, err, None
        if name in self.topics.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.", None
        other = self.topics.colliding_topic(name)
        if other is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}", None
        err = topic_config_error(t.get("configs") or {}, self.settings.max_message_bytes_limit)
        if err is not None:
            return ErrorCode.INVALID_CONFIG, err, None
        return self._plan_replicas(t.get("num_partitions", -1), t.get("replication_factor", -1), t.get("assignments"))

    def _plan_replicas(self, n: int, rf: int, assignments: list[list[int]] | None
                       ) -> tuple[ErrorCode, str, list[list[int]] | None]:
        """Replica lists for `n` new partitions: the manual `assignments` checked, or placed
        (rack-aware, active brokers first) with replication factor `rf` (-1: the defaults)."""
        if assignments:
            if n != -1:
                return (ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                        "numPartitions was not set to -1.", None)
            if rf != -1:
                return (ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                        "replicationFactor was not set to -1.", None)
            size = None
            for i, replicas in enumerate(assignments):
                if not replicas:
                    return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            "The manual partition assignment includes an empty replica list.", None)
                for b in replicas:
                    if not self.cluster.is_registered(b):
                        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes "
                                f"broker {b}, but no such broker is registered.", None)
                if len(set(replicas)) != len(replicas):
                    return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes "
                            "a broker more than once.", None)
                if size is not None and len(replicas) != size:
                    return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes a "
                            f"partition with {len(replicas)} replica(s), but this is not consistent with previous "
                            f"partitions, which have {size} replica(s).", None)
                size = len(replicas)
                if not any(self.cluster.is_active(b) for b in replicas):
                    return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"All brokers specified in the manual partition "
                            f"assignment for partition {i} are fenced or in controlled shutdown.", None)
            return ErrorCode.NONE, "", [list(r) for r in assignments]
        n = self.settings.num_partitions if n == -1 else n
        rf = self.settings.default_replication_factor if rf == -1 else rf
        if n <= 0:
            return ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.", None
        if rf <= 0:
            return ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.", None
        registered = len(self.cluster.brokers)
        if rf > registered:
            return (ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): The "
                    f"target replication factor of {rf} cannot be reached because only {registered} broker(s) "
                    "are registered.", None)
        active = {b: r.rack for b, r in self.cluster.brokers.items() if self.cluster.is_active(b)}
        if not active:
            return (ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): All "
                    "brokers are currently fenced or in controlled shutdown.", None)
        # Prefer active brokers (as the KRaft placer does); fall back to every registered one.
        pool = active if len(active) >= rf else {b: r.rack for b, r in self.cluster.brokers.items()}
        try:
            plan = assign_replicas(pool, n, rf, fixed_start_index=self.fixed_placement_start, rng=self.rng)
        except PlacementError as exc:
            return ErrorCode[exc.code_name], str(exc), None
        for replicas in plan:
            if not any(b in active for b in replicas):
                return (ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): "
                        "All brokers are currently fenced or in controlled shutdown.", None)
        return ErrorCode.NONE, "", plan

    def _create_topic(self, name: str, configs: dict[str, str], plan: list[list[int]]) -> dict[str, Any]:
        topic_id = base64.urlsafe_b64encode(self.rng.getrandbits(128).to_bytes(16, "big")).rstrip(b"=").decode()
        self._append(TopicRecord(name, topic_id, len(plan), dict(configs)))
        for p, replicas in enumerate(plan):
            isr = tuple(b for b in replicas if self.cluster.is_active(b))
            rec = PartitionRecord(name, p, tuple(replicas), isr, isr[0], 0, 0, reason="created")
            self._append(rec)
        self._emit("topic_created", name, None, {"partitions": len(plan), "replication_factor": len(plan[0])},
                   f"topic {name} created with {len(plan)} partition(s), replication factor {len(plan[0])}",
                   topic=name, topic_id=topic_id, assignments=plan, configs=dict(configs))
        return self._topic_result(name, ErrorCode.NONE, "", topic_id=topic_id, num_partitions=len(plan),
                                  replication_factor=len(plan[0]))

    # -------------------------------------------------------------- elections
    def elect_leaders(self, now_ms: int, election_type: int, topics: Sequence[dict[str, Any]] | None) -> Outcome:
        """Triggered by ElectLeaders (0 preferred, 1 unclean). With `topics` None every partition is
        tried and those answering ELECTION_NOT_NEEDED are left out, as Kafka."""
        self._begin(now_ms)
        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            return self._finish({"error": int(ErrorCode.INVALID_REQUEST), "results": [],
                                 "message": f"Unknown election type {election_type}"})
        results = []
        if topics is None:
            for name in sorted(self.topics.topics):
                parts = []
                for p in sorted(self.topics.partitions[name]):
                    code, msg = self._elect_one(name, p, election_type, "requested")
                    if code is not ErrorCode.ELECTION_NOT_NEEDED:
                        parts.append({"partition": p, "error": int(code), "message": msg})
                results.append({"topic": name, "partitions": parts})
        else:
            for t in topics:
                parts = []
                for p in t["partitions"]:
                    code, msg = self._elect_one(t["topic"], p, election_type, "requested")
                    parts.append({"partition": p, "error": int(code), "message": msg})
                results.append({"topic": t["topic"], "partitions": parts})
        return self._finish({"error": 0, "results": results})

    def _elect_one(self, topic: str, p: int, election_type: int, why: str) -> tuple[ErrorCode, str]:
        part = self.topics.get(topic, p)
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{p}"
        if election_type == PREFERRED_ELECTION and part.replicas and part.leader == part.replicas[0]:
            return ErrorCode.ELECTION_NOT_NEEDED, f"{part.name} is already led by its preferred replica"
        if election_type == UNCLEAN_ELECTION and part.leader != NO_LEADER:
            return ErrorCode.ELECTION_NOT_NEEDED, f"{part.name} already has leader {part.leader}"
        election = Election.PREFERRED if election_type == PREFERRED_ELECTION else Election.UNCLEAN
        reason = f"{election.value} election ({why})"
        change = self._build(part, acceptable=self.cluster.is_active, election=election, reason=reason)
        if change is None:
            if election is Election.PREFERRED:
                return (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                        f"preferred replica {part.replicas[0]} of {part.name} is not in the ISR or not live")
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"no live replica of {part.name} can lead"
        self._commit_change(change, f"{election.value}_election")
        return ErrorCode.NONE, ""

    # ----------------------------------------------------------- reassignment
    def alter_partition_reassignments(self, now_ms: int, topics: Sequence[dict[str, Any]],
                                      allow_replication_factor_change: bool = True) -> Outcome:
        """Triggered by AlterPartitionReassignments (KIP-455): each partition gets its target replicas
        (`replicas` None cancels its reassignment), as Kafka's ReplicationControlManager; a target of
        another size is refused when the request does not allow it (KIP-860)."""
        self._begin(now_ms)
        results = []
        for t in topics:
            parts = []
            for pd in t["partitions"]:
                code, msg = self._reassign_one(t["topic"], pd["partition"], pd["replicas"],
                                               allow_replication_factor_change)
                parts.append({"partition": pd["partition"], "error": int(code), "message": msg})
            results.append({"topic": t["topic"], "partitions": parts})
        return self._finish({"error": 0, "message": "", "topics": results,
                             "metadata_offset": self.next_offset - 1 if self._out else -1})

    def _reassign_one(self, topic: str, p: int, target: Sequence[int] | None,
                      allow_rf_change: bool = True) -> tuple[ErrorCode, str]:
        part = self.topics.get(topic, p)
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{p}."
        if target is None:
            if not part.reassigning:
                return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"No ongoing reassignment for {part.name}."
            replicas, isr, unclean = self._revert(part)
            return self._commit_reassignment(part, replicas, isr, "cancelled", unclean=unclean)
        if not target:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "The manual partition assignment includes an empty replica list.")
        for b in target:
            if not self.cluster.is_registered(b):
                return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes broker {b}, but no such broker is registered.")
        if len(set(target)) != len(target):
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "The manual partition assignment includes a broker more than once.")
        current, isr, unclean = self._revert(part) if part.reassigning else (list(part.replicas), list(part.isr),
                                                                             False)
        if not allow_rf_change and len(target) != len(current):
            return (ErrorCode.INVALID_REPLICATION_FACTOR, f"The replication factor is changed from {len(current)} "
                    f"to {len(target)} but allowReplicationFactorChange is false")
        removing = [r for r in current if r not in target]
        adding = [r for r in target if r not in current]
        return self._commit_reassignment(part, [*target, *removing], isr, f"to {_fmt(target)}", adding, removing,
                                         unclean=unclean)

    @staticmethod
    def _revert(part: PartitionRecord) -> tuple[list[int], list[int], bool]:
        """The replicas and ISR the partition had before its reassignment (Kafka's PartitionReassignmentRevert):
        the adding replicas leave both. An ISR left empty becomes the replicas, an unclean election."""
        replicas = [r for r in part.replicas if r not in part.adding_replicas]
        isr = [r for r in part.isr if r in replicas]
        return replicas, isr or list(replicas), not isr

    def _commit_reassignment(self, part: PartitionRecord, replicas: list[int], isr: list[int], what: str,
                             adding: Sequence[int] = (), removing: Sequence[int] = (), *,
                             unclean: bool = False) -> tuple[ErrorCode, str]:
        reason = (f"reassignment of {part.name} {what}: replicas {_fmt(part.replicas)} -> {_fmt(replicas)}"
                  + (f", adding {_fmt(adding)}" if adding else "")
                  + (f", removing {_fmt(removing)}" if removing else ""))
        election = Election.UNCLEAN if unclean or self.unclean_enabled(part.topic) else Election.ONLINE
        change = self._build(part, acceptable=self.cluster.is_active, election=election, target_isr=isr,
                             target_replicas=replicas, target_adding=adding, target_removing=removing, reason=reason)
        if change is not None:
            self._commit_change(change, "reassignment")
        return ErrorCode.NONE, ""

    def list_partition_reassignments(self, topics: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
        """ListPartitionReassignments: the partitions being reassigned (all, or among `topics`)."""
        if topics is None:
            wanted = [p for p in self.topics.all_partitions() if p.reassigning]
        else:
            wanted = [p for t in topics for i in t["partitions"]
                      if (p := self.topics.get(t["topic"], i)) is not None and p.reassigning]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for p in sorted(wanted, key=lambda x: x.key):
            by_topic.setdefault(p.topic, []).append({"partition": p.partition, "replicas": list(p.replicas),
                                                     "adding_replicas": list(p.adding_replicas),
                                                     "removing_replicas": list(p.removing_replicas)})
        return {"error": 0, "message": "", "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}

    def maybe_balance_partition_leaders(self, now_ms: int) -> Outcome:
        """Triggered every leader.imbalance.check.interval.seconds when auto.leader.rebalance.enable:
        a preferred election for every partition not led by replicas[0]."""
        self._begin(now_ms)
        for part in list(self.topics.all_partitions()):
            if part.replicas and part.leader != part.replicas[0]:
                change = self._build(part, acceptable=self.cluster.is_active, election=Election.PREFERRED,
                                     reason="preferred election (auto leader rebalance)")
                if change is not None and change.leader_changed:
                    self._commit_change(change, "auto_rebalance")
        return self._finish()

    def maybe_elect_unclean_leaders(self, now_ms: int) -> Outcome:
        """Triggered every unclean.leader.election.interval.ms: an unclean election for every
        leaderless partition whose topic allows it (C7)."""
        self._begin(now_ms)
        for part in list(self.topics.all_partitions()):
            if part.leader == NO_LEADER and self.unclean_enabled(part.topic):
                self._elect_one(part.topic, part.partition, UNCLEAN_ELECTION, "periodic check of leaderless partitions")
        return self._finish()

    def _schedule_timers(self, now_ms: int) -> None:
        s = self.settings
        self.next_rebalance_ms = (now_ms + s.leader_imbalance_check_interval_ms if s.auto_leader_rebalance_enable
                                  else None)
        self.next_unclean_check_ms = now_ms + s.unclean_leader_election_interval_ms

    def due_periodic_tasks(self, now_ms: int) -> list[Callable[[int], Outcome]]:
        """Triggered by the driver's timer: the periodic decisions due now (auto-rebalance every
        leader.imbalance.check.interval.seconds when enabled; the unclean check every
        unclean.leader.election.interval.ms), each rescheduled from now."""
        if self.next_unclean_check_ms is None:
            self._schedule_timers(now_ms)
        due: list[Callable[[int], Outcome]] = []
        if self.next_rebalance_ms is not None and now_ms >= self.next_rebalance_ms:
            self.next_rebalance_ms = now_ms + self.settings.leader_imbalance_check_interval_ms
            due.append(self.maybe_balance_partition_leaders)
        if self.next_unclean_check_ms is not None and now_ms >= self.next_unclean_check_ms:
            self.next_unclean_check_ms = now_ms + self.settings.unclean_leader_election_interval_ms
            due.append(self.maybe_elect_unclean_leaders)
        return due

    def tick(self, now_ms: int) -> list[Outcome]:
        """One timer tick as the driver runs it: fence stale brokers (one per outcome), then the
        due periodic tasks. Outcomes without records or events are left out."""
        outs: list[Outcome] = []
        try:
            while (o := self.maybe_fence_one_stale_broker(now_ms)) is not None:
                outs.append(o)
            for task in self.due_periodic_tasks(now_ms):
                outs.append(task(now_ms))
        except Exception:
            # The outcomes finished before the failure are applied too: `take_partial` hands them over.
            self._unpersisted = outs
            raise
        return [o for o in outs if o.records or o.events]

    # --------------------------------------------------------- AlterPartition
    def alter_partition(self, now_ms: int, broker_id: int, broker_epoch: int,
                        topics: Sequence[dict[str, Any]]) -> Outcome:
        """Triggered by AlterPartition from a partition leader: validate in Kafka's order (C6),
        then adopt the new ISR / recovery state (re-electing if the leader is no longer valid)."""
        self._begin(now_ms)
        stale = self.cluster.stale_broker_epoch(broker_id, broker_epoch)
        if stale is not None:
            return self._finish({"error": int(ErrorCode.STALE_BROKER_EPOCH), "message": stale, "topics": []})
        out_topics = []
        for t in topics:
            out_parts = []
            for pd in t["partitions"]:
                out_parts.append(self._alter_one(broker_id, t["topic"], pd))
            out_topics.append({"topic": t["topic"], "partitions": out_parts})
        return self._finish({"error": 0, "topics": out_topics})

    @staticmethod
    def _partition_result(p: int, code: ErrorCode, part: PartitionRecord | None = None,
                          message: str = "") -> dict[str, Any]:
        if part is None:
            return {"partition": p, "error": int(code), "message": message, "leader_id": -1, "leader_epoch": -1,
                    "isr": [], "partition_epoch": -1, "leader_recovery_state": RECOVERED}
        return {"partition": p, "error": int(code), "message": message, "leader_id": part.leader,
                "leader_epoch": part.leader_epoch, "isr": list(part.isr), "partition_epoch": part.partition_epoch,
                "leader_recovery_state": part.leader_recovery_state}

    def _validate_alter(self, broker_id: int, topic: str, pd: dict[str, Any]) -> tuple[ErrorCode, str]:
        p = pd["partition"]
        if topic not in self.topics.topics:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic}"
        part = self.topics.get(topic, p)
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{p}"
        le, pe = pd["leader_epoch"], pd["partition_epoch"]
        if le > part.leader_epoch:
            return ErrorCode.NOT_CONTROLLER, f"leader epoch {le} is newer than the controller's {part.leader_epoch}"
        if pe > part.partition_epoch:
            return (ErrorCode.NOT_CONTROLLER,
                    f"partition epoch {pe} is newer than the controller's {part.partition_epoch}")
        if le < part.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {le} is older than the current {part.leader_epoch}"
        if broker_id != part.leader:
            return (ErrorCode.INVALID_REQUEST,
                    f"broker {broker_id} is not the leader of {part.name} (leader {part.leader})")
        if pe < part.partition_epoch:
            return (ErrorCode.INVALID_UPDATE_VERSION,
                    f"partition epoch {pe} is older than the current {part.partition_epoch}")
        new_isr = [e["broker_id"] for e in pd["new_isr_with_epochs"]]
        if len(set(new_isr)) != len(new_isr) or any(r not in part.replicas for r in new_isr):
            return (ErrorCode.INVALID_REQUEST,
                    f"ISR {_fmt(new_isr)} is not a duplicate-free subset of replicas {_fmt(part.replicas)}")
        if part.leader not in new_isr:
            return ErrorCode.INVALID_REQUEST, f"ISR {_fmt(new_isr)} does not include the leader {part.leader}"
        lrs = pd.get("leader_recovery_state", RECOVERED)
        if lrs not in (RECOVERED, RECOVERING):
            return ErrorCode.INVALID_REQUEST, f"unknown leader recovery state {lrs}"
        if lrs == RECOVERING and len(new_isr) > 1:
            return ErrorCode.INVALID_REQUEST, "a RECOVERING leader cannot have more than one ISR member"
        if part.leader_recovery_state == RECOVERED and lrs == RECOVERING:
            return ErrorCode.INVALID_REQUEST, "leader recovery state cannot go from RECOVERED to RECOVERING"
        bad = []
        for e in pd["new_isr_with_epochs"]:
            b, ep = e["broker_id"], e["broker_epoch"]
            reg = self.cluster.brokers.get(b)
            if reg is None:
                bad.append(f"{b} (not registered)")
            elif reg.in_controlled_shutdown:
                bad.append(f"{b} (shutting down)")
            elif reg.fenced:
                bad.append(f"{b} (fenced)")
            elif ep != -1 and ep != reg.broker_epoch:
                bad.append(f"{b} (broker epoch mismatch: requested={ep} VS expected={reg.broker_epoch})")
        if bad:
            return ErrorCode.INELIGIBLE_REPLICA, "ineligible replicas in the new ISR: " + ", ".join(bad)
        return ErrorCode.NONE, ""

    def _alter_one(self, broker_id: int, topic: str, pd: dict[str, Any]) -> dict[str, Any]:
        p = pd["partition"]
        code, msg = self._validate_alter(broker_id, topic, pd)
        part = self.topics.get(topic, p)
        if code is not ErrorCode.NONE:
            return self._partition_result(p, code, None, msg)
        assert part is not None
        new_isr = [e["broker_id"] for e in pd["new_isr_with_epochs"]]
        removed = [r for r in part.isr if r not in new_isr]
        added = [r for r in new_isr if r not in part.isr]
        what = " and ".join(w for w, ids in (("shrink", removed), ("expand", added)) if ids) or "update"
        lrs = pd.get("leader_recovery_state", RECOVERED)
        reason = f"AlterPartition from leader {broker_id}: {what} ISR {_fmt(part.isr)} -> {_fmt(new_isr)}"
        if lrs != part.leader_recovery_state:
            reason += f", leader recovery state {'RECOVERED' if lrs == RECOVERED else 'RECOVERING'}"
        election = Election.UNCLEAN if self.unclean_enabled(topic) else Election.ONLINE
        change = self._build(part, acceptable=self.cluster.is_active, election=election, target_isr=new_isr,
                             target_recovery_state=lrs, reason=reason)
        if change is not None:
            part = self._commit_change(change, "alter_partition")
            if part.leader != broker_id:
                return self._partition_result(p, ErrorCode.NEW_LEADER_ELECTED, None,
                                              f"leadership of {part.name} moved to {part.leader}")
        return self._partition_result(p, ErrorCode.NONE, part)

    # ------------------------------------------------------------- describe
    def describe_cluster(self) -> list[dict[str, Any]]:
        """Registered brokers for DescribeCluster (host/port of the first listener, plus all)."""
        out = []
        for b in sorted(self.cluster.brokers):
            r = self.cluster.brokers[b]
            first = r.listeners[0]
            out.append({"node_id": b, "host": first.host, "port": first.port, "rack": r.rack, "fenced": r.fenced,
                        "in_controlled_shutdown": r.in_controlled_shutdown, "broker_epoch": r.broker_epoch,
                        "listeners": [{"name": e.name, "host": e.host, "port": e.port} for e in r.listeners]})
        return out

    # -------------------------------------------------------------- configs
    def incremental_alter_configs(self, now_ms: int, resources: Sequence[dict[str, Any]],
                                  validate_only: bool = False) -> Outcome:
        """Triggered by IncrementalAlterConfigs (forwarded by a broker): SET/DELETE on a topic's
        overrides (a new TopicRecord) or on a broker's or the cluster default's dynamic configs
        (a BrokerConfigRecord). Each resource succeeds or fails alone."""
        self._begin(now_ms)
        results = []
        for r in resources:
            code, msg = self._alter_resource(r, validate_only)
            results.append({"resource_type": r["resource_type"], "resource_name": r["resource_name"],
                            "error": int(code), "message": msg})
        return self._finish({"results": results, "metadata_offset": self.next_offset - 1 if self._out else -1})

    def _alter_resource(self, r: dict[str, Any], validate_only: bool) -> tuple[ErrorCode, str]:
        rtype, name = r["resource_type"], r["resource_name"]
        ops = r["configs"]
        if any(op["op"] not in _OPS for op in ops):
            return ErrorCode.INVALID_REQUEST, "the operations are SET (0), DELETE (1), APPEND (2) and SUBTRACT (3)"
        valueless = next((op for op in ops if op["op"] != 1 and op.get("value") is None), None)
        if valueless is not None:
            return ErrorCode.INVALID_REQUEST, f"{_OPS[valueless['op']]} needs a value"
        listless = next((op for op in ops if op["op"] in (2, 3) and op["name"] not in LIST_CONFIGS), None)
        if listless is not None:
            return (ErrorCode.INVALID_CONFIG,
                    f"Can't {_OPS[listless['op']]} to key {listless['name']} because its type is not LIST.")
        if len({op["name"] for op in ops}) != len(ops):
            return ErrorCode.INVALID_REQUEST, "a config is named more than once"
        if rtype == ResourceType.TOPIC:
            t = self.topics.topics.get(name)
            if t is None:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
            new = _applied(t.configs, ops, topic_default)
            err = topic_config_error({k: v for k, v in new.items() if k not in t.configs or t.configs[k] != v})
            if err is not None:
                return ErrorCode.INVALID_CONFIG, err
            if not validate_only and new != t.configs:
                self._append(replace(t, configs=new))
                self._emit("config_changed", name, dict(t.configs), new, f"topic {name} configs altered",
                           resource="topic", name=name)
            return ErrorCode.NONE, ""
        if rtype == ResourceType.BROKER:
            try:
                bid = CLUSTER_DEFAULT if name == "" else int(name)
            except ValueError:
                return ErrorCode.INVALID_REQUEST, f"broker resource name {name!r}: expected a broker id or \"\""
            if bid != CLUSTER_DEFAULT and bid < 0:
                return ErrorCode.INVALID_REQUEST, f"broker resource name {name!r}: expected a broker id or \"\""
            old = self.broker_configs.get(bid, {})
            new = _applied(old, ops, lambda k: DEFAULTS.get(k, ""))
            err = broker_config_error({op["name"]: new.get(op["name"]) for op in ops}, topic_config_error)
            if err is not None:
                return ErrorCode.INVALID_CONFIG if "Invalid value" in err else ErrorCode.INVALID_REQUEST, err
            if not validate_only and new != old:
                self._append(BrokerConfigRecord(bid, new))
                who = "the cluster default" if bid == CLUSTER_DEFAULT else f"broker {bid}"
                self._emit("config_changed", "", dict(old), new, f"dynamic configs of {who} altered",
                           resource="broker", name=name)
            return ErrorCode.NONE, ""
        return ErrorCode.INVALID_REQUEST, f"unsupported resource type {rtype}"

    # -------------------------------------------------------------- partitions
    def create_partitions(self, now_ms: int, topics: Sequence[dict[str, Any]], validate_only: bool = False) -> Outcome:
        """Triggered by CreatePartitions (forwarded by a broker): grow a topic to `count`
        partitions, placed as new topics are (or as given), each led by its first live replica."""
        self._begin(now_ms)
        results = []
        for t in topics:
            code, msg, plan = self._plan_partitions(t)
            if code is ErrorCode.NONE and plan and not validate_only:
                topic = self.topics.topics[t["topic"]]
                first = topic.num_partitions
                self._append(replace(topic, num_partitions=first + len(plan)))
                for i, replicas in enumerate(plan):
                    isr = tuple(b for b in replicas if self.cluster.is_active(b))
                    self._append(PartitionRecord(topic.topic, first + i, tuple(replicas), isr, isr[0], 0, 0,
                                                 reason="created by CreatePartitions"))
                self._emit("partitions_created", topic.topic, first, first + len(plan),
                           f"topic {topic.topic}: {first} -> {first + len(plan)} partitions",
                           topic=topic.topic, assignments=plan)
            results.append({"topic": t["topic"], "error": int(code), "message": msg})
        return self._finish({"results": results, "metadata_offset": self.next_offset - 1 if self._out else -1})

    def _plan_partitions(self, t: dict[str, Any]) -> tuple[ErrorCode, str, list[list[int]] | None]:
        topic = self.topics.topics.get(t["topic"])
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{t['topic']}' does not exist.", None
        have, want = topic.num_partitions, t["count"]
        if want < have:
            return (ErrorCode.INVALID_PARTITIONS, f"The topic {topic.topic} currently has {have} partition(s); "
                    f"{want} would not be an increase.", None)
        if want == have:
            return ErrorCode.INVALID_PARTITIONS, f"Topic already has {have} partition(s).", None
        current = self.topics.partitions.get(topic.topic, {})
        rf = len(current[0].replicas) if 0 in current else 1
        assignments = t.get("assignments")
        if assignments is not None:
            if len(assignments) != want - have:
                return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {want - have} additional "
                        f"partition(s), but only {len(assignments)} assignment(s) were specified.", None)
            code, msg, plan = self._plan_replicas(-1, -1, assignments)
            if code is not ErrorCode.NONE:
                return code, msg, None
            if any(len(a) != rf for a in assignments):
                return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment has replica "
                        f"lists of a length other than the topic's replication factor {rf}.", None)
            return ErrorCode.NONE, "", [list(a) for a in assignments]
        return self._plan_replicas(want - have, rf, None)


_OPS = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}


def _applied(configs: Mapping[str, str], ops: Sequence[dict[str, Any]],
             default: Callable[[str], str]) -> dict[str, str]:
    """`configs` after IncrementalAlterConfigs SET (0) / DELETE (1) / APPEND (2) / SUBTRACT (3) operations.
    APPEND adds each of its comma-separated values the list does not hold yet, SUBTRACT takes each out
    once, both starting from the override or, without one, `default(name)` (Kafka's
    ConfigurationControlManager, LIST configs only: the caller checked)."""
    out = dict(configs)
    for op in ops:
        name, kind = op["name"], op["op"]
        if kind == 0:
            out[name] = str(op["value"]).strip()
        elif kind == 1:
            out.pop(name, None)
        else:
            parts = [p for p in out.get(name, default(name)).split(",") if p]
            for v in str(op["value"]).split(","):
                if kind == 2 and v not in parts:
                    parts.append(v)
                elif kind == 3 and v in parts:
                    parts.remove(v)
            out[name] = ",".join(parts)
    return out


def describe_quorum(state: ControllerState, node_id: int, leader_epoch: int, now_ms: int) -> dict[str, Any]:
    """DescribeQuorum for a single controller: it is the only voter (and leader, its log end the
    high watermark); every registered broker is an observer at the offset its last heartbeat
    reported. `now_ms` is wall-clock-anchored, as Kafka's timestamps."""
    hw = state.next_offset
    observers = []
    for b in sorted(state.cluster.brokers):
        s = state.cluster.sessions.get(b)
        leo = s.metadata_offset + 1 if s is not None and s.metadata_offset >= 0 else -1
        last = s.last_contact_ms if s is not None else -1
        observers.append({"replica_id": b, "log_end_offset": leo, "last_fetch_timestamp": last,
                          "last_caught_up_timestamp": last if leo >= hw else -1})
    return {"error": 0, "leader_id": node_id, "leader_epoch": leader_epoch, "high_watermark": hw,
            "voters": [{"replica_id": node_id, "log_end_offset": hw, "last_fetch_timestamp": now_ms,
                        "last_caught_up_timestamp": now_ms}],
            "observers": observers}

def _requested_partitions(t: dict[str, Any], default: int) -> int:
    """How many partitions a CreateTopics entry asks for (before any validation)."""
    assignments = t.get("assignments")
    if assignments:
        return len(assignments)
    n = t.get("num_partitions", -1)
    return default if n == -1 else max(n, 0)
