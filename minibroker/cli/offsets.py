"""`minibroker offsets` (kafka-get-offsets): topic:partition:offset lines.

Partitions are chosen as GetOffsetShell chooses them (see offset_spec). Each
topic's lines are printed, in order, as soon as that topic's partitions have
answered, so a slow or offline partition delays only its own topic; a
partition that fails (no leader, a leader that does not answer) gets a
"Skip getting offsets" line on stderr and the rest are still printed.
"""
from __future__ import annotations

import asyncio
import itertools

import click

from minibroker.cli.common import bootstrap_option, fail, handle_errors, reachable_bootstrap, run_async
from minibroker.cli.format import offset_skip_line, offsets_lines
from minibroker.cli.offset_spec import SpecError, parse_time, select_partitions
from minibroker.client.admin import Admin
from minibroker.client.offsets import OffsetResult
from minibroker.client.types import TopicPartition
from minibroker.errors import KafkaError

# How long one partition's leader may take to answer before it is skipped.
PARTITION_TIMEOUT_MS = 5000


@click.command()
@bootstrap_option
@click.option("--topic", help="Topic name or regular expression (whole-name match) [default: every topic].")
@click.option("--partitions", help="Comma-separated partition ids (with --topic) [default: all].")
@click.option("--topic-partitions", help="Comma-separated patterns TOPIC-REGEX[:N|:N-M|:N-|:-M] "
                                         "(M exclusive; no TOPIC-REGEX: every topic).")
@click.option("--time", "time_", default="-1", show_default=True,
              help="-1/latest (the high watermark), -2/earliest (the log start), -3/max-timestamp, "
                   "-4/earliest-local, or a timestamp in ms (the first offset at or after it).")
@handle_errors
def offsets(bootstrap_server: str | None, topic: str | None, partitions: str | None, topic_partitions: str | None,
            time_: str) -> None:
    """Print TOPIC:PARTITION:OFFSET for each matching partition, sorted by topic then partition."""
    try:
        ts = parse_time(time_)
    except SpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--time") from None
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> int:
        async with Admin(bootstrap) as admin:
            tds = await admin.describe_topics(None)
            try:
                tps = select_partitions({td.name: [p.partition for p in td.partitions] for td in tds}, topic=topic,
                                        partitions=partitions, topic_partitions=topic_partitions)
            except SpecError as exc:
                fail(f"Error: {exc}")
            by_topic = [list(g) for _, g in itertools.groupby(tps, key=lambda tp: tp.topic)]
            tasks = [asyncio.ensure_future(admin.partition_offsets(group, ts, timeout_ms=PARTITION_TIMEOUT_MS))
                     for group in by_topic]
            skipped = 0
            try:
                for group, task in zip(by_topic, tasks, strict=True):
                    answers, errors = await task
                    skipped += _print(group, answers, errors)
            finally:
                for t in tasks:
                    t.cancel()
            return skipped
    run_async(go())


def _print(group: list[TopicPartition], answers: dict[TopicPartition, OffsetResult],
           errors: dict[TopicPartition, KafkaError]) -> int:
    for tp in group:
        if tp in errors:
            click.echo(offset_skip_line(tp, errors[tp]), err=True)
    found = {tp.partition: answers[tp].offset for tp in group if tp in answers and answers[tp].offset >= 0}
    for line in offsets_lines(group[0].topic, found):
        click.echo(line)
    return sum(tp in errors for tp in group)
