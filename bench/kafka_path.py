"""CPU a record of each process: minibroker's producer against confluent-kafka through the Kafka listener (issue 13).

    .venv/bin/python bench/kafka_path.py                    # 1,000,000 records, each producer twice, alternating
    .venv/bin/python bench/kafka_path.py --records 500000 --rounds 3

Starts a local 3-broker cluster (no fault proxy) and, in alternating rounds, writes
--records 100-byte records with acks=all to a fresh RF=3 topic led by broker 1
(min.insync.replicas=2) with minibroker's producer (`minibroker bench produce`'s
batched run) and with confluent-kafka through the Kafka listener (its `confluent-kafka
acks=all batched` run), both with linger.ms=5 and batch.size=262144: minibroker's first
in odd rounds, confluent-kafka's first in even ones (a later run on this VM is slower:
read rounds in pairs), each topic deleted after its run so that no run competes with
the kernel writing an earlier one's data back.
Prints each run's rate, the records per batch the leader stored, and the CPU (user +
system) each process spent per record: the client (this process, librdkafka's
threads included), the leader and the two followers. Alternating rounds on one
cluster show what the Kafka listener costs the leader beside the msgpack listener
under the same load; compare two source trees by running it from each.
"""
from __future__ import annotations

import argparse
import glob
import resource
import struct
import tempfile

from minibroker.bench import confluent
from minibroker.bench.partitions import cpu_s
from minibroker.bench.produce import produce_batched
from minibroker.cli.common import run_async
from minibroker.client.admin import Admin
from minibroker.testing.cluster import LocalCluster

CFG = {"linger.ms": "5", "batch.size": "262144", "max.request.size": "4194304"}
_LENGTH = struct.Struct(">i")


def batches_in(broker_dir: str, topic: str) -> int:
    """Record batches in partition 0's first segment file on one broker (each: offset, length, then length bytes)."""
    n = 0
    for path in sorted(glob.glob(f"{broker_dir}/**/{topic}-0/*.log", recursive=True))[:1]:
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = _LENGTH.unpack_from(data, pos + 8)
            n += 1
            pos += 12 + length
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not confluent.available():
        print("confluent_kafka is not importable")
        return 1
    with tempfile.TemporaryDirectory(prefix="minibroker-kafka-path-") as tmp:
        cluster = LocalCluster.create(tmp + "/cluster", free_ports=True, proxied=False)
        try:
            run_async(cluster.up())
            pids = {b: cluster.pids[f"broker-{b}"] for b in (1, 2, 3)}

            async def create(topic: str) -> None:
                async with Admin(cluster.bootstrap) as admin:
                    await admin.create_topic(topic, -1, -1, {"min.insync.replicas": "2"}, assignments=[[1, 2, 3]])

            async def delete(topic: str) -> None:
                async with Admin(cluster.bootstrap) as admin:
                    await admin.delete_topics([topic])

            n = args.records
            kinds = ("minibroker", "confluent-kafka")
            for r in range(args.rounds):
                for kind in kinds if r % 2 == 0 else kinds[::-1]:
                    topic = f"path-{kind}-{r}"
                    run_async(create(topic))
                    before = {b: cpu_s(p) for b, p in pids.items()}
                    mine = resource.getrusage(resource.RUSAGE_SELF)
                    if kind == "minibroker":
                        acked, _failed, secs = run_async(produce_batched(cluster.bootstrap, topic, n, 100, CFG))
                    else:
                        acked, _failed, secs = confluent.produce_batched(cluster.kafka_bootstrap, topic, n, 100, CFG)
                    now = resource.getrusage(resource.RUSAGE_SELF)
                    after = {b: cpu_s(p) for b, p in pids.items()}
                    client = now.ru_utime + now.ru_stime - mine.ru_utime - mine.ru_stime
                    stored = batches_in(f"{cluster.data_dir}/broker-1", topic)
                    per = "  ".join(f"broker {b} {(after[b] - before[b]) / n * 1e6:.2f}" for b in sorted(pids))
                    print(f"{kind:16s} {acked / secs:>11,.0f} records/s, {n / max(stored, 1):,.0f} records a batch; "
                          f"CPU us a record: client {client / n * 1e6:.2f}  {per}", flush=True)
                    run_async(delete(topic))
        finally:
            cluster.down(timeout_s=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
