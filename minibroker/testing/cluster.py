"""A local cluster of real processes: one controller, N brokers, a fault proxy.

Owns: the data directory layout (one sub-directory per process with its
properties file and log), starting processes detached (own session, so
`minibroker cluster up` can return), the state file `cluster.json` that
later commands read (layout, pids, cut paths), and faults: kill (SIGKILL),
pause (SIGSTOP), resume (SIGCONT), restart (same config), isolate/heal
(through the fault proxy, see layout.py and proxy.py).

Used by `minibroker cluster ...` (the CLI), `minibroker bench`, and every
integration test (`LocalCluster.create(tmp_path, free_ports=True)` picks
random 127.x.y.z addresses and free ports, so tests can run next to a
user's cluster).
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Awaitable, Callable, Mapping

from minibroker.client.admin import Admin
from minibroker.errors import KafkaError
from minibroker.net.credentials import generate_secret, write_private_file
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import FrameDecoder, encode_frame
from minibroker.testing.layout import CONTROLLER_ID, ClusterLayout, plan, properties_text

STATE_FILE = "cluster.json"
DEFAULT_HOME_ENV = "MINIBROKER_HOME"
DEFAULT_DIR = ".minibroker"

# Settings that make a test cluster react in seconds rather than Kafka's tens of seconds.
FAST_SETTINGS: dict[str, str] = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "2000",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "replica.socket.timeout.ms": "3000",
    "replica.high.watermark.checkpoint.interval.ms": "500",
    "minibroker.controlled.shutdown.timeout.ms": "5000",
}


# What `cluster up` sets unless told otherwise: racks are only useful to consumers
# (--client-rack, KIP-392) when the leader may pick a follower to read from.
CLUSTER_DEFAULTS: dict[str, str] = {
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    # Every broker of a local cluster shares one machine: 10 offsets-topic partitions (Kafka's
    # default is 50) keep 30 replicas instead of 150 fetching and open (docs/kafka-mapping.md).
    "offsets.topic.num.partitions": "10",
}


class ClusterError(Exception):
    """A local-cluster operation that cannot be done; the message says why and what to do."""


def default_data_dir() -> str:
    return os.environ.get(DEFAULT_HOME_ENV) or os.path.abspath(DEFAULT_DIR)


def state_path(data_dir: str) -> str:
    return os.path.join(data_dir, STATE_FILE)


def proc_state(pid: int) -> str | None:
    """The kernel's state letter for `pid` (R, S, T, Z, ...), None if no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:][:1].decode()
    except (OSError, ValueError):
        try:
            os.kill(pid, 0)
            return "?"
        except ProcessLookupError:
            return None
        except PermissionError:
            return "?"


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    st = proc_state(pid)
    return st is not None and st not in ("Z", "X")


class FreePorts:
    """Picks free ports, holding each one bound until `close()`, so the kernel
    cannot hand the same port out twice within one layout (a port bound and
    released at once may be the next one returned for port 0)."""

    def __init__(self) -> None:
        self._held: list[socket.socket] = []

    def __call__(self, host: str, _default: int = 0) -> int:
        s = socket.socket()
        try:
            s.bind((host, 0))
        except OSError:
            s.close()
            raise
        self._held.append(s)
        return int(s.getsockname()[1])

    def close(self) -> None:
        for s in self._held:
            s.close()
        self._held.clear()


def _default_port(_host: str, default: int) -> int:
    """The well-known layout's port_for: every listener on its default port."""
    return default


@dataclass
class ProcessInfo:
    name: str
    pid: int | None
    alive: bool
    paused: bool


class LocalCluster:
    """Invariant: the state file holds the layout and the pid of every process
    this object (or an earlier command) started; `pids[name]` is None for a
    process that was stopped or killed through this API."""

    def __init__(self, layout: ClusterLayout, pids: dict[str, int | None] | None = None,
                 blocked: list[list[int]] | None = None) -> None:
        self.layout = layout
        self.pids: dict[str, int | None] = dict(pids or {})
        self.blocked: list[list[int]] = list(blocked or [])
        self._popens: dict[int, subprocess.Popen] = {}

    # -- creation and the state file --------------------------------------------------

    @classmethod
    def create(cls, data_dir: str, *, brokers: int = 3, free_ports: bool = False, proxied: bool = True,
               overrides: Mapping[str, str] | None = None, controller_overrides: Mapping[str, str] | None = None,
               fast: bool = False, tls: bool = False,
               racks: tuple[str, ...] | None = None) -> LocalCluster:
        """Lay out a new cluster in `data_dir` (not started). `free_ports` picks a random
        127.x.y.0/24 and free ports (tests); otherwise the well-known layout: brokers on
        127.0.0.1..N:9092, controller on 127.0.0.1:9093. Each cluster gets its own random
        secret in <data_dir>/cluster.secret (0600); `tls` also makes a local CA and
        certificates under <data_dir>/tls and turns every listener to TLS. `racks` are cycled over the brokers."""
        data_dir = os.path.abspath(data_dir)
        if os.path.exists(state_path(data_dir)):
            raise ClusterError(f"{data_dir} already holds a cluster ({STATE_FILE}); "
                               f"use `minibroker cluster up` to restart it or remove the directory")
        settings = dict(CLUSTER_DEFAULTS)
        if fast:
            settings.update(FAST_SETTINGS)
        settings.update(overrides or {})
        if free_ports:
            prefix = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
            hosts = [f"{prefix}.{i}" for i in range(1, 10)]
            controller_host = f"{prefix}.10"
            free = FreePorts()
            port_for: Callable[[str, int], int] = free
        else:
            free = None
            hosts = [f"127.0.0.{i}" for i in range(1, 10)]
            controller_host = "127.0.0.1"
            port_for = _default_port
        try:
            layout = plan(data_dir, brokers=brokers, hosts=hosts, controller_host=controller_host,
                          port_for=port_for, proxied=proxied, tls=tls, racks=racks,
                          broker_overrides=settings, controller_overrides=dict(controller_overrides or {}))
        except ValueError as exc:
            raise ClusterError(str(exc)) from None
        finally:
            if free is not None:
                free.close()
        if not free_ports:
            cls._check_ports_free(layout)
        os.makedirs(data_dir, exist_ok=True)
        write_private_file(layout.secret_file, (generate_secret() + "\n").encode())
        if tls:
            from minibroker.testing.local_ca import LocalCAError, create_cluster_certificates
            try:
                create_cluster_certificates(layout.tls_dir, layout.hosts(), layout.client_properties())
            except LocalCAError as exc:
                raise ClusterError(str(exc)) from None
        cluster = cls(layout)
        cluster._write_configs()
        cluster.save()
        return cluster

    @staticmethod
    def _check_ports_free(layout: ClusterLayout) -> None:
        addrs = [layout.controller] + [(b.host, b.port) for b in layout.brokers] + \
                [(b.host, b.kafka_port) for b in layout.brokers if b.kafka_port] + \
                [a for b in layout.brokers for a in b.internal.values()] + [r.listen for r in layout.routes] + \
                [a for a in [layout.controller_metrics] + [b.metrics for b in layout.brokers] if a is not None]
        if layout.proxy_control:
            addrs.append(layout.proxy_control)
        for host, port in addrs:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as the servers bind
                try:
                    s.bind((host, port))
                except OSError as exc:
                    raise ClusterError(f"{host}:{port} is in use ({exc.strerror}); is another cluster running? "
                                       f"(`minibroker cluster status`, or use another --data-dir)") from None

    @classmethod
    def load(cls, data_dir: str) -> LocalCluster:
        path = state_path(os.path.abspath(data_dir))
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except FileNotFoundError:
            raise ClusterError(f"no local cluster in {os.path.abspath(data_dir)} (no {STATE_FILE}); "
                               f"start one with `minibroker cluster up`") from None
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {path}: {exc}") from None
        cluster = cls(ClusterLayout.from_dict(d["layout"]), d.get("pids"), d.get("blocked"))
        old_secret = d["layout"].get("secret")
        if old_secret:
            # A cluster laid out before secrets moved to a 0600 file: move it there.
            write_private_file(cluster.layout.secret_file, (old_secret + "\n").encode())
            cluster._write_configs()
            cluster.save()
        return cluster

    def save(self) -> None:
        path = state_path(self.layout.data_dir)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "layout": self.layout.to_dict(), "pids": self.pids,
                       "blocked": self.blocked, "bootstrap": self.layout.bootstrap,
                       "kafka_bootstrap": self.layout.kafka_bootstrap}, f, indent=1)
        os.replace(tmp, path)

    def _write_configs(self) -> None:
        d = self.layout.node_dir("controller")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "controller.properties"), "w", encoding="utf-8") as f:
            f.write(properties_text(self.layout.controller_config(), "minibroker controller (written by cluster up)"))
        for b in self.layout.brokers:
            d = self.layout.node_dir(b.name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "broker.properties"), "w", encoding="utf-8") as f:
                f.write(properties_text(self.layout.broker_config(b.node_id),
                                        f"minibroker broker {b.node_id} (written by cluster up)"))
        if self.layout.proxied:
            os.makedirs(self.layout.node_dir("proxy"), exist_ok=True)

    # -- processes ----------------------------------------------------------------------

    @property
    def data_dir(self) -> str:
        return self.layout.data_dir

    @property
    def bootstrap(self) -> str:
        return self.layout.bootstrap

    @property
    def kafka_bootstrap(self) -> str:
        """Bootstrap servers for Kafka clients (each broker's KAFKA listener)."""
        return self.layout.kafka_bootstrap

    @property
    def broker_ids(self) -> list[int]:
        return [b.node_id for b in self.layout.brokers]

    def process_names(self) -> list[str]:
        names = ["proxy"] if self.layout.proxied else []
        return names + ["controller"] + [b.name for b in self.layout.brokers]

    def _command(self, name: str) -> list[str]:
        if name == "proxy":
            return [sys.executable, "-m", "minibroker.testing.proxy", state_path(self.data_dir)]
        if name == "controller":
            return [sys.executable, "-m", "minibroker.cli", "controller", "--config",
                    os.path.join(self.layout.node_dir("controller"), "controller.properties")]
        return [sys.executable, "-m", "minibroker.cli", "broker", "--config",
                os.path.join(self.layout.node_dir(name), "broker.properties")]

    def log_path(self, name: str) -> str:
        return os.path.join(self.layout.node_dir(name), f"{name.split('-')[0]}.log")

    def _spawn(self, name: str) -> int:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
        env["PYTHONUNBUFFERED"] = "1"
        os.makedirs(self.layout.node_dir(name), exist_ok=True)
        with open(self.log_path(name), "ab") as logf:
            logf.write(f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}\n".encode())
            logf.flush()
            p = subprocess.Popen(self._command(name), stdout=logf, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, cwd=self.layout.node_dir(name), env=env,
                                 start_new_session=True)
        self._popens[p.pid] = p
        self.pids[name] = p.pid
        self.save()
        return p.pid

    def _alive(self, name: str) -> bool:
        pid = self.pids.get(name)
        if not pid:
            return False
        p = self._popens.get(pid)
        if p is not None:
            return p.poll() is None
        return pid_alive(pid) and self._owns(pid, name)

    def _owns(self, pid: int, name: str) -> bool:
        """The pid still runs our command (not a reused pid)."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            return True
        key = self._command(name)[-1].encode()
        return key in args

    def info(self) -> list[ProcessInfo]:
        out = []
        for name in self.process_names():
            pid = self.pids.get(name)
            alive = self._alive(name)
            out.append(ProcessInfo(name, pid, alive, alive and proc_state(pid) == "T"))  # type: ignore[arg-type]
        return out

    def start(self) -> None:
        """Start every process that is not running (proxy, controller, then brokers)."""
        for name in self.process_names():
            if not self._alive(name):
                self._spawn(name)
                if name == "proxy":
                    self._wait_listening(name, self.layout.proxy_control)  # type: ignore[arg-type]
                elif name == "controller":
                    self._wait_listening(name, self.layout.controller)
        if self.layout.proxied and self.blocked:
            for src, dst in self.blocked:
                self._proxy({"op": "block", "src": src, "dst": dst})

    def _wait_listening(self, name: str, addr: tuple[str, int], timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection(addr, timeout=1):
                    return
            except OSError:
                if not self._alive(name):
                    raise ClusterError(f"{name} exited; last lines of {self.log_path(name)}:\n"
                                       + self.log_tail(name)) from None
                if time.monotonic() > deadline:
                    raise ClusterError(f"{name} did not listen on {addr[0]}:{addr[1]} within {timeout_s}s") from None
                time.sleep(0.02)

    async def wait_running(self, timeout_s: float = 60.0, brokers: list[int] | None = None) -> None:
        """Until every (given) broker reports RUNNING through ApiVersions."""
        ids = brokers or self.broker_ids
        deadline = time.monotonic() + timeout_s
        pending = set(ids)
        last: dict[int, str] = {}
        async with Admin(self.bootstrap, {"request.timeout.ms": "2000", "reconnect.backoff.max.ms": "200",
                                          **self.client_properties}) as admin:
            while pending:
                for b in sorted(pending):
                    self._check_started(b)
                    spec = self.layout.broker(b)
                    try:
                        resp = await admin.api_versions((spec.host, spec.port))
                        last[b] = resp.get("state", "?")
                        if last[b] == "RUNNING":
                            pending.discard(b)
                    except KafkaError as exc:
                        last[b] = str(exc)
                self._check_startup_round(pending, last, deadline, timeout_s)
                if pending:
                    await asyncio.sleep(0.1)

    def broker_state_sync(self, broker: int, timeout_s: float = 2.0) -> str:
        """ApiVersions over a plain blocking socket (usable where no event loop may run)."""
        spec = self.layout.broker(broker)
        with socket.create_connection((spec.host, spec.port), timeout=timeout_s) as plain:
            s = plain
            if self.layout.tls:
                s = ssl.create_default_context(cafile=self.layout.ca_file).wrap_socket(plain, server_hostname=spec.host)
            s.sendall(encode_frame({"api": int(ApiKey.API_VERSIONS), "v": 0, "id": 1, "client": "cluster"}))
            dec = FrameDecoder()
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    raise OSError("connection closed")
                msgs = dec.feed(chunk)
                if msgs:
                    return str(msgs[0].get("state", "?"))

    def wait_running_sync(self, timeout_s: float = 60.0, brokers: list[int] | None = None) -> None:
        """`wait_running` without asyncio (for sync test fixtures)."""
        pending = set(brokers or self.broker_ids)
        deadline = time.monotonic() + timeout_s
        last: dict[int, str] = {}
        while pending:
            for b in sorted(pending):
                self._check_started(b)
                try:
                    last[b] = self.broker_state_sync(b)
                except OSError as exc:
                    last[b] = str(exc)
                if last[b] == "RUNNING":
                    pending.discard(b)
            self._check_startup_round(pending, last, deadline, timeout_s)
            if pending:
                time.sleep(0.05)

    def _check_started(self, broker: int) -> None:
        """wait_running(_sync): a broker that exited during startup fails the wait."""
        name = f"broker-{broker}"
        if not self._alive(name):
            raise ClusterError(f"{name} exited during startup; last lines of {self.log_path(name)}:\n"
                               + self.log_tail(name))

    def _check_startup_round(self, pending: set[int], last: dict[int, str], deadline: float,
                             timeout_s: float) -> None:
        """wait_running(_sync), after each round over the brokers: fail if the
        controller exited, or if brokers are still `pending` past `deadline`
        (naming the state `last` seen for each)."""
        if not self._alive("controller"):
            raise ClusterError(f"the controller exited; last lines of {self.log_path('controller')}:\n"
                               + self.log_tail("controller"))
        if pending and time.monotonic() > deadline:
            raise ClusterError("brokers not RUNNING after {:.0f}s: {}".format(
                timeout_s, ", ".join(f"broker {b}: {last.get(b, '?')}" for b in sorted(pending))))

    async def up(self, timeout_s: float = 60.0) -> None:
        self.start()
        await self.wait_running(timeout_s)

    def _signal(self, name: str, sig: int) -> bool:
        pid = self.pids.get(name)
        if not pid or not self._alive(name):
            return False
        try:
            os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False

    def _wait_exit(self, name: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._alive(name):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        self._reap(name)
        return True

    def _reap(self, name: str) -> None:
        pid = self.pids.get(name)
        p = self._popens.pop(pid, None) if pid else None
        if p is not None:
            try:
                p.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass

    def stop_process(self, name: str, timeout_s: float = 30.0) -> None:
        """SIGTERM (a broker runs its controlled shutdown), SIGKILL after `timeout_s`."""
        if self._alive(name):
            self._signal(name, signal.SIGCONT)
            self._signal(name, signal.SIGTERM)
            if not self._wait_exit(name, timeout_s):
                self._signal(name, signal.SIGKILL)
                self._wait_exit(name, 5)
        self.pids[name] = None
        self.save()

    def down(self, timeout_s: float = 30.0) -> None:
        """Stop brokers (in parallel), then the controller, then the proxy."""
        brokers = [b.name for b in self.layout.brokers if self._alive(b.name)]
        for name in brokers:
            self._signal(name, signal.SIGCONT)
            self._signal(name, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for name in brokers:
            if not self._wait_exit(name, max(0.0, deadline - time.monotonic())):
                self._signal(name, signal.SIGKILL)
                self._wait_exit(name, 5)
        for name in self.process_names():
            if name.startswith("broker-"):
                self.pids[name] = None
        for name in ("controller", "proxy"):
            if name in self.process_names():
                self.stop_process(name, 10)
        self.save()

    def destroy(self, remove_data: bool = False) -> None:
        """Kill everything at once (tests); the data directory stays unless `remove_data`."""
        for name in self.process_names():
            self._signal(name, signal.SIGCONT)
            self._signal(name, signal.SIGKILL)
        for name in self.process_names():
            self._wait_exit(name, 5)
            self.pids[name] = None
        self.save()
        if remove_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- faults -------------------------------------------------------------------------

    def _broker_name(self, broker: int) -> str:
        """The process name of node `broker`; 0 (CONTROLLER_ID) is the controller."""
        if broker == CONTROLLER_ID:
            return "controller"
        try:
            return self.layout.broker(broker).name
        except KeyError as exc:
            raise ClusterError(str(exc.args[0])) from None

    def stop(self, broker: int, timeout_s: float = 30.0) -> None:
        """Clean shutdown (SIGTERM: a broker runs its controlled shutdown); it stays down."""
        name = self._broker_name(broker)
        if not self._alive(name):
            raise ClusterError(f"{name} is not running")
        self.stop_process(name, timeout_s)

    def kill(self, broker: int) -> None:
        """SIGKILL: no controlled shutdown, no clean-shutdown marker (KIP-966 unclean)."""
        name = self._broker_name(broker)
        if not self._signal(name, signal.SIGKILL):
            raise ClusterError(f"{name} is not running")
        self._wait_exit(name, 10)
        self.pids[name] = None
        self.save()

    def pause(self, broker: int) -> None:
        """SIGSTOP: the process freezes; its sockets stay open, peers see silence."""
        name = self._broker_name(broker)
        if not self._signal(name, signal.SIGSTOP):
            raise ClusterError(f"{name} is not running")

    def resume(self, broker: int) -> None:
        name = self._broker_name(broker)
        if not self._signal(name, signal.SIGCONT):
            raise ClusterError(f"{name} is not running")

    def start_broker(self, broker: int) -> None:
        name = self._broker_name(broker)
        if self._alive(name):
            raise ClusterError(f"{name} is already running (pid {self.pids.get(name)})")
        self._spawn(name)

    def restart(self, broker: int, *, hard: bool = False, timeout_s: float = 30.0) -> None:
        """Stop (SIGTERM, or SIGKILL with `hard`) if running, then start with the same config."""
        name = self._broker_name(broker)
        if self._alive(name):
            if hard:
                self.kill(broker)
            else:
                self.stop_process(name, timeout_s)
        self._spawn(name)

    def restart_controller(self, *, hard: bool = False) -> None:
        if self._alive("controller"):
            if hard:
                self._signal("controller", signal.SIGKILL)
                self._wait_exit("controller", 10)
            else:
                self.stop_process("controller", 10)
        self._spawn("controller")

    def _proxy(self, req: dict[str, Any]) -> dict[str, Any]:
        if not self.layout.proxied or self.layout.proxy_control is None:
            raise ClusterError("this cluster runs without the fault proxy (created with proxies off); "
                               "isolate/heal need it")
        if not self._alive("proxy"):
            raise ClusterError(f"the fault proxy is not running; see {self.log_path('proxy')}")
        with socket.create_connection(self.layout.proxy_control, timeout=5) as s:
            s.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        resp = json.loads(buf or b"{}")
        if not resp.get("ok"):
            raise ClusterError(f"fault proxy: {resp.get('error', 'no answer')}")
        self.blocked = resp.get("blocked", [])
        self.save()
        return resp

    def isolate(self, node: int) -> None:
        """Cut every inter-broker and controller path from and to `node` (0 = the controller)."""
        if node != CONTROLLER_ID:
            self.layout.broker(node)
        self._proxy({"op": "isolate", "node": node})

    def heal(self, node: int | None = None) -> None:
        """Restore the paths of `node`, or every cut path when None."""
        if node is None:
            for src, dst in list(self.blocked):
                self._proxy({"op": "unblock", "src": src, "dst": dst})
        else:
            self._proxy({"op": "heal", "node": node})

    def block(self, src: int, dst: int) -> None:
        """Cut one path: connections from node `src` to node `dst` (0 = controller)."""
        self._proxy({"op": "block", "src": src, "dst": dst})

    def unblock(self, src: int, dst: int) -> None:
        self._proxy({"op": "unblock", "src": src, "dst": dst})

    def hold(self, src: int, dst: int, direction: str = "both", after: int = 0) -> None:
        """Delay one path without cutting it: frames in `direction` ("requests" from src to
        dst, "responses" back, or "both") are buffered in the proxy until `release`, after
        letting `after` more frames through on each connection (1 on a new connection: its
        authentication)."""
        self._proxy({"op": "hold", "src": src, "dst": dst, "direction": direction, "after": after})

    def release(self, src: int, dst: int) -> None:
        """Deliver what a hold kept back, in order, and stop holding."""
        self._proxy({"op": "release", "src": src, "dst": dst})

    # -- helpers for tests and the CLI -------------------------------------------------------

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            with open(self.log_path(name), "rb") as f:
                data = f.read()[-20000:]
        except OSError:
            return "(no log)"
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    def broker_address(self, broker: int) -> str:
        return self.layout.broker(broker).address

    @property
    def controller_address(self) -> str:
        return f"{self.layout.controller[0]}:{self.layout.controller[1]}"

    @property
    def client_properties(self) -> dict[str, str]:
        """What a client needs besides the bootstrap servers (TLS settings for a --tls cluster)."""
        return self.layout.client_properties()

    def admin(self, **config: Any) -> Admin:
        return Admin(self.bootstrap, {**self.client_properties, **config})

    def producer(self, config: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        from minibroker.client.producer import Producer
        return Producer(self.bootstrap, {**self.client_properties, **(config or {})}, **kw)

    def consumer(self, config: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        from minibroker.client.consumer import Consumer
        return Consumer(self.bootstrap, {**self.client_properties, **(config or {})}, **kw)

    async def __aenter__(self) -> LocalCluster:
        try:
            await self.up()
        except BaseException:
            self.destroy()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.destroy()


async def wait_for(condition: Callable[[], Any] | Callable[[], Awaitable[Any]], *, timeout_s: float = 30.0,
                   interval_s: float = 0.05, what: str = "condition") -> Any:
    """Poll `condition` (sync or async) until it returns a truthy value; return it.
    Exceptions from the condition count as "not yet" (the last one is reported)."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            r = condition()
            if asyncio.iscoroutine(r) or isinstance(r, asyncio.Future):
                r = await r
            if r:
                return r
        except (KafkaError, OSError, AssertionError, KeyError) as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout_s}s"
                               + (f" (last error: {last_exc!r})" if last_exc else ""))
        await asyncio.sleep(interval_s)
