"""`minibroker cluster up|down|status|kill|pause|resume|restart|isolate|heal`."""
from __future__ import annotations

import asyncio
import os
import shutil

import click

from minibroker.cli.common import handle_errors, parse_kv, run_async
from minibroker.client.admin import Admin
from minibroker.errors import ErrorCode, KafkaError
from minibroker.testing.cluster import ClusterError, LocalCluster, default_data_dir, state_path

_dir_opt = click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                        help="Cluster data directory [default: $MINIBROKER_HOME, else ./.minibroker].")


def _dir(data_dir: str | None) -> str:
    return os.path.abspath(data_dir or default_data_dir())


def hint(command: str, data_dir: str) -> str:
    """`minibroker COMMAND`, with `--data-dir` when the cluster is not in the default directory."""
    return f"minibroker {command}" + ("" if os.path.abspath(data_dir) == _dir(None) else f" --data-dir {data_dir}")


@click.group()
def cluster() -> None:
    """A local cluster of real processes: controller + brokers on 127.0.0.x."""


@cluster.command()
@_dir_opt
@click.option("--brokers", type=int, default=3, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Property for every broker and the controller (repeatable), e.g. min.insync.replicas=2.")
@click.option("--fast", is_flag=True, help="Demo timings: fencing in 2 s, ISR shrink after 2 s of lag.")
@click.option("--no-proxy", is_flag=True, help="No fault proxy between processes (isolate/heal unavailable).")
@click.option("--random-ports", is_flag=True, help="Random 127.x.y.z addresses and free ports instead of "
              "127.0.0.1-3:9092 (to run beside another cluster).")
@click.option("--racks", metavar="RACK[,RACK...]",
              help="broker.rack names, cycled over the brokers in id order (--brokers 6 --racks a,b,c: two per "
                   "rack) [default: zone-a, zone-b, ... one per broker].")
@click.option("--tls", is_flag=True, help="Every listener speaks TLS, with a local CA and certificates made "
              "under DATA_DIR/tls (clients: --command-config DATA_DIR/tls/client.properties).")
@click.option("--timeout", type=float, default=60, show_default=True, help="Seconds to wait for every broker to run.")
@handle_errors
def up(data_dir: str | None, brokers: int, sets: tuple[str, ...], fast: bool, no_proxy: bool, random_ports: bool,
       tls: bool, racks: str | None, timeout: float) -> None:
    """Start the cluster (or restart a stopped one in the same directory); returns once every broker is RUNNING."""
    d = _dir(data_dir)
    if os.path.exists(state_path(d)):
        c = LocalCluster.load(d)
        if sets or fast or no_proxy or tls or racks or brokers != 3:
            click.echo(f"note: {d} already holds a cluster; starting it with its recorded settings", err=True)
        running = [i.name for i in c.info() if i.alive]
        if len(running) == len(c.process_names()):
            click.echo(f"The cluster in {d} is already running.")
            _print_access(c)
            return
    else:
        rack_names = tuple(r.strip() for r in racks.split(",")) if racks else None
        if rack_names is not None and not all(rack_names):
            raise click.BadParameter(f"{racks!r}: expected comma-separated rack names", param_hint="--racks")
        c = LocalCluster.create(d, brokers=brokers, overrides=parse_kv(sets, "--set"), proxied=not no_proxy,
                                fast=fast, free_ports=random_ports, tls=tls, racks=rack_names)
    c.start()
    try:
        run_async(c.wait_running(timeout))
    except ClusterError:
        click.echo("Cluster did not come up; stopping what started. Logs stay in " + d, err=True)
        c.down(timeout_s=10)
        raise
    click.echo(f"minibroker cluster is up: controller {c.controller_address}, "
               f"brokers {', '.join(str(b) for b in c.broker_ids)} RUNNING")
    _print_access(c)


def _print_access(c: LocalCluster) -> None:
    click.echo(f"  bootstrap:  {c.bootstrap}")
    if c.kafka_bootstrap:
        ssl_hint = f"  (security.protocol=SSL, ssl.ca.location={c.layout.ca_file})" if c.layout.tls else ""
        click.echo(f"  kafka:      {c.kafka_bootstrap}{ssl_hint}")
    click.echo(f"  data dir:   {c.data_dir}  (logs: broker-N/broker.log, controller/controller.log)")
    click.echo(f"  secret:     {c.layout.secret_file}  (mode 0600; SCRAM-SHA-256 between brokers and controller)")
    if c.layout.tls:
        click.echo(f"  tls:        every listener; CA {c.layout.ca_file}")
        click.echo(f"  clients:    --command-config {c.layout.client_properties_file}")
    racks = ", ".join(f"{b.node_id}={b.rack}" for b in c.layout.brokers)
    click.echo(f"  racks:      {racks}")
    urls = c.layout.metrics_urls()
    if urls:
        click.echo(f"  metrics:    {', '.join(u for _, u in urls)}")
    click.echo(f"  stop with:  {hint('cluster down', c.data_dir)}")


@cluster.command()
@_dir_opt
@click.option("--purge", is_flag=True, help="Also delete the data directory.")
@click.option("--timeout", type=float, default=30, show_default=True,
              help="Seconds for controlled shutdown before SIGKILL.")
@handle_errors
def down(data_dir: str | None, purge: bool, timeout: float) -> None:
    """Stop every process (brokers with a controlled shutdown); data stays unless --purge."""
    c = LocalCluster.load(_dir(data_dir))
    c.down(timeout_s=timeout)
    if purge:
        shutil.rmtree(c.data_dir)
        click.echo(f"Cluster stopped; removed {c.data_dir}")
    else:
        click.echo(f"Cluster stopped; data kept in {c.data_dir} "
                   f"(`{hint('cluster up', c.data_dir)}` starts it again)")


@cluster.command()
@_dir_opt
@handle_errors
def status(data_dir: str | None) -> None:
    """Each process: pid, running/paused/stopped, address, rack, broker state, cut paths."""
    c = LocalCluster.load(_dir(data_dir))
    states = run_async(_broker_states(c))
    cut = {n for pair in c.blocked for n in pair}
    click.echo(f"{'PROCESS':<12} {'PID':>7}  {'PROCESS STATE':<13} {'ADDRESS':<21} {'RACK':<7} "
               f"{'BROKER STATE':<28} NETWORK")
    for i in c.info():
        pstate = "stopped" if not i.alive else ("paused" if i.paused else "running")
        addr = rack = bstate = ""
        net = ""
        if i.name == "controller":
            addr = c.controller_address
            net = "cut" if 0 in cut and any(0 in p for p in c.blocked) else ""
        elif i.name.startswith("broker-"):
            b = c.layout.broker(int(i.name.split("-")[1]))
            addr, rack = b.address, b.rack
            bstate = states.get(b.node_id, "") if i.alive else ""
            paths = [f"{s}->{d}" for s, d in c.blocked if b.node_id in (s, d)]
            net = ("cut: " + " ".join(f"{_n(s)}->{_n(d)}" for s, d in c.blocked if b.node_id in (s, d))
                   if paths else "")
        elif i.name == "proxy":
            addr = f"{c.layout.proxy_control[0]}:{c.layout.proxy_control[1]:d}" if c.layout.proxy_control else ""
        click.echo(f"{i.name:<12} {i.pid or '-':>7}  {pstate:<13} {addr:<21} {rack:<7} {bstate:<28} {net}".rstrip())
    click.echo(f"bootstrap: {c.bootstrap}   data dir: {c.data_dir}")


def _node_label(node: int) -> str:
    return "controller" if node == 0 else f"broker {node}"


def _n(node: int) -> str:
    return "ctl" if node == 0 else f"b{node}"


async def _broker_states(c: LocalCluster) -> dict[int, str]:
    out: dict[int, str] = {}
    async with Admin(c.bootstrap, {"request.timeout.ms": "1500", "socket.connection.setup.timeout.ms": "1500",
                                   **c.client_properties}) as admin:
        async def one(b: int) -> None:
            spec = c.layout.broker(b)
            try:
                resp = await asyncio.wait_for(admin.api_versions((spec.host, spec.port)), 2)
                out[b] = resp.get("state", "?")
            except (TimeoutError, KafkaError) as exc:
                timed_out = isinstance(exc, asyncio.TimeoutError) or exc.code == ErrorCode.REQUEST_TIMED_OUT
                out[b] = "no answer" if timed_out else f"unreachable ({exc.name})"
        await asyncio.gather(*(one(b) for b in c.broker_ids))
    return out


def _fault(name: str, doc: str):
    @cluster.command(name=name, help=doc)
    @_dir_opt
    @click.argument("broker", type=int)
    @handle_errors
    def cmd(data_dir: str | None, broker: int) -> None:
        c = LocalCluster.load(_dir(data_dir))
        getattr(c, name)(broker)
        click.echo(f"{name}: " + (f"broker {broker} ({c.layout.broker(broker).address})" if broker
                                  else f"controller ({c.controller_address})"))
    return cmd


_fault("kill", "SIGKILL a broker (no controlled shutdown). BROKER 0 is the controller.")
_fault("stop", "Clean shutdown of a broker (SIGTERM: controlled shutdown); it stays down. "
               "BROKER 0 is the controller.")
_fault("pause", "SIGSTOP a broker: frozen, sockets open, silent. BROKER 0 is the controller.")
_fault("resume", "SIGCONT a paused broker (0: the controller).")
_fault("isolate", "Cut a broker off from the controller and the other brokers, both ways "
                  "(clients still reach it). BROKER 0 isolates the controller.")


@cluster.command()
@_dir_opt
@click.argument("src", type=int)
@click.argument("dst", type=int)
@handle_errors
def cut(data_dir: str | None, src: int, dst: int) -> None:
    """Cut one path: the connections node SRC opens to node DST (0 = the controller).

    `cut 3 1` stops broker 3 fetching from leader 1 while 3 keeps heartbeating
    to the controller: the leader then drops 3 from the ISR by lag
    (replica.lag.time.max.ms), not by fencing. `heal` restores it."""
    c = LocalCluster.load(_dir(data_dir))
    c.block(src, dst)
    click.echo(f"cut: {_node_label(src)} -> {_node_label(dst)} (heal with: {hint('cluster heal', c.data_dir)})")


@cluster.command()
@_dir_opt
@click.argument("broker", type=int, required=False)
@handle_errors
def heal(data_dir: str | None, broker: int | None) -> None:
    """Restore the network paths of BROKER (every cut path if omitted; 0: the controller's)."""
    c = LocalCluster.load(_dir(data_dir))
    c.heal(broker)
    click.echo("heal: " + ("all paths" if broker is None else "controller" if broker == 0 else f"broker {broker}"))


@cluster.command()
@_dir_opt
@click.argument("broker", type=int)
@click.option("--hard", is_flag=True, help="SIGKILL instead of a controlled shutdown before starting again.")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until the broker is RUNNING again.")
@handle_errors
def restart(data_dir: str | None, broker: int, hard: bool, wait: bool) -> None:
    """Restart a broker with the same config (also starts a killed one). BROKER 0 is the controller
    (--wait then waits until every broker is RUNNING again)."""
    c = LocalCluster.load(_dir(data_dir))
    c.restart(broker, hard=hard)
    if wait:
        run_async(c.wait_running(60, [broker] if broker else None))
    click.echo(f"restart: {'broker ' + str(broker) if broker else 'controller'} {'RUNNING' if wait else 'started'}")
