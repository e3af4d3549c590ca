"""Failover gap: how long acks=all writes stall when the partition leader is SIGKILLed.

One producer task writes one record at a time (send, await the acks=all answer,
again) to a fresh RF=3 topic (min.insync.replicas=2). After a steady second the
leader's process gets SIGKILL; the gap is the time from the kill until the first
write *sent after the kill* is acknowledged (so it includes that write's own round
trip, about a millisecond, and never counts an answer the old leader sent before it
died). The controller moves the leadership once the dead broker's session expires
(broker.session.timeout.ms), so that is the floor. The broker is started again
afterwards and the bench waits until it is back in the ISR.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from minibroker.bench.catchup import wait_isr
from minibroker.client.admin import Admin
from minibroker.client.producer import Producer
from minibroker.config import DEFAULTS
from minibroker.errors import KafkaError
from minibroker.testing.cluster import LocalCluster

PRODUCER_CFG = {"acks": "all", "linger.ms": "0", "retry.backoff.ms": "20", "retry.backoff.max.ms": "100",
                "reconnect.backoff.ms": "20", "reconnect.backoff.max.ms": "100", "delivery.timeout.ms": "120000"}


@dataclass
class Failover:
    gap_ms: float
    leader: int
    session_timeout_ms: int
    writes_before: int
    errors: int


def session_timeout_ms(cluster: LocalCluster) -> int:
    """broker.session.timeout.ms as the cluster's controller runs it."""
    return int(cluster.layout.controller_config().get("broker.session.timeout.ms",
                                                      DEFAULTS["broker.session.timeout.ms"]))


async def failover_gap(cluster: LocalCluster, admin: Admin, topic: str, *, size: int = 100,
                       steady_s: float = 1.0, timeout_s: float = 120.0) -> Failover:
    await admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    (td,) = await admin.describe_topics([topic])
    leader = td.partitions[0].leader
    if leader is None:
        raise RuntimeError(f"{topic} has no leader")
    value = b"f" * size
    kill_at: float | None = None
    recovered: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    writes = errors = 0
    stop = False

    async def load(p: Producer) -> None:
        nonlocal writes, errors
        while not stop:
            sent = time.perf_counter()
            try:
                await p.send_and_wait(topic, value, partition=0)
            except KafkaError:
                errors += 1
                await asyncio.sleep(0.01)
                continue
            done = time.perf_counter()
            if kill_at is None:
                writes += 1
            elif sent >= kill_at and not recovered.done():
                recovered.set_result(done)

    try:
        async with Producer(cluster.bootstrap, PRODUCER_CFG) as p:
            await p.partitions_for(topic)
            task = asyncio.ensure_future(load(p))
            await asyncio.sleep(steady_s)
            if task.done():
                task.result()
            kill_at = time.perf_counter()
            cluster.kill(leader)
            try:
                done_at = await asyncio.wait_for(asyncio.shield(recovered), timeout_s)
            finally:
                stop = True
                await asyncio.wait_for(task, 30)
    finally:
        if leader in cluster.broker_ids and not cluster.pids.get(cluster.layout.broker(leader).name):
            cluster.start_broker(leader)
        await cluster.wait_running(brokers=[leader])
        await wait_isr(admin, topic, set(td.partitions[0].replicas))
    assert kill_at is not None
    return Failover((done_at - kill_at) * 1000, leader, session_timeout_ms(cluster), writes, errors)
