from collections import Counter

from minibroker.client.partitioner import StickyPartitioner, murmur2, partition_for_key


def test_murmur2_matches_kafka_test_vectors():
    # Kafka's UtilsTest.testMurmur2
    vectors = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
               b"a-little-bit-longer-string": -1486304829,
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for data, expected in vectors.items():
        assert murmur2(data) == expected


def test_same_key_always_lands_on_the_same_partition():
    assert len({partition_for_key(b"user-42", 6) for _ in range(10)}) == 1
    assert all(0 <= partition_for_key(str(i).encode(), 3) < 3 for i in range(100))


def test_unkeyed_records_stick_to_one_partition_until_batch_size():
    picks = iter([0, 1, 0, 1])
    sp = StickyPartitioner(batch_size=300, rand=lambda n: next(picks) % n)
    first = sp.partition("t", 3, [0, 1, 2])
    seen = []
    for _ in range(3):
        seen.append(sp.partition("t", 3, [0, 1, 2]))
        sp.on_append("t", 100, 3, [0, 1, 2])
    assert seen == [first] * 3
    assert sp.partition("t", 3, [0, 1, 2]) != first


def test_sticky_partitioner_prefers_partitions_with_a_leader():
    sp = StickyPartitioner(batch_size=10)
    counts = Counter()
    for _ in range(200):
        counts[sp.partition("t", 3, [2])] += 1
        sp.on_append("t", 20, 3, [2])
    assert set(counts) == {2}
