"""minibroker._speedups.SlotsMaker: an instance of a slots class with its slots set, as its __init__ sets them."""
import gc
import sys
import weakref
from dataclasses import dataclass

import pytest

from minibroker._speedups import SlotsMaker
from minibroker.client.types import RecordMetadata


def test_a_made_record_metadata_is_the_one_the_dataclass_makes():
    make = SlotsMaker(RecordMetadata, ("topic", "partition", "offset", "timestamp"))
    md = make("orders", 3, 41, 1234)
    assert type(md) is RecordMetadata
    assert md == RecordMetadata("orders", 3, 41, 1234) and hash(md) == hash(RecordMetadata("orders", 3, 41, 1234))
    assert repr(md) == repr(RecordMetadata("orders", 3, 41, 1234))
    with pytest.raises(AttributeError):            # still frozen
        md.offset = 5


def test_references_are_counted_and_cycles_collected():
    @dataclass(slots=True, weakref_slot=True)
    class Node:
        ref: object
        other: object

    make = SlotsMaker(Node, ("other", "ref"))
    value = object()
    before = sys.getrefcount(value)
    n = make(value, None)
    after = sys.getrefcount(value)
    assert after == before + 1
    assert n.other is value and n.ref is None
    n.ref = n                                       # a cycle through a made instance
    dead = weakref.ref(n)
    del n
    gc.collect()
    assert dead() is None
    after = sys.getrefcount(value)
    assert after == before


def test_an_unset_slot_is_missing_as_usual():
    class Two:
        __slots__ = ("a", "b")
    t = SlotsMaker(Two, ("a",))(1)
    assert t.a == 1
    with pytest.raises(AttributeError):
        assert t.b is None


def test_it_refuses_what_is_not_a_plain_object_slot_and_bad_calls():
    class WithDict:
        pass

    class OwnNew:
        __slots__ = ("a",)

        def __new__(cls):
            return super().__new__(cls)
    with pytest.raises(AttributeError):
        SlotsMaker(RecordMetadata, ("nope",))
    with pytest.raises(TypeError):
        SlotsMaker(WithDict, ("__dict__",))
    with pytest.raises(TypeError):
        SlotsMaker(OwnNew, ("a",))
    with pytest.raises(TypeError):
        SlotsMaker(int, ())
    with pytest.raises(TypeError):
        SlotsMaker(RecordMetadata, ["topic"])
    make = SlotsMaker(RecordMetadata, ("topic", "partition", "offset", "timestamp"))
    with pytest.raises(TypeError):
        make("t", 0, 1)
    with pytest.raises(TypeError):
        make("t", 0, 1, timestamp=2)
