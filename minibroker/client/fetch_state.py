"""The consumer's per-partition fetch state and its reactions to Fetch results.

Owns: each assigned partition's position (next offset to hand out), a
pending offset reset, the preferred read replica the leader named (KIP-392)
and until when to use it, the last high watermark seen, in-flight and
back-off marks. Pure: takes `now_ms`, returns `Reaction`s; the driver
(consumer.py) sends the requests and applies the reactions.

Rules (kafka-semantics.md FF3-FF5, Kafka's FetchCollector):
- the leader may answer with `preferred_read_replica = id`: fetch from that
  broker until `metadata.max.age.ms` passes or an error clears it;
- a preferred replica the cached metadata does not know (it was fenced when
  the metadata was fetched) triggers one metadata refresh, and until the
  metadata knows it the partition is fetched from the leader *without* the
  client's rack, so the leader serves records instead of naming the replica
  again (no redirect loop, issue 9; Kafka clears the replica and refreshes);
- OFFSET_OUT_OF_RANGE with a preferred replica set clears the replica and
  goes back to the leader *without* touching the position; without one it
  is the leader's answer and the position is reset (`auto.offset.reset`);
- NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, OFFSET_NOT_AVAILABLE,
  REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION:
  refresh metadata and clear the preferred replica;
- UNKNOWN_LEADER_EPOCH: retry after a back-off, nothing else;
- an answer for a position that is no longer the partition's (a seek or a
  reset while the Fetch was in flight) is stale: it is dropped whole, data
  and error alike, and the partition fetched again from its new position
  (Kafka's "Discarding stale fetch response").
Must not know sockets, record formats or the metadata cache's internals.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable, Iterable

from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode, KafkaError, error_name

EARLIEST = "earliest"
LATEST = "latest"
NONE = "none"

_REFRESH_AND_CLEAR = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
})


class PartitionState:
    """Invariants: `position` is None exactly while a reset is pending;
    `preferred_replica` is None or a broker id with `preferred_until_ms` set;
    `fetch_offset` is the position the Fetch in flight asked for (meaningful while `in_flight`)."""

    __slots__ = ("position", "reset", "preferred_replica", "preferred_until_ms", "high_watermark",
                 "log_start_offset", "last_fetched_from", "retry_at_ms", "in_flight", "preferred_unknown",
                 "fetch_offset")

    def __init__(self) -> None:
        self.position: int | None = None
        self.reset: str | None = None
        self.preferred_replica: int | None = None
        self.preferred_until_ms = 0
        self.high_watermark = -1
        self.log_start_offset = -1
        self.last_fetched_from: int | None = None
        self.retry_at_ms = 0
        self.in_flight = False
        self.fetch_offset: int | None = None
        # Invariant: True only while `preferred_replica` is set and the metadata did not know it.
        self.preferred_unknown = False


@dataclass(frozen=True)
class Reaction:
    refresh_metadata: bool = False
    error: KafkaError | None = None     # to raise from poll()
    note: str = ""                      # what happened, for logs and --verbose


class FetchState:
    def __init__(self, *, auto_offset_reset: str = LATEST, metadata_max_age_ms: int = 300_000,
                 retry_backoff_ms: int = 100) -> None:
        if auto_offset_reset not in (EARLIEST, LATEST, NONE):
            raise ValueError(f"auto.offset.reset: expected earliest, latest or none, got {auto_offset_reset!r}")
        self.auto_offset_reset = auto_offset_reset
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.parts: dict[TopicPartition, PartitionState] = {}

    # -- assignment and positions ----------------------------------------------

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions that stay keep their state."""
        new: dict[TopicPartition, PartitionState] = {}
        for tp in tps:
            st = self.parts.get(tp)
            if st is None:
                st = PartitionState()
                st.reset = self.auto_offset_reset
            new[tp] = st
        self.parts = new

    def seek(self, tp: TopicPartition, offset: int) -> None:
        st = self._state(tp)
        st.position, st.reset = offset, None

    def request_reset(self, tp: TopicPartition, strategy: str) -> None:
        st = self._state(tp)
        st.position, st.reset = None, strategy

    def position(self, tp: TopicPartition) -> int | None:
        return self._state(tp).position

    def needs_reset(self, now_ms: int) -> dict[TopicPartition, str]:
        """Partitions waiting for a ListOffsets lookup (strategy earliest/latest/none)."""
        return {tp: st.reset for tp, st in self.parts.items()
                if st.reset is not None and not st.in_flight and st.retry_at_ms <= now_ms}

    def on_reset(self, tp: TopicPartition, offset: int) -> None:
        """A ListOffsets lookup for a pending reset answered `offset`."""
        st = self.parts.get(tp)
        if st is not None:
            st.in_flight = False
            if st.reset is not None:
                st.position, st.reset = offset, None

    def on_reset_failed(self, tp: TopicPartition, now_ms: int) -> None:
        st = self.parts.get(tp)
        if st is not None:
            st.in_flight = False
            st.retry_at_ms = now_ms + self.retry_backoff_ms

    # -- choosing where to fetch ---------------------------------------------

    def fetchable(self, now_ms: int) -> list[TopicPartition]:
        return [tp for tp, st in self.parts.items()
                if st.position is not None and not st.in_flight and st.retry_at_ms <= now_ms]

    def fetch_node(self, tp: TopicPartition, now_ms: int, leader_id: int | None,
                   is_known: Callable[[int], bool]) -> int | None:
        """The preferred read replica while valid and known, else the leader (Kafka selectReadReplica)."""
        return self.route(tp, now_ms, leader_id, is_known)[0]

    def route(self, tp: TopicPartition, now_ms: int, leader_id: int | None,
              is_known: Callable[[int], bool]) -> tuple[int | None, bool, Reaction]:
        """Where to fetch `tp` now: (node, whether to send the client's rack, reaction).

        A preferred replica unknown to the metadata sends the fetch to the leader without
        the rack (so it serves records) and asks for one metadata refresh."""
        st = self._state(tp)
        pref = st.preferred_replica
        if pref is None:
            return leader_id, True, Reaction()
        if now_ms >= st.preferred_until_ms:
            st.preferred_replica, st.preferred_unknown = None, False
            return leader_id, True, Reaction()
        if is_known(pref):
            st.preferred_unknown = False
            return pref, True, Reaction()
        if st.preferred_unknown:
            return leader_id, False, Reaction()
        st.preferred_unknown = True
        return leader_id, False, Reaction(
            refresh_metadata=True,
            note=f"{tp}: preferred read replica {pref} is not in our metadata: refreshing it, reading "
                 f"from leader {leader_id} meanwhile")

    def on_sent(self, tp: TopicPartition) -> None:
        """A Fetch for `tp` from its current position left."""
        st = self._state(tp)
        st.in_flight, st.fetch_offset = True, st.position

    def drop_if_stale(self, tp: TopicPartition) -> bool:
        """An answer for `tp` arrived: True if the partition was unassigned, or its position moved
        (seek, reset) since the Fetch left, so the answer must be dropped; the partition becomes
        fetchable again from its position."""
        st = self.parts.get(tp)
        if st is None:
            return True
        if st.position is None or st.position != st.fetch_offset:
            st.in_flight = False
            return True
        return False

    # -- reacting to results --------------------------------------------------

    def on_data(self, tp: TopicPartition, node_id: int, *, next_offset: int | None, high_watermark: int,
                log_start_offset: int, preferred_read_replica: int, now_ms: int) -> Reaction:
        """A partition answered without error; `next_offset` is one past the last record handed out."""
        st = self.parts.get(tp)
        if st is None:
            return Reaction(note="no longer assigned")
        st.in_flight = False
        st.last_fetched_from = node_id
        if high_watermark >= 0:
            st.high_watermark = high_watermark
        if log_start_offset >= 0:
            st.log_start_offset = log_start_offset
        if next_offset is not None and st.position is not None and next_offset > st.position:
            st.position = next_offset
        if preferred_read_replica >= 0 and preferred_read_replica != node_id:
            if st.preferred_replica != preferred_read_replica:
                st.preferred_unknown = False
            st.preferred_replica = preferred_read_replica
            st.preferred_until_ms = now_ms + self.metadata_max_age_ms
            return Reaction(note=f"{tp}: leader {node_id} names preferred read replica {preferred_read_replica}")
        return Reaction()

    def on_error(self, tp: TopicPartition, node_id: int, code: int, now_ms: int, message: str = "") -> Reaction:
        """A partition answered with an error code (FF4/FF5)."""
        st = self.parts.get(tp)
        if st is None:
            return Reaction(note="no longer assigned")
        st.in_flight = False
        st.last_fetched_from = node_id
        name = error_name(code)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if st.preferred_replica is not None:
                cleared, st.preferred_replica, st.preferred_unknown = st.preferred_replica, None, False
                return Reaction(note=f"{tp}: OFFSET_OUT_OF_RANGE from preferred replica {cleared} at "
                                     f"offset {st.position}: back to the leader, position kept")
            if self.auto_offset_reset == NONE:
                return Reaction(error=KafkaError(code, f"{tp}: offset {st.position} out of range and "
                                                       f"auto.offset.reset=none", remote=True))
            old = st.position
            st.position, st.reset = None, self.auto_offset_reset
            return Reaction(note=f"{tp}: OFFSET_OUT_OF_RANGE at {old} from the leader: "
                                 f"resetting to {self.auto_offset_reset}")
        if code in _REFRESH_AND_CLEAR:
            st.preferred_replica, st.preferred_unknown = None, False
            st.retry_at_ms = now_ms + self.retry_backoff_ms
            return Reaction(refresh_metadata=True, note=f"{tp}: {name} from broker {node_id}: refreshing metadata")
        if code == ErrorCode.UNKNOWN_LEADER_EPOCH:
            st.retry_at_ms = now_ms + self.retry_backoff_ms
            return Reaction(note=f"{tp}: UNKNOWN_LEADER_EPOCH from broker {node_id}: retrying")
        if code in ErrorCode._value2member_map_ and ErrorCode(code).retriable and code != ErrorCode.CORRUPT_MESSAGE:
            st.retry_at_ms = now_ms + self.retry_backoff_ms
            return Reaction(refresh_metadata=ErrorCode(code).refresh_metadata,
                            note=f"{tp}: {name} from broker {node_id}: retrying")
        st.retry_at_ms = now_ms + self.retry_backoff_ms
        return Reaction(error=KafkaError(code, f"{tp}: fetch from broker {node_id} failed"
                                               f"{': ' + message if message else ''}", remote=True))

    def on_request_failed(self, tps: Iterable[TopicPartition], node_id: int, now_ms: int) -> Reaction:
        """The whole Fetch to `node_id` failed (connection lost, timed out): a broken
        preferred replica is dropped, and metadata refreshed (the leader may have moved)."""
        for tp in tps:
            st = self.parts.get(tp)
            if st is None:
                continue
            st.in_flight = False
            st.retry_at_ms = now_ms + self.retry_backoff_ms
            if st.preferred_replica == node_id:
                st.preferred_replica, st.preferred_unknown = None, False
        return Reaction(refresh_metadata=True, note=f"fetch from broker {node_id} failed: refreshing metadata")

    def _state(self, tp: TopicPartition) -> PartitionState:
        st = self.parts.get(tp)
        if st is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} is not assigned to this consumer")
        return st
