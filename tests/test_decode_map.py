"""minibroker._speedups.decode_map decodes what msgpack.unpackb(raw=False, strict_map_key=True,
use_list=True) decodes, to the same values of the same types, and answers None wherever
msgpack would fail or decodes what it leaves to msgpack (extension types, deep nesting)."""
import math

import msgpack
from hypothesis import given, settings, strategies as st

from minibroker._speedups import decode_map


def unpack(data: bytes):
    return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)


def same(a, b) -> bool:
    """Equal values of exactly the same types, all the way down (True is not 1, NaN is NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(type(k) is type(j) for k, j in zip(a, b, strict=True)) \
            and all(same(a[k], b[k]) for k in a)
    return a == b


scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=True)
           | st.text(max_size=60) | st.binary(max_size=300) | st.sampled_from(["topic", "partitions", "", "é", "id"]))
keys = st.text(max_size=50) | st.binary(max_size=10) | st.sampled_from(["topic", "partition", "error"])
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(keys, inner, max_size=6),
                      max_leaves=40)
maps = st.dictionaries(keys, values, max_size=8)


@settings(max_examples=400, deadline=None)
@given(maps, st.booleans())
def test_any_map_decodes_as_msgpack_decodes_it(obj, single_float):
    try:
        data = msgpack.packb(obj, use_bin_type=True, use_single_float=single_float)
    except OverflowError:                                 # a float beyond float32's range
        data = msgpack.packb(obj, use_bin_type=True)
    assert same(decode_map(data), unpack(data))
    assert same(decode_map(memoryview(data)), unpack(data))
    assert same(decode_map(data), unpack(data))          # a second time: from the string cache


@settings(max_examples=300, deadline=None)
@given(maps, st.data())
def test_a_cut_short_or_extended_map_is_left_to_msgpack(obj, data):
    packed = msgpack.packb(obj, use_bin_type=True)
    cut = data.draw(st.integers(0, len(packed) - 1))
    assert decode_map(packed[:cut]) is None
    assert decode_map(packed + b"\x00") is None            # trailing bytes: msgpack's ExtraData


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_decode_only_where_msgpack_agrees(data):
    data = b"\x83" + data
    got = decode_map(data)
    try:
        want = unpack(data)
    except Exception:
        assert got is None
        return
    assert got is None or same(got, want)


def test_what_is_left_to_msgpack():
    assert decode_map(msgpack.packb([1, 2])) is None                                  # not a map
    assert decode_map(msgpack.packb({"t": msgpack.ExtType(5, b"x")})) is None        # extension types
    assert decode_map(b"\x81\xa1a\xc1") is None                                       # 0xc1 is never used
    assert decode_map(msgpack.packb({1: 2})) is None                                  # strict_map_key
    assert decode_map(msgpack.packb({"a": [1]}).replace(b"\x91", b"\x91\xc1")) is None
    assert decode_map(b"\x81\xa1a\xa2\xff\xfe") is None                              # not UTF-8
    deep: dict = {}
    node = deep
    for _ in range(70):
        node["n"] = node = {}
    data = msgpack.packb(deep)
    assert decode_map(data) is None and unpack(data) == deep
    assert decode_map(b"") is None


def test_a_produce_answer():
    resp = {"topics": [{"topic": "orders", "partitions": [{"partition": 0, "error": 0, "base_offset": 56553,
                                                           "log_start_offset": 0, "message": ""}]}], "id": 2}
    data = msgpack.packb(resp, use_bin_type=True)
    assert same(decode_map(data), resp) and same(decode_map(data), resp)
