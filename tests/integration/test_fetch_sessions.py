"""Replica fetch sessions (KIP-227) on a live cluster: once a follower is caught up, its
Fetches to the leader name no partition (the leader answers only news), and new data
still flows through the session."""
import pytest

from minibroker.client import Admin, Producer
from minibroker.testing.fixtures import shared_cluster  # noqa: F401
from minibroker.testing.wait import until

pytestmark = pytest.mark.cluster

PARTITIONS = 20


async def test_an_idle_follower_fetches_in_a_session_naming_no_partition(shared_cluster):
    c = shared_cluster
    topic = "sessions"
    async with Admin(c.bootstrap) as admin:
        await admin.create_topic(topic, assignments=[[1, 2, 3]] * PARTITIONS)

        async def fetcher_of_2() -> dict | None:
            status = await admin.replica_status(c.broker_address(2))
            for f in status["fetchers"]:
                if f["leader_id"] == 1 and f["partitions"] >= PARTITIONS and f["session_id"] and \
                        f["last_named"] == 0:
                    return f
            return None
        idle = await until(fetcher_of_2, timeout_s=30, what="broker 2's idle Fetches to broker 1 in a session")
        leader = await admin.replica_status(c.broker_address(1))
        session = next(s for s in leader["fetch_sessions"] if s["replica_id"] == 2)
        assert session["session_id"] == idle["session_id"] and session["partitions"] >= PARTITIONS

        async with Producer(c.bootstrap, {"acks": "all"}) as prod:
            for p in range(PARTITIONS):
                await prod.send_and_wait(topic, b"v%d" % p, partition=p)     # acks=all: through the session

        async def caught_up() -> bool:
            status = await admin.replica_status(c.broker_address(2), [topic])
            return all(e["leo"] == 1 and e["hw"] == 1 for e in status["partitions"])
        await until(caught_up, timeout_s=30, what="broker 2 holding and knowing the HW of every record")
        after = next(f for f in (await admin.replica_status(c.broker_address(2)))["fetchers"] if f["leader_id"] == 1)
        assert after["session_id"] == idle["session_id"], "the session lasted through the writes"
