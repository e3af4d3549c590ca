"""Per-partition idempotent-producer state: Kafka's ProducerStateManager and
ProducerAppendInfo (KIP-98, KIP-360), without transactions.

Owns, for one partition: per producer id, its epoch and the metadata of its
last `BATCHES_TO_RETAIN` (5) batches (first/last sequence, base/last
offset, max timestamp as stored); the rules a leader applies to a client batch before appending it
(duplicate, sequence gap, fenced epoch); the updates every replica applies
after a batch is in its log (leader append, follower append, log recovery);
truncation at both ends; a plain-data snapshot.

Must not know: files, sockets, clocks, the log's layout. The driver
(minibroker.broker.partition) reads the four header fields of each batch
(producer id, producer epoch, base sequence, last offset delta, max
timestamp) and the offsets the log assigned, and passes them in; it writes and reads the
snapshot bytes.

Rules (Kafka 2.5+ / 3.x, origin CLIENT):
  * P-DUP: a batch whose (epoch, first_seq, last_seq) equals one of the last
    five batches of its producer is a duplicate: answer with that batch's
    base offset and, as its log_append_time, its stored max timestamp
    (Kafka's BatchMetadata.timestamp, whatever the topic's timestamp type);
    append nothing. The driver checks the batch as any other first: a
    duplicate that fails validation gets the validation's error.
  * P-EPOCH: an epoch below the producer's current epoch is fenced:
    INVALID_PRODUCER_EPOCH (Kafka >= 2.7 answers produce with it).
  * P-NEWEPOCH: a higher epoch of a known producer must start at sequence 0,
    else OUT_OF_ORDER_SEQUENCE_NUMBER.
  * P-SEQ: the same epoch must continue at last_seq + 1 (wrapping at
    2**31 - 1 to 0), else OUT_OF_ORDER_SEQUENCE_NUMBER (also a retry of a
    batch older than the last five).
  * P-UNKNOWN: an unknown producer id is accepted at any sequence (KIP-360:
    since 2.5 the broker no longer answers UNKNOWN_PRODUCER_ID on produce;
    its state may have been removed by retention or expiry, the client resets).
  * P-EXPIRE: a producer whose last batch's stored max timestamp is
    producer.id.expiration.ms or more before the broker's clock is forgotten
    (Kafka's removeExpiredProducers: on every replica, periodically, and when
    a log is loaded); a last batch without a timestamp (-1) counts as that old.
Replication and recovery apply batches without checks (origin REPLICATION).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from minibroker.errors import ErrorCode

BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
INT32_MAX = 2**31 - 1
# Makes a NamedTuple from a tuple of all its fields without its Python-level __new__ (as its _make does):
# a BatchMetadata is made for every batch appended, on every replica.
_new = tuple.__new__


def last_sequence(first_seq: int, last_offset_delta: int) -> int:
    """The batch's last sequence, wrapping past INT32_MAX to 0 as Kafka's
    DefaultRecordBatch.incrementSequence does."""
    if first_seq > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - first_seq) - 1
    return first_seq + last_offset_delta


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    timestamp: int                 # the batch's max timestamp as stored (-1: none, or from an older snapshot)


def _batch_metadata(fields: Any) -> BatchMetadata:
    """One snapshot batch: (first_seq, last_seq, base_offset, last_offset[, timestamp])."""
    if len(fields) == 4:
        fields = [*fields, -1]
    a, b, c, d, ts = fields
    return BatchMetadata(int(a), int(b), int(c), int(d), int(ts))


@dataclass(slots=True)
class ProducerEntry:
    """Invariant: `batches` holds at most BATCHES_TO_RETAIN entries of
    `epoch`, oldest first, with ascending offsets."""
    producer_id: int
    epoch: int
    batches: list[BatchMetadata] = field(default_factory=list)

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


class AppendCheck(NamedTuple):
    """What the leader does with one client batch."""
    kind: Literal["append", "duplicate", "reject"]
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1          # duplicate: the original base offset
    last_offset: int = -1          # duplicate: the original last offset
    message: str = ""
    timestamp: int = -1            # duplicate: the original batch's max timestamp as stored


APPEND = AppendCheck("append")


class ProducerState:
    """One partition's producer state.

    Invariant: every entry has at least one batch; `_entries` is keyed by
    producer id; `through` is the log offset up to which (exclusive) batches
    have been applied (the snapshot's validity point)."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._entries: dict[int, ProducerEntry] = {}
        self.through = 0

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def check_client_batch(self, producer_id: int, epoch: int, first_seq: int,
                           last_offset_delta: int) -> AppendCheck:
        """Leader, before appending a client batch (P-DUP, P-EPOCH,
        P-NEWEPOCH, P-SEQ, P-UNKNOWN). Changes nothing."""
        if producer_id == NO_PRODUCER_ID:
            return APPEND
        if epoch < 0 or first_seq < 0:
            return AppendCheck("reject", ErrorCode.INVALID_RECORD, message=(
                f"{self.name}: idempotent batch of producer {producer_id} has epoch {epoch}, sequence {first_seq}"))
        last_seq = last_sequence(first_seq, last_offset_delta)
        e = self._entries.get(producer_id)
        if e is None:
            return APPEND
        if epoch == e.epoch:
            for b in e.batches:
                if b.first_seq == first_seq and b.last_seq == last_seq:
                    return AppendCheck("duplicate", ErrorCode.NONE, b.base_offset, b.last_offset,
                                       timestamp=b.timestamp)
        if epoch < e.epoch:
            return AppendCheck("reject", ErrorCode.INVALID_PRODUCER_EPOCH, message=(
                f"{self.name}: producer {producer_id} epoch {epoch} is older than its current epoch {e.epoch}"))
        if epoch > e.epoch:
            if first_seq != 0:
                return AppendCheck("reject", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, message=(
                    f"{self.name}: producer {producer_id} new epoch {epoch} starts at sequence {first_seq}, not 0"))
            return APPEND
        current = e.batches[-1].last_seq
        if not in_sequence(current, first_seq):
            return AppendCheck("reject", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, message=(
                f"{self.name}: producer {producer_id} epoch {epoch}: sequence {first_seq} after {current}"))
        return APPEND

    def on_batch(self, producer_id: int, epoch: int, first_seq: int, base_offset: int, last_offset: int,
                 max_timestamp: int) -> None:
        """A batch is in the log (leader append after `check_client_batch`,
        follower append, recovery scan): record it without checks. `max_timestamp`:
        the batch's max timestamp as stored (a LogAppendTime topic's: the leader's stamp)."""
        if last_offset + 1 > self.through:
            self.through = last_offset + 1
        if producer_id == NO_PRODUCER_ID:
            return
        e = self._entries.get(producer_id)
        if e is None or e.epoch != epoch:
            e = ProducerEntry(producer_id, epoch)
            self._entries[producer_id] = e
        e.batches.append(_new(BatchMetadata, (first_seq, last_sequence(first_seq, last_offset - base_offset),
                                              base_offset, last_offset, max_timestamp)))
        if len(e.batches) > BATCHES_TO_RETAIN:
            del e.batches[0]

    def truncate_to(self, offset: int) -> None:
        """The log was truncated to `offset` (exclusive end): forget batches
        at or above it; a producer left without batches is forgotten
        (simplified vs Kafka, which reloads it from an older snapshot)."""
        for pid in sorted(self._entries):
            e = self._entries[pid]
            e.batches = [b for b in e.batches if b.base_offset < offset]
            if not e.batches:
                del self._entries[pid]
        self.through = min(self.through, offset)

    def truncate_head(self, log_start: int) -> None:
        """The log start moved to `log_start` (retention, DeleteRecords):
        producers whose last batch is below it are removed, as Kafka's
        ProducerStateManager.truncateHead does."""
        for pid in sorted(self._entries):
            if self._entries[pid].last_offset < log_start:
                del self._entries[pid]
        if self.through < log_start:
            self.through = log_start

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """P-EXPIRE, triggered by the broker's periodic expiration check and by log loading:
        forget every producer whose last batch's timestamp is `expiration_ms` or more before
        `now_ms`. Returns their ids, ascending."""
        gone = [pid for pid, e in sorted(self._entries.items()) if now_ms - e.batches[-1].timestamp >= expiration_ms]
        for pid in gone:
            del self._entries[pid]
        return gone

    def reset(self, offset: int) -> None:
        """The log restarted empty at `offset`."""
        self._entries.clear()
        self.through = offset

    # ------------------------------------------------------------ snapshot

    def snapshot(self) -> dict[str, Any]:
        """Plain data (msgpack-able), producers by ascending id."""
        return {"through": self.through,
                "producers": [[e.producer_id, e.epoch, [list(b) for b in e.batches]]
                              for _, e in sorted(self._entries.items())]}

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], name: str = "") -> ProducerState:
        """Raises ValueError when `data` is not a snapshot. A batch of four fields (a snapshot
        written before batches kept their timestamp) gets timestamp -1."""
        st = cls(name)
        try:
            st.through = int(data["through"])
            for pid, epoch, batches in data["producers"]:
                bs = [_batch_metadata(b) for b in batches]
                if bs:
                    st._entries[int(pid)] = ProducerEntry(int(pid), int(epoch), bs[-BATCHES_TO_RETAIN:])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a producer state snapshot: {exc}") from exc
        return st
