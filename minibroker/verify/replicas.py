"""Replica logs read from disk, for the byte-for-byte comparison (I2).

Owns: reading a partition directory's segment files *read-only* (never
through PartitionLog, which would recover, truncate or rewrite files under
a running broker) into `(base_offset, last_offset, leader_epoch, bytes)`
per batch, stopping at a torn or half-written tail; finding where a value
sits in the files (to tell "not on any disk" from "the consumer missed
it"); and waiting until every replica's LEO equals its leader's (through
ReplicaStatus) before comparing.

Must not know what was produced or acknowledged.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable

from minibroker import clock
from minibroker.client.admin import Admin
from minibroker.errors import KafkaError
from minibroker.records import batch_crc_ok, check_header, iter_records, parse_header, HEADER_SIZE
from minibroker.storage.manager import partition_dir_name
from minibroker.storage.segment import parse_segment_name

Batch = tuple[int, int, int, bytes]        # base_offset, last_offset, leader_epoch, batch bytes


def read_segment_batches(path: str) -> tuple[list[Batch], str | None]:
    """Every whole, sound batch of one `.log` file, and what stopped the scan early (or None)."""
    with open(path, "rb") as f:
        data = f.read()
    out: list[Batch] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < HEADER_SIZE:
            return out, f"{os.path.basename(path)}: {len(data) - pos} trailing bytes (torn header)"
        h = parse_header(data, pos)
        problem = check_header(h)
        if problem:
            return out, f"{os.path.basename(path)} byte {pos}: {problem}"
        if pos + h.size > len(data):
            return out, f"{os.path.basename(path)} byte {pos}: batch runs past the end of the file"
        if not batch_crc_ok(data, pos, h.size):
            return out, f"{os.path.basename(path)} byte {pos}: CRC mismatch"
        out.append((h.base_offset, h.last_offset, h.leader_epoch, bytes(data[pos:pos + h.size])))
        pos += h.size
    return out, None


def read_partition(directory: str, upto: int | None = None) -> list[Batch]:
    """The batches of a partition directory in offset order (batches ending at or above
    `upto` left out). A missing directory reads as no batches."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    segs = sorted((b, n) for n in names if (b := parse_segment_name(n)) is not None)
    out: list[Batch] = []
    for _, name in segs:
        batches, _problem = read_segment_batches(os.path.join(directory, name))
        out.extend(batches)
    if upto is not None:
        out = [b for b in out if b[1] < upto]
    return out


def find_values(directory: str, values: Iterable[str]) -> dict[str, int]:
    """Where (offset) each of `values` sits in a partition directory's files, for those found."""
    wanted = set(values)
    found: dict[str, int] = {}
    if not wanted:
        return found
    for base, _last, _epoch, data in read_partition(directory):
        for r in iter_records(data, min_offset=base):
            if r.value is not None:
                v = r.value.decode(errors="replace")
                if v in wanted:
                    found[v] = r.offset
    return found


@dataclass(frozen=True)
class ReplicaDirs:
    """Where each broker keeps its partitions: broker id -> log dir."""
    dirs: dict[int, str]

    def partition_dir(self, broker: int, topic: str, partition: int) -> str:
        return os.path.join(self.dirs[broker], partition_dir_name(topic, partition))

    @classmethod
    def of_local_cluster(cls, data_dir: str) -> ReplicaDirs:
        from minibroker.testing.cluster import LocalCluster
        c = LocalCluster.load(data_dir)
        return cls({b: c.layout.broker_config(b)["log.dirs"].split(",")[0] for b in c.broker_ids})


async def replica_leos(admin: Admin, addresses: dict[int, tuple[str, int]], topic: str
                       ) -> dict[int, dict[int, dict[str, Any]]]:
    """partition -> broker -> its ReplicaStatus entry (brokers that do not answer are left out)."""
    out: dict[int, dict[int, dict[str, Any]]] = {}

    async def one(b: int, addr: tuple[str, int]) -> None:
        try:
            st = await asyncio.wait_for(admin.replica_status(addr, [topic]), 3)
        except (TimeoutError, KafkaError, OSError):
            return
        for p in st.get("partitions", ()):
            if p.get("topic") == topic:
                out.setdefault(p["partition"], {})[b] = p
    await asyncio.gather(*(one(b, a) for b, a in addresses.items()))
    return out


def converged(status: dict[int, dict[int, dict[str, Any]]], partitions: int,
              replicas: dict[int, list[int]]) -> tuple[bool, str]:
    """Every partition has one leader whose HW equals its LEO, and every assigned
    replica answered with that LEO. Returns (done, what is still missing)."""
    for p in range(partitions):
        st = status.get(p, {})
        leaders = [(b, s) for b, s in st.items() if s.get("role") == "leader"]
        if len(leaders) != 1:
            return False, f"partition {p}: {len(leaders)} brokers think they lead"
        lb, ls = leaders[0]
        if ls["hw"] != ls["leo"]:
            return False, f"partition {p}: leader {lb} HW {ls['hw']} < LEO {ls['leo']}"
        for b in replicas.get(p, []):
            s = st.get(b)
            if s is None:
                return False, f"partition {p}: broker {b} did not answer"
            if s["leo"] != ls["leo"] or s.get("leader_epoch") != ls.get("leader_epoch"):
                return False, (f"partition {p}: broker {b} LEO {s['leo']} epoch {s.get('leader_epoch')}, "
                               f"leader {lb} LEO {ls['leo']} epoch {ls.get('leader_epoch')}")
    return True, ""


async def wait_converged(admin: Admin, addresses: dict[int, tuple[str, int]], topic: str, partitions: int,
                         replicas: dict[int, list[int]], timeout_s: float = 30.0) -> tuple[bool, str, dict]:
    """Until `converged` (returns (True, "", status)) or the deadline (False, why, last status)."""
    deadline = clock.monotonic() + timeout_s
    while True:
        status = await replica_leos(admin, addresses, topic)
        ok, why = converged(status, partitions, replicas)
        if ok or clock.monotonic() > deadline:
            return ok, why, status
        await asyncio.sleep(0.1)
