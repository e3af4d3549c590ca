"""The producer's pre-encoded Produce body is byte for byte what packing the request map gives."""
import msgpack
import pytest

from minibroker.client.producer import ProduceEncoder
from minibroker.client.types import TopicPartition
from minibroker.net.connection import Connection
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import FrameDecoder, encode_frame


def as_map(acks: int, timeout_ms: int, tp: TopicPartition, records: bytes) -> dict:
    return {"acks": acks, "timeout_ms": timeout_ms,
            "topics": [{"topic": tp.topic, "partitions": [{"partition": tp.partition, "records": records}]}]}


@pytest.mark.parametrize("acks,timeout_ms", [(-1, 30_000), (1, 5), (0, 2**31 - 1)])
@pytest.mark.parametrize("topic,partition", [("t", 0), ("orders-" + "x" * 40, 127), ("é" * 20, 70_000)])
@pytest.mark.parametrize("size", [0, 1, 255, 256, 65_535, 65_536, 300_000])
def test_the_encoded_body_and_frame_are_the_packed_maps(acks, timeout_ms, topic, partition, size):
    tp = TopicPartition(topic, partition)
    records = bytes(range(256)) * (size // 256) + b"r" * (size % 256)
    entries, parts = ProduceEncoder(acks, timeout_ms).body(tp, records)
    expected = msgpack.packb(as_map(acks, timeout_ms, tp, records), use_bin_type=True)
    assert entries == 3 and b"".join(parts) == expected[1:]          # the map's entries, without its header
    conn = Connection("h", 1, "client-7", 1 << 20)
    for cid in (1, 2):
        got_id, frame = conn._frame(int(ApiKey.PRODUCE), (entries, parts))
        want = encode_frame({"api": int(ApiKey.PRODUCE), "v": 0, "id": cid, "client": "client-7",
                             **as_map(acks, timeout_ms, tp, records)})
        assert (got_id, frame) == (cid, want)
    assert FrameDecoder().feed(frame)[0]["topics"][0]["partitions"][0]["records"] == records
