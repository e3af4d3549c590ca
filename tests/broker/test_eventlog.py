"""The broker's EventLog hands every event to the ring as plain values (msgpack- and JSON-safe):
an event whose values are plain already is kept as it is (the routine per-request ones), any other
is converted, with the same result as converting it field by field."""
from __future__ import annotations

import enum
import json

import msgpack

from minibroker.broker.eventlog import EventLog, plain_event
from minibroker.events import Event


class Color(enum.Enum):
    RED = "red"


def test_an_event_of_plain_values_is_kept_as_it_is() -> None:
    e = Event("hw_move", 5, "t-0", 3, 4, "min LEO over ISR 1,2,3", {"trigger": "replica 2 fetched 4", "bound_by": 2})
    assert plain_event(e) is e


def test_other_values_are_made_plain() -> None:
    e = Event("isr_shrink", 5, "t-0", [1, 2, 3], (1, 2), "lag", {"replicas": {3, 1}, "color": Color.RED, 7: "x"})
    p = plain_event(e)
    assert p is not e
    assert (p.before, p.after) == ([1, 2, 3], [1, 2])
    assert p.extra == {"replicas": [1, 3], "color": "red", "7": "x"}
    msgpack.packb(p.to_dict())
    json.dumps(p.to_dict())


def test_the_ring_gets_each_event_once_in_order_with_its_sequence() -> None:
    log = EventLog(1, capacity=10)
    seen: list[str] = []
    log.ring.subscribe(lambda ev: seen.append(ev.kind))
    log.emit(Event("hw_move", 1, "t-0", 0, 1, "r", {"trigger": "x"}))
    log.emit(Event("isr_shrink", 2, "t-0", [1, 2], [1], "lag", {}))
    nxt, events = log.ring.read_now(0)
    assert nxt == 2 and [e["seq"] for e in events] == [0, 1] and seen == ["hw_move", "isr_shrink"]
    assert events[0]["trigger"] == "x" and events[1]["after"] == [1]
