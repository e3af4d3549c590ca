"""`minibroker controller` and `minibroker broker`: the process entry points."""
from __future__ import annotations

import sys
from collections.abc import Callable

import click

from minibroker.config import Config, ConfigError, parse_overrides


def _load(config_file: str | None, sets: tuple[str, ...]) -> Config:
    try:
        return Config.load(config_file, parse_overrides(sets))
    except ConfigError as exc:
        click.echo(f"configuration error: {exc}", err=True)
        sys.exit(2)


_config_opt = click.option("--config", "config_file", type=click.Path(dir_okay=False),
                           help="Properties file (Kafka property names).")
_set_opt = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                        help="Override one property (repeatable); beats the file and MINIBROKER_* variables.")


def _run(run: Callable[[Config], int | None], config_file: str | None, sets: tuple[str, ...]) -> None:
    """Load the configuration, run the process, exit with its status (2 on a configuration error)."""
    cfg = _load(config_file, sets)
    try:
        rc = run(cfg)
    except ConfigError as exc:
        click.echo(f"configuration error: {exc}", err=True)
        sys.exit(2)
    sys.exit(rc or 0)


@click.command()
@_config_opt
@_set_opt
def controller(config_file: str | None, sets: tuple[str, ...]) -> None:
    """Run a controller process until SIGTERM/SIGINT."""
    from minibroker.controller.main import run
    _run(run, config_file, sets)


@click.command()
@_config_opt
@_set_opt
def broker(config_file: str | None, sets: tuple[str, ...]) -> None:
    """Run a broker process until SIGTERM/SIGINT (controlled shutdown)."""
    from minibroker.broker.main import run
    _run(run, config_file, sets)


@click.command()
@click.argument("file")
@click.option("--explain", is_flag=True, help="Explain every decision on stderr.")
def trace(file: str, explain: bool) -> None:
    """Replay a trace file (APPEND / FETCH / STATUS) through the leader state machine; '-' reads stdin."""
    from minibroker.trace import main as trace_main
    sys.exit(trace_main(file, explain, sys.stdout, sys.stderr))
