"""`minibroker broker-api-versions` (kafka-broker-api-versions): each live broker's APIs."""
from __future__ import annotations

import asyncio

import click

from minibroker.cli.common import bootstrap_option, handle_errors, reachable_bootstrap, run_async
from minibroker.cli.format import api_versions_lines
from minibroker.client.admin import Admin
from minibroker.errors import KafkaError


@click.command(name="broker-api-versions")
@bootstrap_option
@handle_errors
def broker_api_versions(bootstrap_server: str | None) -> None:
    """For each live broker in the metadata: `HOST:PORT (id: N rack: R) -> (` and its API version ranges."""
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> list[str]:
        async with Admin(bootstrap) as admin:
            cluster = await admin.describe_cluster()
            live = await admin.brokers()

            async def one(node_id: int, rack: str | None) -> list[str]:
                host, port = live[node_id]
                try:
                    resp = await admin.api_versions((host, port))
                except KafkaError as exc:
                    return [f"{host}:{port} (id: {node_id} rack: {rack or 'null'}) -> ERROR: {exc}"]
                return api_versions_lines(f"{host}:{port}", node_id, rack, resp.get("api_keys", ()))
            results = await asyncio.gather(*(one(b.node_id, b.rack) for b in cluster.brokers if b.node_id in live))
            return [line for lines in results for line in lines]
    for line in run_async(go()):
        click.echo(line)
