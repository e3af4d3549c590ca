"""`minibroker leader-election` (kafka-leader-election)."""
from __future__ import annotations

import click

from minibroker.cli.common import bootstrap_option, fail, handle_errors, parse_file, reachable_bootstrap, run_async
from minibroker.cli.format import election_lines, partitions_from_json
from minibroker.client.admin import Admin
from minibroker.client.types import TopicPartition


@click.command(name="leader-election")
@bootstrap_option
@click.option("--election-type", type=click.Choice(["preferred", "unclean"], case_sensitive=False), required=True)
@click.option("--all-topic-partitions", is_flag=True, help="Every partition.")
@click.option("--topic", help="Topic of the partition to elect for (with --partition).")
@click.option("--partition", type=int, help="Partition id (with --topic).")
@click.option("--path-to-json-file", type=click.Path(dir_okay=False),
              help='The partitions to elect for, as kafka-leader-election reads them: '
                   '{"partitions": [{"topic": "orders", "partition": 0}, ...]}.')
@handle_errors
def leader_election(bootstrap_server: str | None, election_type: str, all_topic_partitions: bool,
                    topic: str | None, partition: int | None, path_to_json_file: str | None) -> None:
    """Run a preferred or unclean leader election; prints Kafka's result lines."""
    if all_topic_partitions + bool(topic) + bool(path_to_json_file) != 1:
        fail("One and only one of the following options is required: --topic, --all-topic-partitions, "
             "--path-to-json-file")
    if topic and partition is None:
        fail("Missing required option(s): --partition")
    if partition is not None and not topic:
        fail("Option --partition is only allowed if --topic is used")
    parts: list[TopicPartition] | None
    if path_to_json_file:
        parts = parse_file(path_to_json_file, partitions_from_json)
    else:
        parts = None if all_topic_partitions else [TopicPartition(topic, partition)]  # type: ignore[arg-type]

    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go():
        async with Admin(bootstrap) as admin:
            return await admin.elect_leaders(election_type.lower(), parts)
    lines, failed = election_lines(election_type, run_async(go()))
    for line in lines:
        click.echo(line)
    if failed:
        fail(f"{failed} replica(s) could not be elected")
