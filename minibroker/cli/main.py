"""The `minibroker` command: Kafka's tools' names and formats where they exist.

Thin by rule: argument handling and formatting only; the work is done by
minibroker.client (and minibroker.testing.cluster for `cluster`)."""
from __future__ import annotations

import click

import minibroker
from minibroker.cli.api_versions import broker_api_versions
from minibroker.cli.cluster import cluster
from minibroker.cli.configs import configs
from minibroker.cli.consume import consume
from minibroker.cli.consumer_groups import consumer_groups
from minibroker.cli.election import leader_election
from minibroker.cli.health import health
from minibroker.cli.offsets import offsets
from minibroker.cli.process import broker, controller, trace
from minibroker.cli.produce import produce
from minibroker.cli.sim import sim
from minibroker.cli.storage import storage
from minibroker.cli.secret import secret
from minibroker.cli.quorum import metadata_quorum
from minibroker.cli.topics import topics
from minibroker.cli.verify import verify
from minibroker.cli.watch import watch


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(getattr(minibroker, "__version__", "0.1.0"), prog_name="minibroker")
def cli() -> None:
    """minibroker: a Kafka-style replicated broker for learning and testing Kafka's replication."""


for command in (topics, produce, consume, consumer_groups, offsets, configs, leader_election, broker_api_versions, metadata_quorum,
                watch, health, cluster, controller, broker, trace, verify, sim, storage, secret):
    cli.add_command(command)


def _bench() -> click.Command:
    from minibroker.bench.cli import bench
    return bench


cli.add_command(_bench())


def main() -> None:
    cli(prog_name="minibroker")
