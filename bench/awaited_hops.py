"""Where an awaited acks=all record's time goes, hop by hop, from a packet capture (issue 13).

    .venv/bin/python bench/awaited_hops.py                  # 3,000 awaited records, minibroker
    .venv/bin/python bench/awaited_hops.py --ceiling ../shared/bench/replication_ceiling.py

Starts a local 3-broker cluster (no fault proxy), creates an RF=3 topic led by
broker 1, and sends one record at a time with acks=all (as `minibroker bench`'s
awaited figure) while `tcpdump` captures the loopback interface. Each record's
cycle is then cut at its packets, timestamped by the kernel as they are sent:

    produce sent -> the leader's first Fetch answer  (the leader: read, append, wake the followers)
    first -> second Fetch answer                     (the leader answers the other follower)
    second answer -> first follower's next Fetch     (a follower: append, fetch again)
    first -> second follower's next Fetch
    second Fetch -> produce answer                   (the leader: HW moves, the produce answers)
    produce answer -> next produce sent              (the client)

and each hop's median and 90th percentile printed. With --ceiling PATH the
same capture is taken of the replication-ceiling script's awaited case
(`PATH all --cases 0`), so the two can be read side by side. The capture is
in the kernel, so it adds nothing to the processes' own work; it needs root
(or CAP_NET_RAW) and tcpdump.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HOPS = [("produce sent -> 1st Fetch answer", lambda r: r["answers"][0] - r["sent"]),
        ("1st -> 2nd Fetch answer", lambda r: r["answers"][1] - r["answers"][0]),
        ("2nd answer -> 1st next Fetch", lambda r: r["fetches"][0] - r["answers"][1]),
        ("1st -> 2nd next Fetch", lambda r: r["fetches"][1] - r["fetches"][0]),
        ("2nd next Fetch -> produce answer", lambda r: r["done"] - r["fetches"][1])]


def packets(pcap: str) -> list[tuple[float, str, str]]:
    """(time, source, destination) of each packet carrying data."""
    out = subprocess.run(["tcpdump", "-r", pcap, "-n", "-tt"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"(\d+\.\d+) IP (\S+) > (\S+): .* length (\d+)", line)
        if m and int(m.group(4)) > 0:
            found.append((float(m.group(1)), m.group(2), m.group(3).rstrip(":")))
    return found


def cycles(pk: list[tuple[float, str, str]]) -> list[dict]:
    """Each awaited record's packets. The leader's replication endpoint is the one every busy
    follower flow touches (the most common in the six busiest flows); the client's flow goes to
    the leader's host, and is the one whose request-to-answer spans hold two Fetch answers and
    two Fetches (minibroker's client uses another listener than the followers; the ceiling's, the same)."""
    count = collections.Counter((s, d) for _, s, d in pk)
    top = [k for k, _ in count.most_common(6)]
    ends = collections.Counter(e for k in top for e in k)
    leader = ends.most_common(1)[0][0]
    host = leader.rsplit(".", 1)[0]
    best: list[dict] = []
    for (src, dst), _ in count.most_common(8):
        if dst.rsplit(".", 1)[0] == host and src != leader and dst != src:
            rows = _cycles(pk, leader, src, dst)
            if len(rows) > len(best):
                best = rows
    return best


def _cycles(pk: list[tuple[float, str, str]], leader: str, client: str, server: str) -> list[dict]:
    rows: list[dict] = []
    cur: dict | None = None
    for t, s, d in pk:
        if s == client and d == server:
            cur = {"sent": t, "answers": [], "fetches": []}
        elif cur is None:
            continue
        elif s == server and d == client:
            cur["done"] = t
            rows.append(cur)
            cur = None
        elif s == leader:
            cur["answers"].append(t)
        elif d == leader:
            cur["fetches"].append(t)
    return [r for r in rows if len(r["answers"]) == 2 and len(r["fetches"]) == 2]


def report(name: str, rows: list[dict]) -> None:
    def line(label: str, xs: list[float]) -> None:
        xs = sorted(x * 1e6 for x in xs)
        print(f"  {label:34s} p50 {statistics.median(xs):6.0f} us   p90 {xs[int(0.9 * (len(xs) - 1))]:6.0f} us")
    print(f"{name}: {len(rows):,} awaited records")
    for label, fn in HOPS:
        line(label, [fn(r) for r in rows])
    line("produce answer -> next produce", [b["sent"] - a["done"] for a, b in zip(rows, rows[1:], strict=False)])
    line("cycle", [b["sent"] - a["sent"] for a, b in zip(rows, rows[1:], strict=False)])


def capture(path: str) -> subprocess.Popen:
    p = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "-w", path, "--immediate-mode",
                          "tcp and (tcp[tcpflags] & tcp-push != 0)"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(1.0)                     # tcpdump has no readiness signal; it attaches in well under a second
    return p


async def minibroker_run(records: int, pcap: str) -> None:
    from minibroker.client.admin import Admin
    from minibroker.client.producer import Producer
    from minibroker.testing.cluster import LocalCluster
    with tempfile.TemporaryDirectory(prefix="minibroker-hops-") as tmp:
        cluster = LocalCluster.create(tmp + "/cluster", free_ports=True, proxied=False)
        try:
            await cluster.up()
            async with Admin(cluster.bootstrap) as admin:
                await admin.create_topic("hops", -1, -1, {"min.insync.replicas": "2"}, assignments=[[1, 2, 3]])
            async with Producer(cluster.bootstrap, {"acks": "all", "linger.ms": "0"}) as p:
                await p.partitions_for("hops")
                for _ in range(300):
                    await p.send_and_wait("hops", b"a" * 100, partition=0)
                cap = capture(pcap)
                for _ in range(records):
                    await p.send_and_wait("hops", b"a" * 100, partition=0)
                time.sleep(0.2)
                cap.terminate()
                cap.wait()
        finally:
            cluster.destroy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--ceiling", metavar="PATH", help="also capture the replication-ceiling script's awaited case")
    args = ap.parse_args()
    if shutil.which("tcpdump") is None:
        sys.exit("needs tcpdump (apt-get install -y tcpdump) and root")
    from minibroker.cli.common import run_async
    with tempfile.TemporaryDirectory(prefix="minibroker-hops-pcap-") as tmp:
        pcap = os.path.join(tmp, "minibroker.pcap")
        run_async(minibroker_run(args.records, pcap))
        report("minibroker", cycles(packets(pcap)))
        if args.ceiling:
            pcap = os.path.join(tmp, "ceiling.pcap")
            cap = capture(pcap)
            subprocess.run([sys.executable, args.ceiling, "all", "--runs", "1", "--seconds", "3", "--fsync", "0",
                            "--cases", "0"], stdout=subprocess.DEVNULL, check=True)
            cap.terminate()
            cap.wait()
            report("ceiling", cycles(packets(pcap)))


if __name__ == "__main__":
    main()
