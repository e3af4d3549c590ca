"""`minibroker topics create|list|describe|alter|delete` (kafka-topics)."""
from __future__ import annotations

import asyncio
import dataclasses

import click

from minibroker.cli.common import bootstrap_option, fail, handle_errors, parse_kv, reachable_bootstrap, run_async
from minibroker.cli.format import describe_lines
from minibroker.client.admin import Admin
from minibroker.dynamic_config import ResourceType
from minibroker.errors import ErrorCode, KafkaError

REASSIGNMENTS_MS = 3000     # describe's wait for the controller's list of moves in progress (Adding/Removing Replicas)


@click.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics (kafka-topics)."""


def _assignment(spec: str | None) -> list[list[int]] | None:
    if not spec:
        return None
    try:
        return [[int(x) for x in part.split(":")] for part in spec.split(",")]
    except ValueError:
        raise click.BadParameter(f"{spec!r}: expected broker lists like 1:2:3,2:3:1",
                                 param_hint="--replica-assignment") from None


@topics.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic name.")
@click.option("--partitions", type=int, default=-1, show_default="broker's num.partitions")
@click.option("--replication-factor", type=int, default=-1, show_default="broker's default.replication.factor")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config override (repeatable).")
@click.option("--replica-assignment", help="Explicit replicas per partition: 1:2:3,2:3:1,...")
@click.option("--if-not-exists", is_flag=True, help="Succeed quietly if the topic exists.")
@handle_errors
def create(bootstrap_server: str | None, topic: str, partitions: int, replication_factor: int,
           configs: tuple[str, ...], replica_assignment: str | None, if_not_exists: bool) -> None:
    """Create a topic; prints `Created topic NAME.` as kafka-topics does."""
    if replication_factor != -1 and not 1 <= replication_factor <= 32767:
        fail("The replication factor must be between 1 and 32767 inclusive")
    if partitions != -1 and partitions < 1:
        fail("The partitions must be greater than 0")
    cfg = parse_kv(configs, "--config")
    assignments = _assignment(replica_assignment)

    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> bool:
        async with Admin(bootstrap) as admin:
            try:
                await admin.create_topic(topic, partitions, replication_factor, cfg, assignments=assignments,
                                         wait=True)
            except KafkaError as exc:
                if if_not_exists and exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                    return False
                raise
            return True
    try:
        if run_async(go()):
            click.echo(f"Created topic {topic}.")
    except KafkaError as exc:
        fail(f"Error while executing topic command : {exc}")


@topics.command(name="list")
@bootstrap_option
@handle_errors
def list_(bootstrap_server: str | None) -> None:
    """Topic names, one per line."""
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> list[str]:
        async with Admin(bootstrap) as admin:
            return await admin.list_topics()
    for name in run_async(go()):
        click.echo(name)


@topics.command()
@bootstrap_option
@click.option("--topic", help="Only this topic.")
@click.option("--under-replicated-partitions", is_flag=True,
              help="Only partitions whose ISR is smaller than the replica set.")
@click.option("--under-min-isr-partitions", is_flag=True,
              help="Only partitions without a leader or with ISR < min.insync.replicas.")
@click.option("--at-min-isr-partitions", is_flag=True,
              help="Only partitions whose ISR size equals min.insync.replicas.")
@click.option("--unavailable-partitions", is_flag=True, help="Only partitions without a live leader.")
@click.option("--topics-with-overrides", is_flag=True,
              help="Only the topic lines of topics with a config other than the default.")
@click.option("--leader-epoch", is_flag=True, help="Also print each partition's LeaderEpoch (not in Kafka's format).")
@handle_errors
def describe(bootstrap_server: str | None, topic: str | None, under_replicated_partitions: bool,
             under_min_isr_partitions: bool, at_min_isr_partitions: bool, unavailable_partitions: bool,
             topics_with_overrides: bool, leader_epoch: bool) -> None:
    """Kafka's describe lines, from Metadata and DescribeConfigs: a topic line (Configs: every
    value that is not the default, broker-level ones included), then one line per partition.
    The min-ISR filters use each topic's effective min.insync.replicas."""
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go():
        async with Admin(bootstrap) as admin:
            tds = await admin.describe_topics([topic] if topic else None)
            found = await admin.describe_configs([(ResourceType.TOPIC, td.name) for td in tds])
            try:       # the controller answers it: without one, describe still shows what the brokers know
                moving = await asyncio.wait_for(admin.list_partition_reassignments(timeout_ms=REASSIGNMENTS_MS),
                                                REASSIGNMENTS_MS / 1000 + 1)
            except (KafkaError, TimeoutError):
                moving = {}
            return [dataclasses.replace(td, configs={e.name: e.value for e in found[(ResourceType.TOPIC, td.name)]
                                                     if not e.is_default}) for td in tds], moving
    try:
        tds, reassignments = run_async(go())
    except KafkaError as exc:
        if topic and exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            fail(f"Error while executing topic command : Topic '{topic}' does not exist as expected")
        raise
    for line in describe_lines(tds, under_replicated=under_replicated_partitions,
                               under_min_isr=under_min_isr_partitions, at_min_isr=at_min_isr_partitions,
                               unavailable=unavailable_partitions, leader_epoch=leader_epoch,
                               with_overrides=topics_with_overrides, reassignments=reassignments):
        click.echo(line)


@topics.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic name.")
@click.option("--if-exists", is_flag=True, help="Succeed quietly if the topic does not exist.")
@handle_errors
def delete(bootstrap_server: str | None, topic: str, if_exists: bool) -> None:
    """Delete a topic (DeleteTopics); prints nothing on success, as kafka-topics --delete."""
    async def go() -> None:
        async with Admin(reachable_bootstrap(bootstrap_server)) as admin:
            await admin.delete_topic(topic)
    try:
        run_async(go())
    except KafkaError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            if if_exists:
                return
            fail(f"Error while executing topic command : Topic '{topic}' does not exist as expected")
        fail(f"Error while executing topic command : {exc.message or exc}")


@topics.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic name.")
@click.option("--partitions", type=int, required=True, help="The new (higher) partition count.")
@click.option("--replica-assignment", help="Replicas of every partition, the existing ones first: 1:2:3,2:3:1,... "
                                           "(only the new partitions' lists are used).")
@handle_errors
def alter(bootstrap_server: str | None, topic: str, partitions: int, replica_assignment: str | None) -> None:
    """Add partitions to a topic (CreatePartitions through the controller), as kafka-topics --alter."""
    assignments = _assignment(replica_assignment)
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> None:
        async with Admin(bootstrap) as admin:
            (td,) = await admin.describe_topics([topic])
            new = assignments[len(td.partitions):] if assignments is not None else None
            await admin.create_partitions(topic, partitions, new)
    try:
        run_async(go())
    except KafkaError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            fail(f"Error while executing topic command : Topic '{topic}' does not exist as expected")
        fail(f"Error while executing topic command : {exc.message or exc}")
