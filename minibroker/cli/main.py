"""The `minibroker` command: Kafka's tools' names and formats where they exist.

Thin by rule: argument handling and formatting only; the work is done by
minibroker.client (and minibroker.testing.cluster for `cluster`).

Commands load lazily: `minibroker offsets` imports only what `offsets` needs,
so a CLI call (and `--help`) does not pay for the broker, the simulation and
the record codecs it never uses."""
from __future__ import annotations

import importlib

import click

import minibroker

# name -> (module, attribute), in the order `--help` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "topics": ("minibroker.cli.topics", "topics"),
    "produce": ("minibroker.cli.produce", "produce"),
    "consume": ("minibroker.cli.consume", "consume"),
    "consumer-groups": ("minibroker.cli.consumer_groups", "consumer_groups"),
    "offsets": ("minibroker.cli.offsets", "offsets"),
    "delete-records": ("minibroker.cli.delete_records", "delete_records"),
    "reassign-partitions": ("minibroker.cli.reassign", "reassign_partitions"),
    "log-dirs": ("minibroker.cli.log_dirs", "log_dirs"),
    "configs": ("minibroker.cli.configs", "configs"),
    "leader-election": ("minibroker.cli.election", "leader_election"),
    "broker-api-versions": ("minibroker.cli.api_versions", "broker_api_versions"),
    "metadata-quorum": ("minibroker.cli.quorum", "metadata_quorum"),
    "watch": ("minibroker.cli.watch", "watch"),
    "health": ("minibroker.cli.health", "health"),
    "cluster": ("minibroker.cli.cluster", "cluster"),
    "controller": ("minibroker.cli.process", "controller"),
    "broker": ("minibroker.cli.process", "broker"),
    "trace": ("minibroker.cli.process", "trace"),
    "verify": ("minibroker.cli.verify", "verify"),
    "sim": ("minibroker.cli.sim", "sim"),
    "storage": ("minibroker.cli.storage", "storage"),
    "secret": ("minibroker.cli.secret", "secret"),
    "bench": ("minibroker.bench.cli", "bench"),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported when first named."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *(n for n in super().list_commands(ctx) if n not in COMMANDS)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return super().get_command(ctx, cmd_name)
        command = getattr(importlib.import_module(where[0]), where[1])
        assert isinstance(command, click.Command) and command.name == cmd_name, where
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(getattr(minibroker, "__version__", "0.1.0"), prog_name="minibroker")
def cli() -> None:
    """minibroker: a Kafka-style replicated broker for learning and testing Kafka's replication."""


def main() -> None:
    cli(prog_name="minibroker")
