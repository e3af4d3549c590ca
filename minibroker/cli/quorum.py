"""`minibroker metadata-quorum describe --status|--replication` (kafka-metadata-quorum).

minibroker has one controller: it is the quorum's only voter and its leader
(epoch = its number of starts, from quorum-state), its metadata log end is the
high watermark, and the brokers are observers at the offsets of their last
heartbeats. The values are real; the quorum is simply of one.
"""
from __future__ import annotations

from typing import Any

import click

from minibroker.cli.common import bootstrap_option, fail, handle_errors, reachable_bootstrap, run_async
from minibroker.client.admin import Admin


def status_lines(q: dict[str, Any]) -> list[str]:
    """kafka-metadata-quorum describe --status."""
    hw = q["high_watermark"]
    voters = q.get("voters", [])
    lag = max((hw - v["log_end_offset"] for v in voters), default=0)
    laggard = max(voters, key=lambda v: hw - v["log_end_offset"], default=None)
    if laggard is None or laggard["replica_id"] == q["leader_id"]:
        lag_time = 0
    elif laggard["last_caught_up_timestamp"] >= 0:
        lag_time = now_of(voters, q["leader_id"]) - laggard["last_caught_up_timestamp"]
    else:
        lag_time = -1
    rows = [("ClusterId", q.get("cluster_id", "")), ("LeaderId", q["leader_id"]), ("LeaderEpoch", q["leader_epoch"]),
            ("HighWatermark", hw), ("MaxFollowerLag", lag), ("MaxFollowerLagTimeMs", lag_time),
            ("CurrentVoters", "[" + ",".join(str(v["replica_id"]) for v in voters) + "]"),
            ("CurrentObservers", "[" + ",".join(str(o["replica_id"]) for o in q.get("observers", [])) + "]")]
    return [f"{k + ':':<24}{v}" for k, v in rows]


def now_of(voters: list[dict[str, Any]], leader: int) -> int:
    return next((v["last_caught_up_timestamp"] for v in voters if v["replica_id"] == leader), -1)


def replication_lines(q: dict[str, Any]) -> list[str]:
    """kafka-metadata-quorum describe --replication: one row per voter and observer."""
    hw = q["high_watermark"]
    header = ("NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status")
    rows = [header]
    for kind, entries in (("Voter", q.get("voters", [])), ("Observer", q.get("observers", []))):
        for e in entries:
            status = "Leader" if kind == "Voter" and e["replica_id"] == q["leader_id"] else kind
            leo = e["log_end_offset"]
            rows.append((str(e["replica_id"]), str(leo), str(hw - leo if leo >= 0 else -1),
                         str(e["last_fetch_timestamp"]), str(e["last_caught_up_timestamp"]), status))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["\t".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


@click.group(name="metadata-quorum")
def metadata_quorum() -> None:
    """Describe the metadata quorum (kafka-metadata-quorum)."""


@metadata_quorum.command()
@bootstrap_option
@click.option("--status", is_flag=True, help="Leader, epoch, high watermark, follower lag, voters and observers.")
@click.option("--replication", is_flag=True, help="Each voter's and observer's log end offset, lag and timestamps.")
@handle_errors
def describe(bootstrap_server: str | None, status: bool, replication: bool) -> None:
    """Print the quorum's status (--status) or replication state (--replication)."""
    if status == replication:
        fail("One of --status or --replication must be specified with describe sub-command")
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> dict[str, Any]:
        async with Admin(bootstrap) as admin:
            return await admin.describe_quorum()
    q = run_async(go())
    for line in status_lines(q) if status else replication_lines(q):
        click.echo(line)
