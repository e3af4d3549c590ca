import random
from collections import Counter

import pytest

from minibroker.client.partitioner import StickyPartitioner, murmur2, murmur2_py, partition_for_key


@pytest.mark.parametrize("impl", [murmur2, murmur2_py], ids=["default", "python"])
def test_murmur2_matches_kafka_test_vectors(impl):
    # Kafka's UtilsTest.testMurmur2
    vectors = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
               b"a-little-bit-longer-string": -1486304829,
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for data, expected in vectors.items():
        assert impl(data) == expected


def test_the_c_murmur2_gives_the_python_twins_values():
    speedups = pytest.importorskip("minibroker._speedups")
    rng = random.Random(7)
    for n in [*range(0, 40), 255, 1000]:
        data = bytes(rng.getrandbits(8) for _ in range(n))
        assert speedups.murmur2(data) == murmur2_py(data), data
    assert speedups.murmur2(bytearray(b"foobar")) == speedups.murmur2(memoryview(b"foobar")) == -790332482


def test_same_key_always_lands_on_the_same_partition():
    assert len({partition_for_key(b"user-42", 6) for _ in range(10)}) == 1
    assert all(0 <= partition_for_key(str(i).encode(), 3) < 3 for i in range(100))


def test_unkeyed_records_stick_to_one_partition_while_its_batch_has_room():
    picks = iter([0, 1, 0, 1])
    sp = StickyPartitioner(rand=lambda n: next(picks) % n)
    room = {0: True, 1: True, 2: True}
    first = sp.partition("t", 3, room.get, lambda t: [0, 1, 2])
    assert [sp.partition("t", 3, room.get, lambda t: [0, 1, 2]) for _ in range(3)] == [first] * 3
    room[first] = False
    second = sp.partition("t", 3, room.get, lambda t: [0, 1, 2])
    assert second != first
    assert sp.partition("t", 3, room.get, lambda t: [0, 1, 2]) == second


def test_sticky_partitioner_prefers_partitions_with_a_leader():
    sp = StickyPartitioner()
    counts = Counter()
    for _ in range(200):
        counts[sp.partition("t", 3, lambda p: False, lambda t: [2])] += 1
    assert set(counts) == {2}
