"""The end-to-end figure on a real cluster: a paced producer here, the consumer in its own process."""
import time

import pytest

from minibroker.bench.e2e import SAMPLE_EVERY, end_to_end
from minibroker.bench.partitions import runqueue_wait
from minibroker.client import Admin
from minibroker.testing.fixtures import shared_cluster  # noqa: F401

@pytest.mark.cluster
async def test_every_paced_record_comes_back_and_those_after_the_warm_up_are_timed(shared_cluster):
    async with Admin(shared_cluster.bootstrap) as admin:
        await admin.create_topic("bench-e2e", 1, 3, {"min.insync.replicas": "2"})
    r = await end_to_end(shared_cluster.bootstrap, "bench-e2e", rate=2000, seconds=1.0, size=100)
    assert (r.sent, r.failed, r.received) == (2000, 0, 2000)
    # every eighth record by offset is timed; those stamped before the warm-up's end (a fifth of the
    # run here) are read but not timed
    assert 0 < len(r.latencies_ms) <= r.sent // SAMPLE_EVERY
    assert all(ms > 0 for ms in r.latencies_ms)
    # both processes slept between ticks and polls, so each was put back on a core many times
    assert r.producer_wakeups > 0 and r.consumer_wakeups > 0
    assert r.producer_wait_s >= 0 and r.consumer_wait_s >= 0
    assert r.wait_line().startswith("waiting for a core: producer ")


def test_a_process_that_sleeps_is_put_back_on_a_core_each_time():
    _, before = runqueue_wait("self")
    for _ in range(3):
        time.sleep(0.002)                 # blocks: the thread leaves its core and is woken
    wait_s, after = runqueue_wait("self")
    assert after >= before + 3 and wait_s >= 0
