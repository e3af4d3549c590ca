import asyncio

from minibroker.controller.eventlog import EventLog
from minibroker.events import Event


def ev(i: int) -> Event:
    return Event("election", i, "t-0", None, i, f"reason {i}")


def test_events_get_consecutive_sequence_numbers_from_zero():
    log = EventLog()
    assert [log.append(ev(i)) for i in range(3)] == [0, 1, 2]
    nxt, events = log.read_now(1)
    assert nxt == 3 and [e["seq"] for e in events] == [1, 2] and events[0]["reason"] == "reason 1"


def test_ring_buffer_keeps_only_the_newest_and_old_readers_resume_from_oldest():
    log = EventLog(capacity=3)
    for i in range(5):
        log.append(ev(i))
    nxt, events = log.read_now(0)
    assert [e["seq"] for e in events] == [2, 3, 4] and nxt == 5


def test_max_events_bounds_a_read():
    log = EventLog()
    for i in range(5):
        log.append(ev(i))
    nxt, events = log.read_now(0, max_events=2)
    assert [e["seq"] for e in events] == [0, 1] and nxt == 2


async def test_read_parks_until_an_event_arrives():
    log = EventLog()
    reader = asyncio.ensure_future(log.read(0, max_wait_ms=60_000))
    await asyncio.sleep(0)
    assert not reader.done()
    log.append(ev(0))
    nxt, events = await asyncio.wait_for(reader, 5)
    assert nxt == 1 and len(events) == 1


async def test_read_with_nothing_new_returns_empty_after_wait():
    log = EventLog()
    log.append(ev(0))
    assert await log.read(1, max_wait_ms=10) == (1, [])
