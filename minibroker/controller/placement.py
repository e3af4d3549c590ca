"""Replica placement at topic creation: Kafka's AdminUtils algorithm.

Pure functions. `assign_replicas` follows `AdminUtils.assignReplicasToBrokers`
(kafka-semantics §16 "A"): round-robin leaders with a follower shift that
grows after every full round, and a rack-alternating broker list when every
broker has a rack. One deliberate difference: when only some brokers have a
rack, Kafka's AdminUtils (RackAwareMode.Enforced) refuses; we fall back to
rack-unaware placement, as its RackAwareMode.Safe does, because the KRaft
placer also accepts mixed clusters.
"""
from __future__ import annotations

import random
from collections.abc import Mapping


class PlacementError(ValueError):
    """The request cannot be placed; `code_name` is the Kafka error to answer with."""

    def __init__(self, code_name: str, message: str) -> None:
        super().__init__(message)
        self.code_name = code_name


def rack_alternated_brokers(broker_racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered by taking one (lowest id first) from each rack in sorted rack order, in turn."""
    by_rack: dict[str, list[int]] = {}
    for b, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(b)
    racks = sorted(by_rack)
    iters = {r: iter(sorted(by_rack[r])) for r in racks}
    out: list[int] = []
    i = 0
    while len(out) < len(broker_racks):
        nxt = next(iters[racks[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(racks)
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign_replicas(broker_racks: Mapping[int, str | None], num_partitions: int, replication_factor: int, *,
                    fixed_start_index: int = -1, start_partition_id: int = 0,
                    rng: random.Random | None = None) -> list[list[int]]:
    """Replica lists for partitions start_partition_id.. (first = preferred leader).

    `fixed_start_index >= 0` makes it deterministic (start index = shift =
    that value), as in Kafka's tests; otherwise both are drawn from `rng`.
    Raises PlacementError on a non-positive count or RF > number of brokers.
    """
    if num_partitions <= 0:
        raise PlacementError("INVALID_PARTITIONS", "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise PlacementError("INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0.")
    if replication_factor > len(broker_racks):
        raise PlacementError("INVALID_REPLICATION_FACTOR",
                             f"Replication factor: {replication_factor} larger than available brokers: "
                             f"{len(broker_racks)}.")
    rng = rng or random.Random()
    rack_aware = all(r for r in broker_racks.values())
    if rack_aware:
        racks: dict[int, str] = {b: r for b, r in broker_racks.items() if r}
        brokers = rack_alternated_brokers(racks)
        num_racks = len(set(racks.values()))
    else:
        brokers = sorted(broker_racks)
        racks = {}
        num_racks = 1
    n = len(brokers)
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    pid = max(0, start_partition_id)
    out: list[list[int]] = []
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        replicas = [brokers[first]]
        if not rack_aware:
            replicas += [brokers[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            racks_used = {racks[brokers[first]]}
            used = {brokers[first]}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    b = brokers[_replica_index(first, shift * num_racks, k, n)]
                    k += 1
                    rack = racks[b]
                    if (rack not in racks_used or len(racks_used) == num_racks) and \
                            (b not in used or len(used) == n):
                        replicas.append(b)
                        racks_used.add(rack)
                        used.add(b)
                        break
        out.append(replicas)
        pid += 1
    return out
