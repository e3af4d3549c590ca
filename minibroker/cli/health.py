"""`minibroker health`: exit 0 iff the broker says RUNNING (Docker healthcheck)."""
from __future__ import annotations

import sys

import click

from minibroker.cli.common import bootstrap_option, resolve_bootstrap, run_async
from minibroker.client.admin import Admin
from minibroker.errors import KafkaError


@click.command()
@bootstrap_option
@click.option("--timeout-ms", type=int, default=5000, show_default=True)
def health(bootstrap_server: str | None, timeout_ms: int) -> None:
    """Ask one broker (the first bootstrap address) for ApiVersions; exit 0 iff its state is RUNNING."""
    address = resolve_bootstrap(bootstrap_server).split(",")[0]

    async def go() -> dict:
        async with Admin(address, {"request.timeout.ms": str(timeout_ms),
                                   "socket.connection.setup.timeout.ms": str(timeout_ms)}) as admin:
            return await admin.api_versions(address)
    try:
        resp = run_async(go())
    except KafkaError as exc:
        click.echo(f"{address}: {exc}", err=True)
        sys.exit(1)
    state = resp.get("state", "UNKNOWN")
    click.echo(f"{address}: {resp.get('role', '?')} {resp.get('node_id', '?')} {state}")
    sys.exit(0 if state == "RUNNING" else 1)
