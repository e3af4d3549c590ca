import asyncio
import os

import pytest

from minibroker.controller.metadata_log import MetadataLog, MetadataLogError, encode_entry
from minibroker.metadata import BrokerRecord, Endpoint, PartitionRecord, TopicRecord, to_wire

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)


def recs(start: int, n: int):
    return [(start + i, BrokerRecord(i, start + i, None, EP)) for i in range(n)]


async def test_appended_records_are_durable_readable_and_replayed_after_reopen(tmp_path):
    m = MetadataLog(str(tmp_path))
    assert m.load().records == []
    m.start()
    m.append(recs(0, 3))
    assert m.read(0, 10) == []            # nothing is served before it is fsynced
    await m.wait_durable(2)
    assert [r["offset"] for r in m.read(0, 10)] == [0, 1, 2]
    assert [r["offset"] for r in m.read(1, 1)] == [1]
    await m.close()
    again = MetadataLog(str(tmp_path))
    loaded = again.load()
    assert loaded.records == recs(0, 3) and again.end == again.durable_end == 3


async def test_torn_last_record_is_dropped_and_truncated(tmp_path):
    m = MetadataLog(str(tmp_path))
    m.load()
    m.start()
    m.append(recs(0, 2))
    await m.wait_durable(1)
    await m.close()
    size = os.path.getsize(m.path)
    with open(m.path, "ab") as f:
        f.write(encode_entry(to_wire(recs(2, 1)[0][1], 2))[:-3])
    again = MetadataLog(str(tmp_path))
    loaded = again.load()
    assert [o for o, _ in loaded.records] == [0, 1] and loaded.dropped_bytes > 0
    assert os.path.getsize(m.path) == size


async def test_corrupt_record_and_everything_after_it_is_dropped(tmp_path):
    m = MetadataLog(str(tmp_path))
    m.load()
    m.start()
    m.append(recs(0, 3))
    await m.wait_durable(2)
    await m.close()
    first = len(encode_entry(to_wire(recs(0, 1)[0][1], 0)))
    with open(m.path, "r+b") as f:
        f.seek(first + 12)
        f.write(b"\xff\xff")
    loaded = MetadataLog(str(tmp_path)).load()
    assert [o for o, _ in loaded.records] == [0]


async def test_compaction_keeps_offsets_and_continues_after_the_snapshot(tmp_path):
    m = MetadataLog(str(tmp_path))
    m.load()
    m.start()
    m.append(recs(0, 5))
    await m.wait_durable(4)
    await m.close()
    image = [(4, BrokerRecord(0, 4, None, EP)), (3, TopicRecord("t", "id", 1, {})),
             (3, PartitionRecord("t", 0, (0,), (0,), 0, 0, 0))]
    m2 = MetadataLog(str(tmp_path))
    m2.load()
    m2.compact(image, 5)
    assert m2.log_start == 5 and m2.end == 5
    m2.start()
    m2.append([(5, BrokerRecord(1, 5, None, EP))])
    await m2.wait_durable(5)
    await m2.close()
    loaded = MetadataLog(str(tmp_path)).load()
    assert loaded.snapshot == image and loaded.snapshot_end == 5
    assert [o for o, _ in loaded.records] == [5]


async def test_snapshot_without_end_marker_refuses_to_load(tmp_path):
    with open(tmp_path / "metadata.log", "wb") as f:
        f.write(encode_entry({"type": "snapshot_begin", "offset": 3}))
        f.write(encode_entry(to_wire(BrokerRecord(0, 0, None, EP), 0)))
    with pytest.raises(MetadataLogError):
        MetadataLog(str(tmp_path)).load()


async def test_append_out_of_order_is_refused(tmp_path):
    m = MetadataLog(str(tmp_path))
    m.load()
    m.start()
    with pytest.raises(MetadataLogError):
        m.append(recs(1, 1))
    await m.close()


async def test_long_poll_wakes_on_new_durable_record_and_times_out_without_one(tmp_path):
    m = MetadataLog(str(tmp_path))
    m.load()
    m.start()
    await asyncio.wait_for(m.wait_for_records(0, 20), 5)   # times out quietly
    waiter = asyncio.ensure_future(m.wait_for_records(0, 60_000))
    await asyncio.sleep(0)
    assert not waiter.done()
    m.append(recs(0, 1))
    await asyncio.wait_for(waiter, 5)
    assert m.read(0, 10)[0]["offset"] == 0
    await m.close()


async def test_a_partition_being_reassigned_comes_back_with_its_adding_and_removing_replicas(tmp_path):
    """C10's fields survive the metadata log (a controller restart mid-move); a partition not being moved is
    written without them, as before they existed."""
    moving = PartitionRecord("t", 0, (3, 2, 1), (1, 2), 1, 4, 7, adding_replicas=(3,), removing_replicas=(1,))
    still = PartitionRecord("t", 1, (1, 2), (1, 2), 1, 0, 0)
    assert "adding_replicas" not in to_wire(still, 1) and to_wire(moving, 0)["adding_replicas"] == [3]
    m = MetadataLog(str(tmp_path))
    m.load()
    m.start()
    m.append([(0, moving), (1, still)])
    await m.wait_durable(1)
    await m.close()
    loaded = MetadataLog(str(tmp_path)).load().records
    assert loaded == [(0, moving), (1, still)] and loaded[0][1].reassigning and not loaded[1][1].reassigning
