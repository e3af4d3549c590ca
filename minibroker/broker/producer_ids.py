"""Producer id allocation for InitProducerId (API 22), broker-local and
unique cluster-wide without a round trip to the controller.

Owns the id layout and the per-incarnation counter. Kafka's controller hands
out blocks of 1000 ids from a replicated counter (KIP-730,
AllocateProducerIds); minibroker uses what is already unique cluster-wide:
the broker epoch, which the controller assigns as the metadata-log offset of
the broker's registration record (a new one per registration, never reused).
So::

    producer_id = broker_epoch << COUNTER_BITS | counter    (counter from 0)

gives at most 2**24 ids per broker incarnation (a re-registration gives a new
epoch and a fresh counter), positive int64 ids while the metadata log stays
below 2**39 records. Must not know requests, sockets or the controller.
"""
from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError

COUNTER_BITS = 24
MAX_BROKER_EPOCH = (1 << (63 - COUNTER_BITS)) - 1


class ProducerIdAllocator:
    """Invariant: every id returned differs from every id returned before, by
    this allocator or by any other broker incarnation's (distinct epochs)."""

    def __init__(self) -> None:
        self._epoch = -1
        self._next = 0

    def allocate(self, broker_epoch: int) -> int:
        """InitProducerId without a transactional id: a fresh id. Raises
        KafkaError(COORDINATOR_NOT_AVAILABLE, retriable) before the broker is
        registered or when this incarnation's ids are used up."""
        if broker_epoch < 0:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "broker not registered yet: no producer ids")
        if broker_epoch > MAX_BROKER_EPOCH:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"broker epoch {broker_epoch} too large for ids")
        if broker_epoch != self._epoch:
            self._epoch, self._next = broker_epoch, 0
        if self._next >= 1 << COUNTER_BITS:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"the {1 << COUNTER_BITS} producer ids of broker epoch {broker_epoch} are used up")
        pid = (broker_epoch << COUNTER_BITS) | self._next
        self._next += 1
        return pid
