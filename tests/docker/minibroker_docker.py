"""Driving Docker, Compose and the host CLI for the docker tests.

Owns: finding a Docker engine and a Compose tool (v2 `docker compose` or v1
`docker-compose`), one compose project's lifecycle, and every minibroker CLI
call the tests make (kept in `HostCli`, so a flag that changes is changed
here once). Must not know the scenario: the tests decide what to check.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from collections.abc import Callable, Sequence

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
BUILD_IMAGES = ROOT / "bin" / "build-images"
IMAGE = os.environ.get("MINIBROKER_IMAGE_TAG", "minibroker:dev")
BROKER_PORTS = {1: 19092, 2: 29092, 3: 31092}     # EXTERNAL listeners published on the host
CONTROLLER_PORT = 19093                            # the controller, published for `watch`
# Every host port docker-compose.yml publishes (listeners, metrics): all must be free before `up`.
PUBLISHED_PORTS = sorted({int(p) for p in re.findall(r"127\.0\.0\.1:(\d+):",
                                                     (ROOT / "docker-compose.yml").read_text())})

T = TypeVar("T")


def run(cmd: Sequence[str], *, timeout: float, check: bool = True, input: str | None = None,
        env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), input=input, capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd, stdin=None if input is not None else subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n"
                             f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
    return proc


def wait_until(probe: Callable[[], T | None], *, timeout: float, what: str,
               interval: float = 0.5) -> T:
    """Poll `probe` until it returns something truthy; fail after `timeout` seconds
    with the last value seen. `interval` only paces the polling."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = probe()
        except AssertionError as exc:       # a CLI call that failed this round
            last = exc
        if last and not isinstance(last, AssertionError):
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last}")
        time.sleep(interval)


# -- Docker and Compose --------------------------------------------------------

def docker_engine_problem() -> str | None:
    """Why there is no usable Docker engine here, or None when there is one."""
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "docker info did not answer within 30 s"
    if proc.returncode != 0 or not proc.stdout.strip():
        return f"no Docker engine is reachable: {proc.stderr.strip()[:300]}"
    return None


def compose_command() -> list[str]:
    """`docker compose` (v2) where the plugin exists, else `docker-compose` (v1)."""
    try:
        v2 = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True,
                            timeout=30, stdin=subprocess.DEVNULL)
        if v2.returncode == 0:
            return ["docker", "compose"]
    except (OSError, subprocess.TimeoutExpired):
        pass
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise AssertionError("a Docker engine is present but neither `docker compose` nor `docker-compose` is")


def ports_in_use(ports: Sequence[int]) -> list[int]:
    busy = []
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    return busy


@dataclass
class ComposeProject:
    """One `docker compose -p NAME -f docker-compose.yml` project."""
    name: str
    compose: list[str]
    file: Path = COMPOSE_FILE

    @property
    def is_v1(self) -> bool:
        return self.compose == ["docker-compose"]

    def __call__(self, *args: str, timeout: float = 120, check: bool = True,
                 input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "MINIBROKER_IMAGE": IMAGE}
        return run([*self.compose, "-p", self.name, "-f", str(self.file), *args],
                   timeout=timeout, check=check, input=input, env=env)

    def container_ids(self) -> dict[str, str]:
        """service name -> container id, for the project's containers (running or not)."""
        out = run(["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={self.name}",
                   "--format", '{{.ID}} {{.Label "com.docker.compose.service"}}'], timeout=30).stdout
        return {svc: cid for cid, svc in (line.split() for line in out.splitlines() if line.strip())}

    def health(self) -> dict[str, str]:
        """service name -> health status (`healthy`, `starting`, `unhealthy`) or the
        container state when it is not running."""
        ids = self.container_ids()
        if not ids:
            return {}
        out = run(["docker", "inspect", "--format", "{{json .State}}", *ids.values()], timeout=30).stdout
        states = [json.loads(line) for line in out.splitlines() if line.strip()]
        return {svc: (st.get("Health") or {}).get("Status", "no-healthcheck") if st["Running"] else st["Status"]
                for svc, st in zip(ids, states, strict=False)}

    def up_wait(self, services: Sequence[str], timeout: float) -> float:
        """`up -d --wait` (v2); v1 has no --wait, so poll the containers' health instead.
        Returns the seconds it took to be healthy."""
        started = time.monotonic()
        if not self.is_v1:
            self("up", "-d", "--no-build", "--wait", *services, timeout=timeout)
        else:
            self("up", "-d", "--no-build", *services, timeout=timeout)

            def all_healthy() -> bool:
                h = self.health()
                bad = {s: h.get(s, "missing") for s in services if h.get(s) != "healthy"}
                if any(v in ("unhealthy", "exited", "dead") for v in bad.values()):
                    raise RuntimeError(f"containers failed to become healthy: {bad}")
                return not bad

            try:
                wait_until(all_healthy, timeout=timeout, what=f"{', '.join(services)} to be healthy")
            except RuntimeError as exc:
                raise AssertionError(str(exc)) from None
        return time.monotonic() - started

    def logs(self, tail: int = 150) -> str:
        proc = self("logs", "--no-color", "--tail", str(tail), timeout=60, check=False)
        return proc.stdout + proc.stderr

    def down(self) -> subprocess.CompletedProcess[str]:
        return self("down", "--volumes", "--remove-orphans", "--timeout", "3", timeout=180, check=False)

    def leftovers(self) -> list[str]:
        """Containers, networks and volumes still labelled with this project."""
        found = []
        for kind in ("ps -a", "network ls", "volume ls"):
            out = run(["docker", *kind.split(), "-q", "--filter",
                       f"label=com.docker.compose.project={self.name}"], timeout=30).stdout.split()
            found += [f"{kind.split()[0]} {x}" for x in out]
        return found


# -- the minibroker CLI on the host --------------------------------------------

@dataclass(frozen=True)
class PartitionRow:
    """One partition line of `topics describe`."""
    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]

    @classmethod
    def parse(cls, line: str) -> PartitionRow | None:
        fields = {}
        for part in line.strip().split("\t"):
            key, sep, value = part.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "Partition" not in fields:
            return None

        def ids(s: str) -> tuple[int, ...]:
            return tuple(int(x) for x in s.split(",") if x.strip() and x.strip() != "N/A")

        leader = fields.get("Leader", "none")
        return cls(partition=int(fields["Partition"]),
                   leader=None if leader in ("none", "-1", "") else int(leader),
                   leader_epoch=int(fields.get("LeaderEpoch", "-1")),
                   replicas=ids(fields.get("Replicas", "")), isr=ids(fields.get("Isr", "")),
                   elr=ids(fields.get("Elr", "")))


class HostCli:
    """The minibroker CLI as a user runs it on the host, against published ports.
    Every flag the docker tests use is in this class."""

    def __init__(self) -> None:
        self.base = [sys.executable, "-m", "minibroker.cli"]
        self.env = {k: v for k, v in os.environ.items() if k != "MINIBROKER_BOOTSTRAP"}

    def __call__(self, *args: str, bootstrap: str, timeout: float = 60, check: bool = True,
                 input: str | None = None) -> subprocess.CompletedProcess[str]:
        return run([*self.base, *args, "--bootstrap-server", bootstrap],
                   timeout=timeout, check=check, input=input, env=self.env)

    def create_topic(self, topic: str, *, partitions: int, replication_factor: int,
                     min_isr: int, bootstrap: str) -> None:
        self("topics", "create", "--topic", topic, "--partitions", str(partitions),
             "--replication-factor", str(replication_factor),
             "--config", f"min.insync.replicas={min_isr}", bootstrap=bootstrap)

    def describe(self, topic: str, *, bootstrap: str) -> list[PartitionRow]:
        out = self("topics", "describe", "--topic", topic, "--leader-epoch",
                   bootstrap=bootstrap, timeout=30).stdout
        return [row for row in map(PartitionRow.parse, out.splitlines()) if row is not None]

    def produce(self, topic: str, values: Sequence[str], *, bootstrap: str,
                properties: dict[str, str] | None = None,
                timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """acks=all; exit status 0 iff every record was acknowledged."""
        props = [arg for k, v in (properties or {}).items() for arg in ("--producer-property", f"{k}={v}")]
        return self("produce", "--topic", topic, "--acks", "all", *props, bootstrap=bootstrap,
                    input="".join(v + "\n" for v in values), timeout=timeout, check=False)

    def consume_all(self, topic: str, *, bootstrap: str) -> list[str]:
        out = self("consume", "--topic", topic, "--from-beginning", "--timeout-ms", "5000",
                   bootstrap=bootstrap, timeout=120).stdout
        return [line for line in out.splitlines() if line]

    def offsets(self, topic: str, *, bootstrap: str) -> dict[int, int]:
        out = self("offsets", "--topic", topic, bootstrap=bootstrap, timeout=30).stdout
        result = {}
        for line in out.splitlines():
            name, partition, offset = line.strip().rsplit(":", 2)
            if name == topic:
                result[int(partition)] = int(offset)
        return result
