"""`minibroker secret create FILE`: the cluster secret's file, for deployments other than `cluster up`
(docker-compose.yml runs it in a one-shot service before the controller and brokers start)."""
from __future__ import annotations

import os

import click

from minibroker.cli.common import fail
from minibroker.config import ConfigError
from minibroker.net.credentials import MIN_SECRET_CHARS, generate_secret, read_secret_file, write_private_file


@click.group()
def secret() -> None:
    """The cluster secret (SCRAM-SHA-256 between brokers and the controller)."""


@secret.command()
@click.argument("file", type=click.Path(dir_okay=False))
def create(file: str) -> None:
    """Make FILE (mode 0600) hold the cluster secret: $MINIBROKER_CLUSTER_SECRET if set, else the
    secret FILE already holds, else a new random one. Point processes at it with
    MINIBROKER_CLUSTER_SECRET_FILE=FILE (or minibroker.cluster.secret.file=FILE)."""
    given = os.environ.get("MINIBROKER_CLUSTER_SECRET", "")
    if given:
        if len(given) < MIN_SECRET_CHARS:
            fail(f"MINIBROKER_CLUSTER_SECRET: at least {MIN_SECRET_CHARS} characters needed, got {len(given)}", 2)
        write_private_file(file, (given + "\n").encode())
        click.echo(f"cluster secret: {file} (mode 0600) holds MINIBROKER_CLUSTER_SECRET")
        return
    if os.path.exists(file):
        try:
            read_secret_file(file)
        except ConfigError as exc:
            fail(f"Error: {exc}", 2)
        os.chmod(file, 0o600)
        click.echo(f"cluster secret: kept the one in {file} (mode 0600)")
        return
    write_private_file(file, (generate_secret() + "\n").encode())
    click.echo(f"cluster secret: generated a random one into {file} (mode 0600)")
