"""The lazily loaded command table: every entry loads, under its own name."""
from __future__ import annotations

import subprocess
import sys

import click

from minibroker.cli.main import COMMANDS, cli


def test_every_listed_command_loads_under_its_own_name() -> None:
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name


def test_a_cli_call_imports_only_the_command_it_names() -> None:
    probe = ("import sys; from minibroker.cli.main import cli; import click; "
             "cli.get_command(click.Context(cli), 'offsets'); "
             "print(' '.join(m for m in ('minibroker.sim', 'minibroker.broker.server', 'minibroker.cli.watch') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "" and "offsets" in COMMANDS
