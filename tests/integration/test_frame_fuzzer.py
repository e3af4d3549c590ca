"""A bounded, seeded frame fuzzer against a live cluster: no hostile frame gets
UNKNOWN_SERVER_ERROR, no broker dies, and the acknowledged data is intact."""
from __future__ import annotations

import asyncio
import random

import pytest

from minibroker.client import Admin, Producer
from minibroker.protocol.api import LATEST_TIMESTAMP
from minibroker.client import TopicPartition
from minibroker.testing.fixtures import shared_cluster  # noqa: F401
from minibroker.testing.fuzz import FuzzStats, fuzz_connection

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("seed", [1, 2])
async def test_seeded_hostile_frames_get_no_server_error_and_lose_nothing(shared_cluster, seed):
    c = shared_cluster
    async with Admin(c.bootstrap) as admin:
        await admin.create_topic("fuzz", assignments=[[1, 2, 3]], if_not_exists=True)
    async with Producer(c.bootstrap, {"acks": "all"}) as p:
        await p.send_and_wait("fuzz", b"before")
    async with Admin(c.bootstrap) as admin:
        before = (await admin.list_offsets({TopicPartition("fuzz", 0): LATEST_TIMESTAMP}))
    rng = random.Random(seed)
    stats = FuzzStats()
    for _ in range(10):
        batch = [fuzz_connection(c.layout.broker(b).host, c.layout.broker(b).port, random.Random(rng.random()),
                                 stats, burst=50, read_timeout_s=1.0) for b in (1, 2, 3)]
        await asyncio.gather(*batch)
    assert stats.frames >= 200 and stats.crashes == 0, stats
    for name in c.process_names():
        assert c._alive(name), f"{name} died"
    async with Producer(c.bootstrap, {"acks": "all"}) as p:
        await p.send_and_wait("fuzz", b"after")
    async with Admin(c.bootstrap) as admin:
        after = await admin.list_offsets({TopicPartition("fuzz", 0): LATEST_TIMESTAMP})
    tp = TopicPartition("fuzz", 0)
    assert after[tp].offset == before[tp].offset + 1
