"""`minibroker offsets` (kafka-get-offsets): topic:partition:offset lines."""
from __future__ import annotations

import click

from minibroker.cli.common import bootstrap_option, handle_errors, resolve_bootstrap, run_async
from minibroker.cli.format import offsets_lines
from minibroker.client.admin import Admin
from minibroker.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

_TIMES = {"latest": LATEST_TIMESTAMP, "-1": LATEST_TIMESTAMP, "earliest": EARLIEST_TIMESTAMP, "-2": EARLIEST_TIMESTAMP}


@click.command()
@bootstrap_option
@click.option("--topic", help="Topic [default: every topic].")
@click.option("--partitions", help="Comma-separated partition ids [default: all].")
@click.option("--time", "time_", default="latest", show_default=True,
              help="latest (-1: the high watermark) or earliest (-2: the log start offset).")
@handle_errors
def offsets(bootstrap_server: str | None, topic: str | None, partitions: str | None, time_: str) -> None:
    """Print TOPIC:PARTITION:OFFSET for each partition (latest = the high watermark)."""
    ts = _TIMES.get(time_.lower())
    if ts is None:
        raise click.BadParameter(f"{time_!r}: expected latest, earliest, -1 or -2", param_hint="--time")
    try:
        parts = [int(p) for p in partitions.split(",")] if partitions else None
    except ValueError:
        raise click.BadParameter(f"{partitions!r}: expected comma-separated integers", param_hint="--partitions") from None

    async def go() -> list[str]:
        async with Admin(resolve_bootstrap(bootstrap_server)) as admin:
            names = [topic] if topic else await admin.list_topics()
            lines: list[str] = []
            for name in names:
                lines += offsets_lines(name, await admin.topic_offsets(name, ts, parts))
            return lines
    for line in run_async(go()):
        click.echo(line)
