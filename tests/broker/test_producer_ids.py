"""Producer ids: unique across broker incarnations because broker epochs are."""
import pytest

from minibroker.broker.producer_ids import COUNTER_BITS, ProducerIdAllocator
from minibroker.errors import ErrorCode, KafkaError


def test_ids_are_distinct_within_and_across_broker_epochs():
    a, b = ProducerIdAllocator(), ProducerIdAllocator()
    ids = [a.allocate(12) for _ in range(3)] + [b.allocate(40) for _ in range(3)] + [a.allocate(77)]
    assert len(set(ids)) == len(ids) and all(i >= 0 for i in ids)
    assert ids[0] >> COUNTER_BITS == 12 and ids[-1] >> COUNTER_BITS == 77


def test_an_unregistered_broker_hands_out_no_ids_and_says_so_retriably():
    with pytest.raises(KafkaError) as exc:
        ProducerIdAllocator().allocate(-1)
    assert exc.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and exc.value.retriable
