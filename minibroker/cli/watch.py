"""`minibroker watch`: a live view of every partition and a log of replication events."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import click

from minibroker.cli.common import bootstrap_option, handle_errors, resolve_bootstrap, run_async
from minibroker.client.admin import Admin
from minibroker.client.observe import EventFollower, EventLine, PartitionView, snapshot, sorted_events
from minibroker.config import parse_hostport
from minibroker.events import is_routine
from minibroker.testing.cluster import ClusterError, LocalCluster, default_data_dir

# Events that restate what the table already shows, and routine per-request
# events (HW increments by appends and fetches); --all-events keeps them.
QUIET_KINDS = frozenset({"replica_eligibility", "isr_update_ignored", "isr_metadata"})
HEADERS = ("PARTITION", "LEADER", "EPOCH", "ISR", "ELR", "HW", "REPLICAS (id:LEO/lag)")


def _ids(xs: Any) -> str:
    return "N/A" if xs is None else (",".join(map(str, xs)) or "-")


def row(v: PartitionView) -> tuple[str, ...]:
    reps = "  ".join(
        f"{r.broker_id}:{'?' if r.leo is None else r.leo}/{'?' if r.lag is None else r.lag}"
        f"{'' if r.in_isr else '*'}{'!' if r.stuck else ''}" for r in v.replicas)
    return (v.name, "none" if v.leader is None else str(v.leader), str(v.leader_epoch), _ids(v.isr), _ids(v.elr),
            "?" if v.hw is None else str(v.hw), reps + (f"  ({v.note})" if v.note else ""))


def table_text(views: list[PartitionView]) -> list[str]:
    rows = [HEADERS] + [row(v) for v in views]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]


def event_text(line: EventLine) -> str:
    e = line.event
    t = e.get("time_ms", 0)
    stamp = time.strftime("%H:%M:%S", time.localtime(t / 1000)) + f".{t % 1000:03d}"
    what = e.get("kind", "?")
    part = e.get("partition") or ""
    change = ""
    if e.get("before") is not None or e.get("after") is not None:
        change = f" {_fmt(e.get('before'))} -> {_fmt(e.get('after'))}"
    reason = f": {e['reason']}" if e.get("reason") else ""
    return f"{stamp} [{line.source}] {part + ' ' if part else ''}{what}{change}{reason}"


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(map(str, v)) + "]"
    if isinstance(v, dict):
        return "{" + " ".join(f"{k}={_fmt(x)}" for k, x in v.items()) + "}"
    return str(v)


def shown(lines: list[EventLine], all_events: bool) -> list[EventLine]:
    return [l for l in sorted_events(lines)
            if all_events or not (l.event.get("kind") in QUIET_KINDS
                                  or is_routine(l.event.get("kind", ""), l.event.get("trigger")))]


def _local_sources() -> tuple[dict[int, tuple[str, int]], tuple[str, int] | None]:
    """Brokers and controller of the local cluster, if one is recorded (so fenced or
    isolated brokers stay in view even when Metadata no longer lists them)."""
    try:
        c = LocalCluster.load(default_data_dir())
    except ClusterError:
        return {}, None
    return {b.node_id: (b.host, b.port) for b in c.layout.brokers}, c.layout.controller


@click.command()
@bootstrap_option
@click.option("--once", is_flag=True, help="Print one frame as plain text and exit.")
@click.option("--interval-ms", type=int, default=500, show_default=True)
@click.option("--events", "n_events", type=int, default=15, show_default=True, help="Event lines to show.")
@click.option("--all-events", is_flag=True, help="Also show events that restate the table "
              "(replica eligibility, ISR metadata echoes).")
@click.option("--controller", "controller_addr", metavar="HOST:PORT",
              help="Also follow the controller's events [default: the local cluster's controller].")
@handle_errors
def watch(bootstrap_server: str | None, once: bool, interval_ms: int, n_events: int, all_events: bool,
          controller_addr: str | None) -> None:
    """Leader, leader epoch, ISR, ELR, HW and each replica's LEO/lag (* = not in ISR),
    from every broker's ReplicaStatus; below, ISR changes, HW moves and elections
    (with reasons) from every process's Events."""
    bootstrap = resolve_bootstrap(bootstrap_server)
    local_brokers, local_ctl = ({}, None) if bootstrap_server else _local_sources()
    ctl = parse_hostport(controller_addr, 9093) if controller_addr else local_ctl
    if once:
        run_async(_once(bootstrap, local_brokers, ctl, n_events, all_events))
    else:
        try:
            run_async(_live(bootstrap, local_brokers, ctl, interval_ms, n_events, all_events))
        except KeyboardInterrupt:
            pass


async def _sources(admin: Admin, local: dict[int, tuple[str, int]], ctl: tuple[str, int] | None
                   ) -> dict[str, tuple[str, int]]:
    brokers = dict(local)
    try:
        brokers.update(await admin.brokers())
    except Exception:
        pass
    out = {f"broker {n}": a for n, a in sorted(brokers.items())}
    if ctl is not None:
        out["controller"] = ctl
    return out


async def _once(bootstrap: str, local: dict[int, tuple[str, int]], ctl: tuple[str, int] | None, n: int,
                all_events: bool) -> None:
    async with Admin(bootstrap, {"request.timeout.ms": "5000"}) as admin:
        views, unreachable = await snapshot(admin, local)
        follower = EventFollower(admin)
        for source, addr in (await _sources(admin, local, ctl)).items():
            try:
                await asyncio.wait_for(follower.poll_once(source, addr, 0), 3)
            except Exception as exc:
                follower.errors[source] = str(exc) or "timed out"
    for line in table_text(views):
        click.echo(line)
    for node, err in sorted(unreachable.items()):
        click.echo(f"broker {node}: no ReplicaStatus ({err})")
    click.echo("")
    click.echo("EVENTS")
    for line in shown(list(follower.lines), all_events)[-n:]:
        click.echo(event_text(line))


async def _live(bootstrap: str, local: dict[int, tuple[str, int]], ctl: tuple[str, int] | None,
                interval_ms: int, n: int, all_events: bool) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.table import Table
    from rich.text import Text

    async with Admin(bootstrap, {"request.timeout.ms": "3000"}) as admin:
        follower = EventFollower(admin)
        tasks: dict[str, asyncio.Task] = {}
        with Live(Text("connecting..."), refresh_per_second=4, screen=False) as live:
            while True:
                for source, addr in (await _sources(admin, local, ctl)).items():
                    if source not in tasks:
                        tasks[source] = asyncio.ensure_future(follower.follow(source, addr))
                try:
                    views, unreachable = await snapshot(admin, local)
                    err = ""
                except Exception as exc:
                    views, unreachable, err = [], {}, str(exc)
                table = Table(title=f"minibroker watch  {time.strftime('%H:%M:%S')}  ({bootstrap})",
                              title_justify="left")
                for h in HEADERS:
                    table.add_column(h, no_wrap=True)
                for v in views:
                    style = "red" if v.leader is None else ("yellow" if len(v.isr) < len(v.replicas) else "")
                    table.add_row(*row(v), style=style)
                notes = [Text(f"broker {b}: no ReplicaStatus ({e})", style="dim") for b, e in sorted(unreachable.items())]
                if err:
                    notes.append(Text(f"metadata: {err}", style="red"))
                events = [Text(event_text(l), no_wrap=True, overflow="ellipsis")
                          for l in shown(list(follower.lines), all_events)[-n:]]
                live.update(Group(table, *notes, Text("events", style="bold"), *events))
                await asyncio.sleep(interval_ms / 1000)
