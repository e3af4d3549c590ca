"""`minibroker delete-records` (kafka-delete-records): --offset-json-file, Kafka's output lines."""
from __future__ import annotations

import json

import click

from minibroker.cli.common import bootstrap_option, handle_errors, parse_file, reachable_bootstrap, run_async
from minibroker.client.admin import Admin
from minibroker.client.types import TopicPartition
from minibroker.cli.format import java_exception
from minibroker.errors import KafkaError

def offsets_from_json(text: str) -> dict[TopicPartition, int]:
    """kafka-delete-records' --offset-json-file: {"partitions": [{"topic": T, "partition": N, "offset": O}, ...],
    "version": 1}; ValueError says what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list) or doc.get("version", 1) != 1:
        raise ValueError('expected {"partitions": [{"topic": "...", "partition": N, "offset": O}, ...], "version": 1}')
    out: dict[TopicPartition, int] = {}
    dups: list[str] = []
    for e in doc["partitions"]:
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and type(e.get("partition")) is int
                and type(e.get("offset")) is int):
            raise ValueError(f"partition entry {json.dumps(e)}: expected a string topic, an integer partition "
                             "and an integer offset")
        tp = TopicPartition(e["topic"], e["partition"])
        if tp in out:
            dups.append(str(tp))
        out[tp] = e["offset"]
    if dups:
        raise ValueError(f"Offset json file contains duplicate topic partitions: {', '.join(sorted(set(dups)))}")
    return out


def result_lines(low: dict[TopicPartition, int], errors: dict[TopicPartition, KafkaError]) -> list[str]:
    lines = []
    for tp in sorted(set(low) | set(errors)):
        if tp in low:
            lines.append(f"partition: {tp}\tlow_watermark: {low[tp]}")
        else:
            code = int(errors[tp].code)
            lines.append(f"partition: {tp}\terror: org.apache.kafka.common.errors.{java_exception(code)}")
    return lines


@click.command(name="delete-records")
@bootstrap_option
@click.option("--offset-json-file", type=click.Path(dir_okay=False), required=True,
              help='The offsets below which records go: {"partitions": [{"topic": "orders", "partition": 0, '
                   '"offset": 6}], "version": 1} (offset -1: the high watermark).')
@handle_errors
def delete_records(bootstrap_server: str | None, offset_json_file: str) -> None:
    """Delete records below the given offsets (the log start offset moves up), as kafka-delete-records."""
    offsets = parse_file(offset_json_file, offsets_from_json)
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> None:
        click.echo("Executing records delete operation")
        async with Admin(bootstrap) as admin:
            low, errors = await admin.delete_records(offsets)
        click.echo("Records delete operation completed:")
        for line in result_lines(low, errors):
            click.echo(line)
    run_async(go())
