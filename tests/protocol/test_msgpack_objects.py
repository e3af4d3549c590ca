"""msgpack_objects: how many objects a frame body holds, counted without decoding it (the request
server decodes a big body of few objects on the loop, and one of many on its decoder thread). The
C version in minibroker._speedups and the Python twin give the same counts on seeded random
messages, and -1 for every truncated one."""
from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest

from minibroker.protocol.framing import CHUNK_BYTES, INLINE_OBJECTS, decodes_inline, msgpack_objects_py

speedups = pytest.importorskip("minibroker._speedups")


def random_object(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(12 if depth < 4 else 8)
    if kind == 0:
        return rng.randrange(-2**63, 2**64)
    if kind == 1:
        return rng.random()
    if kind == 2:
        return b"x" * rng.choice([0, 1, 31, 32, 255, 256, 70_000])
    if kind == 3:
        return "s" * rng.choice([0, 31, 32, 255, 256, 70_000])
    if kind == 4:
        return None
    if kind == 5:
        return rng.choice([True, False])
    if kind == 6:
        return msgpack.ExtType(rng.randrange(128), b"e" * rng.choice([1, 2, 4, 8, 16, 3, 300, 70_000]))
    if kind == 7:
        return rng.randrange(-32, 128)
    if kind in (8, 9):
        return [random_object(rng, depth + 1) for _ in range(rng.choice([0, 1, 15, 16, 40]))]
    return {str(i): random_object(rng, depth + 1) for i in range(rng.choice([0, 1, 15, 16, 20]))}


def objects(o: Any) -> int:
    if isinstance(o, list):
        return 1 + sum(objects(x) for x in o)
    if isinstance(o, dict):
        return 1 + sum(1 + objects(v) for v in o.values())
    return 1


@pytest.mark.parametrize("seed", range(5))
def test_c_and_python_count_the_same_objects_up_to_the_limit(seed):
    rng = random.Random(seed)
    for _ in range(60):
        o = random_object(rng)
        data = msgpack.packb(o, use_bin_type=True)
        n = objects(o)
        for limit in (0, 1, n - 1, n, n + 5, 10**9):
            want = n if n <= limit else limit + 1
            assert speedups.msgpack_objects(data, limit) == msgpack_objects_py(data, limit) == want
        for cut in {c for c in (0, 1, len(data) // 2, len(data) - 1) if c < len(data)}:
            assert speedups.msgpack_objects(data[:cut], 10**9) == msgpack_objects_py(data[:cut], 10**9) == -1


def test_a_length_beyond_the_data_and_the_unused_type_byte_are_incomplete():
    for data in (b"\xdd\xff\xff\xff\xff", b"\xc6\x7f\xff\xff\xff" + b"x", b"\xc1", b"\xdf\x00\x00\x00\x02\xa1k"):
        assert speedups.msgpack_objects(data, 100) == msgpack_objects_py(data, 100) == -1


def test_a_big_body_of_few_objects_decodes_inline_and_one_of_many_does_not():
    few = msgpack.packb({"topics": [{"topic": "t", "partitions": [{"partition": 0, "records": b"r" * 500_000}]}]})
    many = msgpack.packb({"topics": [{"topic": f"t{i}", "partitions": [0]} for i in range(INLINE_OBJECTS)]})
    assert len(few) > CHUNK_BYTES and len(many) > CHUNK_BYTES
    assert decodes_inline(few) and not decodes_inline(many)
    assert not decodes_inline(few[:-1]), "an incomplete body goes to the decoder, which says what is wrong"
