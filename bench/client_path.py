"""The producer client's own work per record, for callgrind's instruction counts.

Drives minibroker's Producer against a real 3-broker cluster and exits:
--awaited N sends N single records one at a time, exactly as `minibroker
bench`'s awaited line (`send_and_wait(topic, value, partition=0)`, acks=all,
linger.ms=0, idempotence on); --batched N sends N records with send() as its
batched line (linger.ms=5, batch.size=262144, acks=all) and flushes.

Under callgrind only this process (the client) is counted, since child
processes are not traced; the brokers run at full speed. Startup cancels out
of the difference of two runs:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python bench/client_path.py --awaited 1500 2>&1 | grep Collected
    (same with --awaited 500); per record = (count(1500) - count(500)) / 1000

The cluster's startup polls, so its cost varies a little from run to run. For
steadier counts start one cluster apart and point the driver at it:

    .venv/bin/python bench/client_path.py --serve /tmp/cp &     # prints the bootstrap; SIGTERM stops it
    valgrind ... bench/client_path.py --bootstrap HOST:PORT --awaited 1500

Run it with PYTHONPATH pointing at another tree to compare two trees.
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import tempfile

from minibroker.bench.produce import produce_batched
from minibroker.cli.common import run_async
from minibroker.client.admin import Admin
from minibroker.client.producer import Producer
from minibroker.errors import ErrorCode, KafkaError
from minibroker.testing.cluster import LocalCluster

AWAITED_TOPIC = "client-path-awaited"
BATCHED_TOPIC = "client-path-batched"


async def create_topics(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        for topic in (AWAITED_TOPIC, BATCHED_TOPIC):
            try:
                await admin.create_topic(topic, -1, -1, {"min.insync.replicas": "2"}, assignments=[[1, 2, 3]])
            except KafkaError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise


async def awaited(bootstrap: str, records: int, size: int, warm: int) -> None:
    value = b"a" * size
    async with Producer(bootstrap, {"acks": "all", "linger.ms": "0"}) as p:
        await p.partitions_for(AWAITED_TOPIC)
        for _ in range(warm + records):
            await p.send_and_wait(AWAITED_TOPIC, value, partition=0)


async def drive(bootstrap: str, a: argparse.Namespace) -> None:
    if a.awaited:
        await awaited(bootstrap, a.awaited, a.size, a.warm)
    if a.batched:
        acked, failed, _ = await produce_batched(
            bootstrap, BATCHED_TOPIC, a.batched, a.size,
            {"linger.ms": "5", "batch.size": "262144", "max.request.size": "4194304"})
        assert acked == a.batched and not failed, (acked, failed)


async def main(a: argparse.Namespace) -> None:
    if a.bootstrap:
        await drive(a.bootstrap, a)
        return
    with tempfile.TemporaryDirectory(prefix="minibroker-client-path-") as tmp:
        cluster = LocalCluster.create(a.serve or tmp + "/cluster", free_ports=True, proxied=False)
        try:
            await cluster.up()
            await create_topics(cluster.bootstrap)
            if a.serve:
                print(cluster.bootstrap, flush=True)
                stop = asyncio.Event()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    asyncio.get_running_loop().add_signal_handler(sig, stop.set)
                await stop.wait()
            await drive(cluster.bootstrap, a)
        finally:
            cluster.destroy()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--awaited", type=int, default=0, metavar="N", help="N records, one send_and_wait at a time")
    ap.add_argument("--batched", type=int, default=0, metavar="N", help="N records with send(), then flush")
    ap.add_argument("--warm", type=int, default=50, help="awaited records sent first (connections, caches)")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--bootstrap", help="use this running cluster (made by --serve) instead of starting one")
    ap.add_argument("--serve", metavar="DIR", help="start a cluster in DIR, print its bootstrap, stop on SIGTERM")
    run_async(main(ap.parse_args()))
