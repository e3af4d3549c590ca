"""A Fetch's byte accounting across its steps (ReplicaManager._FetchCall): `total` is kept equal to the
record bytes of its results and `room` / `budget` to what its number of entries allows, through the
initial read, the park, the quiet partitions readmitted on waking, and the re-read. `_fetch_woken`
relies on both instead of recomputing them: these tests check them wherever a Fetch answers."""
from __future__ import annotations

import asyncio

import pytest

from minibroker.broker import replica_manager
from minibroker.limits import fetch_records_budget
from minibroker.records import iter_records
from minibroker.testing.wait import until
from test_replica_manager import T, Broker, entries, make_broker, session_fetch


@pytest.fixture
async def checked(tmp_path, monkeypatch):
    """A broker whose every Fetch answer is checked against the accounting recomputed from scratch."""
    b: Broker = await make_broker(tmp_path)
    answered: list[int] = []
    answer = replica_manager.ReplicaManager._fetch_answer

    def checked_answer(rm: replica_manager.ReplicaManager, call: replica_manager._FetchCall) -> None:
        assert call.total == sum(len(r.records) for r in call.results)
        room = fetch_records_budget(rm.max_frame_bytes, rm.max_frame_bytes, len(call.requests))
        assert (call.room, call.budget) == (room, max(0, min(call.body["max_bytes"], room)))
        answered.append(len(call.requests))
        answer(rm, call)
    monkeypatch.setattr(replica_manager.ReplicaManager, "_fetch_answer", checked_answer)
    b.answered = answered                           # type: ignore[attr-defined]
    yield b
    await b.close()


async def test_a_woken_session_fetch_that_readmits_quiet_partitions_answers_within_their_budget(checked):
    broker = checked
    broker.setup(replicas=(1, 2), partitions=3)
    sid = (await session_fetch(broker, [{"partition": p, "fetch_offset": 0} for p in range(3)], 0, 0))["session_id"]
    await session_fetch(broker, [], sid, 1)                         # every partition quiet
    parked = asyncio.ensure_future(session_fetch(broker, [{"partition": 0, "fetch_offset": 0}], sid, 2,
                                                 max_wait_ms=30_000))
    await until(lambda: broker.rm.purgatory.watching((T, 2)), "the session fetch to park")
    await broker.produce([b"x"], partition=2)                       # wakes it: partition 2 rejoins the read
    got = {e["partition"]: [r.value for r in iter_records(e["records"])]
           for e in entries(await asyncio.wait_for(parked, 10))}
    assert got == {0: [], 2: [b"x"]}, "the named partition (KS4) and the quiet one that moved"
    assert broker.answered[-1] == 2, "partition 1 did not move: it stays out of the read"


async def test_a_woken_fetch_keeps_the_bytes_its_first_read_took(checked):
    broker = checked
    broker.setup(replicas=(1, 2), partitions=2)
    await broker.produce([b"a" * 300], partition=0)
    both = [{"partition": 0, "fetch_offset": 0}, {"partition": 1, "fetch_offset": 0}]
    parked = asyncio.ensure_future(broker.fetch(both, replica_id=2, broker_epoch=12, max_wait_ms=30_000,
                                                min_bytes=1000))      # partition 0's batch is not enough
    await until(lambda: broker.rm.purgatory.watching((T, 1)), "the fetch to park")
    await broker.produce([b"b" * 800], partition=1)
    got = {e["partition"]: [r.value for r in iter_records(e["records"])]
           for e in entries(await asyncio.wait_for(parked, 10))}
    assert got == {0: [b"a" * 300], 1: [b"b" * 800]}
    assert entries(await broker.fetch(both))[0]["error"] == 0        # a consumer's: no stamps, no re-read
    assert broker.answered == [2, 2]
