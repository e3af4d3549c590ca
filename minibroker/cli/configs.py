"""`minibroker configs` (kafka-configs): describe and alter topic and broker configs at runtime.

    configs --describe --entity-type topics --entity-name orders      (or --topic orders)
    configs --alter --topic orders --add-config min.insync.replicas=2
    configs --alter --entity-type brokers --entity-default --add-config min.insync.replicas=2
    configs --alter --broker 1 --delete-config min.insync.replicas

Alterations go through the controller into the metadata log; leaders apply
min.insync.replicas as soon as their broker has replayed the record.
"""
from __future__ import annotations

import click

from minibroker.cli.common import bootstrap_option, fail, handle_errors, reachable_bootstrap, run_async
from minibroker.cli.format import config_describe_lines
from minibroker.client.admin import Admin
from minibroker.dynamic_config import ConfigSource, ResourceType


def parse_add_config(spec: str) -> dict[str, str]:
    """kafka-configs --add-config: k1=v1,k2=[v1,v2] (brackets hold a list value's commas)."""
    out: dict[str, str] = {}
    item, depth, items = "", 0, []
    for ch in spec:
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
            continue
        depth += (ch == "[") - (ch == "]")
        item += ch
    items.append(item)
    for it in (i.strip() for i in items):
        if not it:
            continue
        if "=" not in it:
            raise click.BadParameter(f"{it!r}: expected key=value", param_hint="--add-config")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip().removeprefix("[").removesuffix("]") if v.strip().startswith("[") else v.strip()
    return out


@click.command()
@bootstrap_option
@click.option("--entity-type", type=click.Choice(["topics", "brokers"]), help="What to describe or alter.")
@click.option("--entity-name", help="Topic name or broker id [describe: every one].")
@click.option("--entity-default", is_flag=True, help="The cluster-wide broker default (with --entity-type brokers).")
@click.option("--topic", help="Same as --entity-type topics --entity-name TOPIC.")
@click.option("--broker", help="Same as --entity-type brokers --entity-name BROKER.")
@click.option("--broker-defaults", is_flag=True, help="Same as --entity-type brokers --entity-default.")
@click.option("--describe", is_flag=True, help="List the entity's dynamic configs (with --all: every config).")
@click.option("--all", "all_", is_flag=True, help="With --describe: every config and where its value comes from.")
@click.option("--alter", is_flag=True, help="Change configs (with --add-config / --delete-config).")
@click.option("--add-config", help="k1=v1,k2=v2: configs to set.")
@click.option("--delete-config", help="k1,k2: configs to remove (back to the next synonym).")
@handle_errors
def configs(bootstrap_server: str | None, entity_type: str | None, entity_name: str | None, entity_default: bool,
            topic: str | None, broker: str | None, broker_defaults: bool, describe: bool, all_: bool, alter: bool,
            add_config: str | None, delete_config: str | None) -> None:
    """Describe or alter topic and broker configs, as kafka-configs does."""
    if describe == alter:
        fail("Command must include exactly one action: --describe, --alter")
    if topic is not None:
        entity_type, entity_name = "topics", topic
    elif broker is not None:
        entity_type, entity_name = "brokers", broker
    elif broker_defaults:
        entity_type, entity_default = "brokers", True
    if entity_type is None:
        fail("Missing required option: --entity-type (or --topic / --broker / --broker-defaults)")
    if entity_default and entity_type != "brokers":
        fail("--entity-default is only for --entity-type brokers")
    if entity_default and entity_name:
        fail("--entity-name and --entity-default cannot be used together")
    if entity_type == "brokers" and entity_name is not None and not entity_name.isdigit():
        fail(f"The entity name for brokers must be a valid integer broker id, but it is: {entity_name}")
    rtype = ResourceType.TOPIC if entity_type == "topics" else ResourceType.BROKER
    bootstrap = reachable_bootstrap(bootstrap_server)
    if alter:
        if not add_config and not delete_config:
            fail("Command must include --add-config or --delete-config with --alter")
        if entity_name is None and not entity_default:
            fail("An entity name must be specified with --alter (or --entity-default for brokers)")
        sets = parse_add_config(add_config or "")
        deletes = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
        name = "" if entity_default else entity_name
        assert name is not None

        async def do_alter() -> None:
            async with Admin(bootstrap) as admin:
                await admin.incremental_alter_configs((rtype, name), sets, deletes)
        run_async(do_alter())
        if entity_default:
            click.echo("Completed updating default config for brokers in the cluster.")
        else:
            click.echo(f"Completed updating config for {entity_type[:-1]} {name}.")
        return

    async def do_describe() -> list[str]:
        async with Admin(bootstrap) as admin:
            if entity_default:
                names = [""]
            elif entity_name is not None:
                names = [entity_name]
            elif rtype == ResourceType.TOPIC:
                names = await admin.list_topics()
            else:
                names = [str(b) for b in sorted(await admin.brokers())] + [""]
            found = await admin.describe_configs([(rtype, n) for n in names])
        lines: list[str] = []
        own = {ResourceType.TOPIC: ConfigSource.DYNAMIC_TOPIC_CONFIG}
        for n in names:
            source = own.get(rtype, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if n == ""
                             else ConfigSource.DYNAMIC_BROKER_CONFIG)
            lines += config_describe_lines(entity_type, n, found[(int(rtype), n)], only=None if all_ else source)
        return lines
    for line in run_async(do_describe()):
        click.echo(line)
