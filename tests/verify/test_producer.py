"""The verifiable producer's bookkeeping: values name their run, partition and
sequence; each batch outcome becomes acks or failures, and a batch that was
never sent is a definite failure."""
import asyncio

from minibroker.client.accumulator import ProducerBatch
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.verify.producer import NEVER_SENT, VerifiableProducer, make_value, parse_value


def test_values_round_trip_and_other_runs_values_are_not_ours():
    v = make_value("ab12:", 2, 41)
    assert v == "ab12:p2-41"
    assert parse_value("ab12:", v) == (2, 41)
    assert parse_value("zz99:", v) is None
    assert parse_value("ab12:", "ab12:q2-41") is None


def _batch(vp, partition, seqs, attempts):
    loop = asyncio.get_running_loop()
    b = ProducerBatch(TopicPartition("t", partition), 16384, 0, loop.create_future())
    for s in seqs:
        b.try_append(None, make_value(vp.run, partition, s).encode(), 0, (), 20)
        vp._window._value -= 1         # as if acquired by the send loop
    b.attempts = attempts
    return b


async def test_batch_outcomes_become_acks_with_offsets_or_classified_failures():
    vp = VerifiableProducer("127.0.0.1:1", "t", 2, run="r:")
    vp._on_batch_done(_batch(vp, 0, [0, 1], 1), 10, None)
    vp._on_batch_done(_batch(vp, 1, [0], 1), -1, KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, ""))
    vp._on_batch_done(_batch(vp, 1, [1], 1), -1, KafkaError(ErrorCode.REQUEST_TIMED_OUT, ""))
    vp._on_batch_done(_batch(vp, 0, [2], 0), -1, KafkaError(ErrorCode.REQUEST_TIMED_OUT, "expired"))
    assert [(a.value, a.partition, a.offset, a.seq) for a in vp.acks] == [("r:p0-0", 0, 10, 0), ("r:p0-1", 0, 11, 1)]
    assert [(f.value, f.error, f.definite) for f in vp.failures] == [
        ("r:p1-0", "NOT_ENOUGH_REPLICAS", True), ("r:p1-1", "REQUEST_TIMED_OUT", False),
        ("r:p0-2", NEVER_SENT, True)]
    assert vp.acked_count() == 2 and vp.acked_count(1) == 0
    assert vp.last_acked_offsets() == {0: 11}
    await vp.producer.close(0)
