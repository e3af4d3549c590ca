"""`minibroker watch`: a live view of every partition and a log of replication events.

Every broker is asked in parallel, each round bounded by a deadline
(`ClusterObserver`), and the screen is redrawn every `--interval-ms` from
whatever answered, so a paused or dead broker shows as such at the next
refresh instead of stalling the view. Events of every broker and of the
controller are long-polled on their own connections. `--web` serves the same
frames to a browser page (minibroker.cli.watch_web).
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any

import click

from minibroker.cli.common import bootstrap_option, handle_errors, resolve_bootstrap, run_async
from minibroker.client.admin import Admin
from minibroker.client.config import parse_bootstrap
from minibroker.client.network import now_ms
from minibroker.client.observe import BrokerView, ClusterObserver, EventFollower, EventLine, Frame, PartitionView, \
    sorted_events
from minibroker.config import parse_hostport
from minibroker.errors import KafkaError
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
    moving = ""
    throttled = tuple(r.broker_id for r in v.replicas if r.throttled)
    if v.adding or v.removing or throttled:
        moving = "  (" + ("reassigning: " if v.adding or v.removing else "") + "; ".join(
            f"{what} {_ids(ids)}" for what, ids in (("adding", v.adding), ("removing", v.removing),
                                                     ("throttled", throttled)) if ids) + ")"
    return (v.name, "none" if v.leader is None else str(v.leader), str(v.leader_epoch), _ids(v.isr), _ids(v.elr),
            "?" if v.hw is None else str(v.hw), reps + moving + (f"  ({v.note})" if v.note else ""))


def table_text(views: list[PartitionView]) -> list[str]:
    rows = [HEADERS] + [row(v) for v in views]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + "  " + r[-1] for r in rows]


def unhealthy(v: PartitionView) -> bool:
    """Offline, under-replicated, a stuck follower, or a note (a broker's numbers missing)."""
    return (v.leader is None or len(v.isr) < len(v.replicas) - len(v.adding) or bool(v.note)
            or any(r.stuck for r in v.replicas))


def fitting_views(views: list[PartitionView], room: int) -> tuple[list[PartitionView], str | None]:
    """At most `room` rows of the live table (a terminal shows no more, and rendering a thousand rows
    twice a second took more than half a core): when they do not all fit, the unhealthy partitions
    first, then the others, each kept in order, in `room` - 1 rows and a line saying what was left out."""
    if len(views) <= room:
        return views, None
    keep = max(room - 1, 0)
    bad = [i for i, v in enumerate(views) if unhealthy(v)]
    chosen = set(bad[:keep])
    for i in range(len(views)):
        if len(chosen) >= keep:
            break
        chosen.add(i)
    shown = [views[i] for i in sorted(chosen)]
    hidden_bad = len(bad) - sum(1 for i in bad if i in chosen)
    left = len(views) - len(shown)
    return shown, (f"... {left} more partitions, " +
                   (f"{hidden_bad} of them unhealthy" if hidden_bad else "all healthy") +
                   " (a taller terminal shows more; --once prints them all)")


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
    return [line for line in sorted_events(lines)
            if all_events or not (line.event.get("kind") in QUIET_KINDS
                                  or is_routine(line.event.get("kind", ""), line.event.get("trigger")))]


def broker_text(b: BrokerView) -> str:
    rack = f" rack {b.rack}" if b.rack else ""
    proc = f", process {b.process}" if b.process and b.process != "running" else ""
    detail = f": {b.detail}" if b.detail else ""
    return f"{b.label} ({b.address[0]}:{b.address[1]}{rack}) {b.state}{detail}{proc}"


def local_cluster(explicit: str | None, bootstrap: str) -> LocalCluster | None:
    """The local cluster (./.minibroker or $MINIBROKER_HOME) when it is the one being
    watched: always when the bootstrap came from its state file; when a bootstrap was
    given (flag or $MINIBROKER_BOOTSTRAP), only if it names one of that cluster's brokers,
    so a stale state file never adds addresses of another cluster."""
    try:
        c = LocalCluster.load(default_data_dir())
    except ClusterError:
        return None
    given = explicit or os.environ.get("MINIBROKER_BOOTSTRAP")
    if not given:
        return c
    try:
        wanted = set(parse_bootstrap(bootstrap))
    except Exception:
        return None
    return c if wanted & {(b.host, b.port) for b in c.layout.brokers} else None


def _process_states(c: LocalCluster) -> Any:
    def state(node: int) -> str:
        for i in c.info():
            if i.name == f"broker-{node}":
                return "stopped" if not i.alive else ("paused" if i.paused else "running")
        return ""
    return state


@dataclass
class Watch:
    """One watch session: the observer of every broker and the followers of every
    process's events. Invariant: one follow task per event source."""
    admin: Admin
    observer: ClusterObserver
    follower: EventFollower
    controller: tuple[str, int] | None
    tasks: dict[str, asyncio.Task] = field(default_factory=dict)

    def sources(self) -> dict[str, tuple[str, int]]:
        out = {f"broker {p.node_id}": p.address for p in sorted(
            self.observer.probes.values(), key=lambda p: (p.node_id is None, p.node_id or 0)) if p.node_id is not None}
        if self.controller is not None:
            out["controller"] = self.controller
        return out

    def follow(self) -> None:
        for source, addr in self.sources().items():
            if source not in self.tasks:
                self.tasks[source] = asyncio.ensure_future(self.follower.follow(source, addr))

    async def once(self, deadline_s: float) -> None:
        """One round to every broker and one Events read from every process, all at once."""
        async def poll(source: str, addr: tuple[str, int]) -> None:
            try:
                await asyncio.wait_for(self.follower.poll_once(source, addr, 0), deadline_s)
            except (TimeoutError, KafkaError, OSError) as exc:
                self.follower.errors[source] = str(exc) or "timed out"
        await asyncio.gather(self.observer.round(), *(poll(s, a) for s, a in self.sources().items()))
        late = {s: a for s, a in self.sources().items() if s not in self.follower.next_seq
                and s not in self.follower.errors}
        await asyncio.gather(*(poll(s, a) for s, a in late.items()))

    async def close(self) -> None:
        await self.observer.close()
        for t in self.tasks.values():
            t.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


def open_watch(bootstrap: str, local: LocalCluster | None, controller: tuple[str, int] | None,
               deadline_ms: int) -> Watch:
    admin = Admin(bootstrap, {"request.timeout.ms": str(deadline_ms), "reconnect.backoff.max.ms": "250",
                              "socket.connection.setup.timeout.ms": str(deadline_ms)})
    known = {b.node_id: (b.host, b.port) for b in local.layout.brokers} if local is not None else {}
    observer = ClusterObserver(admin, parse_bootstrap(bootstrap), known, deadline_ms=deadline_ms,
                               process_state=_process_states(local) if local is not None else None,
                               racks={b.node_id: b.rack for b in local.layout.brokers} if local is not None else None)
    ctl = controller or (local.layout.controller if local is not None else None)
    return Watch(admin, observer, EventFollower(admin), ctl)


NO_CONTROLLER = "(no controller events: pass --controller HOST:PORT)"


def frame_text(frame: Frame, lines: list[EventLine], n: int, all_events: bool, controller: bool = True) -> list[str]:
    out = table_text(frame.views)
    out += [broker_text(b) for b in frame.brokers if b.state != "ok" or (b.process and b.process != "running")]
    out += ["", "EVENTS" if controller else "EVENTS " + NO_CONTROLLER]
    out += [event_text(line) for line in shown(lines, all_events)[-n:]]
    return out


@click.command()
@bootstrap_option
@click.option("--once", is_flag=True, help="Print one frame as plain text and exit.")
@click.option("--interval-ms", type=int, default=500, show_default=True, help="Refresh period.")
@click.option("--deadline-ms", type=int, default=1000, show_default=True,
              help="How long each broker has to answer a round before it shows as not answering.")
@click.option("--events", "n_events", type=int, default=15, show_default=True, help="Event lines to show.")
@click.option("--all-events", is_flag=True, help="Also show events that restate the table "
              "(replica eligibility, ISR metadata echoes).")
@click.option("--controller", "controller_addr", metavar="HOST:PORT",
              help="The controller whose events to follow [default: the local cluster's controller].")
@click.option("--web", is_flag=True, help="Serve a live picture of the cluster to a browser instead.")
@click.option("--host", "web_host", default="127.0.0.1", show_default=True, help="With --web: address to bind.")
@click.option("--port", "web_port", type=int, default=8080, show_default=True, help="With --web: port (0 = any).")
@handle_errors
def watch(bootstrap_server: str | None, once: bool, interval_ms: int, deadline_ms: int, n_events: int,
          all_events: bool, controller_addr: str | None, web: bool, web_host: str, web_port: int) -> None:
    """Leader, leader epoch, ISR, ELR, HW and each replica's LEO/lag (* = not in ISR),
    from every broker's ReplicaStatus (asked in parallel, never waiting on one);
    brokers that do not answer; below, ISR changes, HW moves, fencing and elections
    (with reasons) from every broker's and the controller's Events."""
    bootstrap = resolve_bootstrap(bootstrap_server)
    local = local_cluster(bootstrap_server, bootstrap)
    ctl = parse_hostport(controller_addr, 9093) if controller_addr else None
    interval_ms = max(50, interval_ms)
    if web:
        from minibroker.cli.watch_web import serve_web
        try:
            run_async(serve_web(open_watch(bootstrap, local, ctl, deadline_ms), interval_ms, all_events,
                                web_host, web_port))
        except KeyboardInterrupt:
            pass
    elif once:
        run_async(_once(open_watch(bootstrap, local, ctl, deadline_ms), n_events, all_events))
    else:
        try:
            run_async(_live(open_watch(bootstrap, local, ctl, deadline_ms), bootstrap, interval_ms, n_events,
                            all_events))
        except KeyboardInterrupt:
            pass


async def _once(w: Watch, n: int, all_events: bool) -> None:
    try:
        await w.once(w.observer.deadline_ms / 1000)
        frame = w.observer.frame(now_ms())
    finally:
        await w.close()
        await w.admin.close()
    for line in frame_text(frame, list(w.follower.lines), n, all_events, w.controller is not None):
        click.echo(line)


async def _live(w: Watch, bootstrap: str, interval_ms: int, n: int, all_events: bool) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.table import Table
    from rich.text import Text

    w.observer.start(interval_ms)
    try:
        with Live(Text("connecting..."), refresh_per_second=max(2, 1000 // interval_ms), screen=False) as live:
            while True:
                w.follow()
                frame = w.observer.frame(now_ms())
                table = Table(title=f"minibroker watch  {time.strftime('%H:%M:%S')}  ({bootstrap})",
                              title_justify="left")
                for h in HEADERS:
                    table.add_column(h, no_wrap=True)
                notes = [Text(broker_text(b), style="red" if b.state != "ok" else "dim")
                         for b in frame.brokers if b.state != "ok" or (b.process and b.process != "running")]
                events = [Text(event_text(line), no_wrap=True, overflow="ellipsis")
                          for line in shown(list(w.follower.lines), all_events)[-n:]]
                # The table's title, borders and header take 5 lines, the events' title 1.
                room = live.console.size.height - 5 - len(notes) - 1 - len(events)
                views, more = fitting_views(frame.views, max(room, 3))
                for v in views:
                    style = "red" if v.leader is None else ("yellow" if len(v.isr) < len(v.replicas) else "")
                    table.add_row(*row(v), style=style)
                title = "events" if w.controller is not None else "events " + NO_CONTROLLER
                below = [Text(more, style="dim", no_wrap=True, overflow="ellipsis")] if more is not None else []
                live.update(Group(table, *below, *notes, Text(title, style="bold"), *events))
                await asyncio.sleep(interval_ms / 1000)
    finally:
        await w.close()
        await w.admin.close()
