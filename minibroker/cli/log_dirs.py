"""`minibroker log-dirs --describe` (kafka-log-dirs): each broker's log directory and its replicas' sizes.

Thin by rule: options and Kafka's output (two lines, then one JSON document);
the work is Admin.describe_log_dirs (DescribeLogDirs, API 35, to each broker).
"""
from __future__ import annotations

import json
import sys

import click

from minibroker.cli.common import bootstrap_option, fail, handle_errors, parse_ids, reachable_bootstrap, run_async
from minibroker.client.admin import Admin, LogDirDescription
from minibroker.errors import error_name


def log_dirs_json(described: dict[int, list[LogDirDescription]], topics: set[str] | None) -> str:
    """LogDirsCommand.formatAsJson, keys in Kafka's order."""
    return json.dumps({"version": 1, "brokers": [
        {"broker": b, "logDirs": [
            {"logDir": d.path, "error": None if not d.error else error_name(d.error), "partitions": [
                {"partition": str(tp), "size": r.size, "offsetLag": r.offset_lag, "isFuture": r.is_future}
                for tp, r in sorted(d.replicas.items()) if topics is None or tp.topic in topics]}
            for d in dirs]}
        for b, dirs in described.items()]}, separators=(",", ":"))


@click.command(name="log-dirs")
@bootstrap_option
@click.option("--describe", is_flag=True, help="Describe the brokers' log directories (the only action).")
@click.option("--broker-list", help="The brokers to ask, such as 1,2,3 (default: every broker).")
@click.option("--topic-list", help="Only these topics' replicas, such as orders,audit (default: all).")
@handle_errors
def log_dirs(bootstrap_server: str | None, describe: bool, broker_list: str | None, topic_list: str | None) -> None:
    """Each broker's log directory and the size of every replica in it, as kafka-log-dirs --describe."""
    if not describe:
        fail("Command must include exactly one action: --describe")
    try:
        wanted = parse_ids(broker_list, "--broker-list") if broker_list else None
    except ValueError as exc:
        fail(f"Error: {exc}")
    topics = [t for t in topic_list.split(",") if t] if topic_list else None
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> int:
        async with Admin(bootstrap) as admin:
            existing = sorted(await admin.brokers())
            if wanted is not None:
                unknown = [b for b in wanted if b not in existing]
                if unknown:
                    click.echo(f"ERROR: The given brokers do not exist from --broker-list: "
                               f"{','.join(map(str, unknown))}. Current existent brokers: "
                               f"{','.join(map(str, existing))}", err=True)
                    return 1
            asked = wanted if wanted is not None else existing
            click.echo("Querying brokers for log directories information")
            described = await admin.describe_log_dirs(asked)
            click.echo(f"Received log directory information from brokers {','.join(map(str, asked))}")
            click.echo(log_dirs_json(described, set(topics) if topics is not None else None))
            return 0
    sys.exit(run_async(go()))
