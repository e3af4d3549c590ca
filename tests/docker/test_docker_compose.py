"""Ring 4: the image and docker-compose.yml, used as the README tells users to.

Builds the images offline (bin/build-images: no registry needed), brings the
compose cluster up, drives it with the CLI on the host through the published
ports, breaks it with `docker compose kill`, and tears everything down
(containers, networks, volumes) whatever happens. Skipped, with the reason,
only where no Docker engine answers.
"""
from __future__ import annotations

import fcntl
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable

import pytest

from minibroker_docker import (
    BROKER_PORTS, BUILD_IMAGES, CONTROLLER_PORT, IMAGE, PUBLISHED_PORTS, ComposeProject, HostCli, PartitionRow,
    compose_command, docker_engine_problem, ports_in_use, run, wait_until,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]

SESSION_TIMEOUT_S = 6       # broker.session.timeout.ms in docker-compose.yml
FENCING_SLACK_S = 14        # heartbeat, election, metadata propagation, CLI start-up
CLUSTER = ["controller", "broker-1", "broker-2", "broker-3"]
NOT_ENOUGH_REPLICAS = re.compile(r"\bNOT_ENOUGH_REPLICAS\b(?!_AFTER_APPEND)")


@pytest.fixture(scope="module")
def compose() -> list[str]:
    problem = docker_engine_problem()
    if problem:
        pytest.skip(f"docker tests need a Docker engine: {problem}")
    return compose_command()


@pytest.fixture(scope="module")
def machine_lock(compose: list[str]):
    """One compose stack per machine at a time: the compose file publishes fixed host ports
    and every run builds the same image tag, so two suites running at once (CI's parallel
    check) take turns here instead of failing on each other's ports."""
    with open(os.path.join(tempfile.gettempdir(), "minibroker-docker-tests.lock"), "w") as f:
        deadline = time.monotonic() + 1800
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail("another suite's docker tests held the machine lock for 30 minutes")
                time.sleep(1)     # polling a lock with a deadline
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def image(compose: list[str], machine_lock: None) -> str:
    """bin/build-images: the local base (debootstrap, once), wheels, minibroker:dev."""
    started = time.monotonic()
    proc = run([str(BUILD_IMAGES)], timeout=1100)
    print(proc.stderr, f"bin/build-images took {time.monotonic() - started:.1f}s", sep="")
    return IMAGE


@pytest.fixture
def project(compose: list[str], image: str):
    # The published ports lie below Linux's ephemeral range (docker-compose.yml says why),
    # but a stack left up holds them for good.
    # Every published port: another suite's local clusters take ephemeral ports, which can be one of
    # these for as long as that cluster lives (a minute or two), so wait that long.
    ports = PUBLISHED_PORTS
    try:
        wait_until(lambda: not ports_in_use(ports), timeout=180, what=f"host ports {ports} to be free")
    except AssertionError:
        pytest.fail(f"host ports {ports_in_use(ports)} are taken (is another minibroker compose "
                    f"stack up? `docker compose down` it first)")
    proj = ComposeProject(name=f"mbtest{uuid.uuid4().hex[:10]}", compose=compose)
    try:
        yield proj
    finally:
        down = proj.down()
        left = proj.leftovers()
        assert not left, f"compose down left {left} behind:\n{down.stdout}{down.stderr}"


def test_compose_file_is_valid(compose: list[str]) -> None:
    proj = ComposeProject(name="mbconfigcheck", compose=compose)
    proj("config", "--quiet", timeout=60)
    services = set(proj("config", "--services", timeout=60).stdout.split())
    assert set(CLUSTER) <= services


def test_image_runs_the_package_as_a_non_root_user(image: str) -> None:
    out = run(["docker", "run", "--rm", "--entrypoint", "python", image, "-c",
               "import os, sys, minibroker; print(os.getuid(), sys.version_info >= (3, 11))"],
              timeout=120).stdout.split()
    assert out[0] != "0" and out[1] == "True"
    cfg = run(["docker", "image", "inspect", "--format",
               "{{json .Config.Healthcheck.Test}}|{{json .Config.Volumes}}|{{.Config.User}}", image],
              timeout=60).stdout.strip()
    health, volumes, user = cfg.split("|")
    assert "health" in health and "/var/lib/minibroker" in volumes and not user.startswith("0")


def test_image_entrypoint_is_the_cli(image: str) -> None:
    out = run(["docker", "run", "--rm", image, "--help"], timeout=120).stdout
    assert "broker" in out and "controller" in out


def test_compose_cluster_survives_follower_and_leader_kills(project: ComposeProject) -> None:
    """The README's walkthrough: ISR shrink, NOT_ENOUGH_REPLICAS, rejoin, new leader, no loss."""
    cli = HostCli()
    alive = {1, 2, 3}
    acked: list[str] = []
    attempted: list[str] = []

    def bootstrap() -> str:
        return ",".join(f"localhost:{BROKER_PORTS[b]}" for b in sorted(alive))

    def orders() -> PartitionRow:
        rows = cli.describe("orders", bootstrap=bootstrap())
        assert len(rows) == 1, rows
        return rows[0]

    def wait_for(condition: Callable[[PartitionRow], bool], what: str, timeout: float) -> PartitionRow:
        def probe() -> PartitionRow | None:
            row = orders()
            return row if condition(row) else None
        return wait_until(probe, timeout=timeout, what=what)

    def produce_acked(label: str, n: int = 10) -> None:
        values = [f"{label}-{i}" for i in range(n)]
        attempted.extend(values)
        proc = cli.produce("orders", values, bootstrap=bootstrap())
        assert proc.returncode == 0, f"acks=all produce failed:\n{proc.stdout}{proc.stderr}"
        acked.extend(values)

    def kill(broker: int) -> None:
        project("kill", f"broker-{broker}")
        alive.discard(broker)

    def step(text: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {text}")

    t0 = time.monotonic()
    try:
        took = project.up_wait(CLUSTER, timeout=180)
        step(f"compose up: healthy after {took:.1f}s")
        volumes = project.leftovers()
        assert sum(v.startswith("volume") for v in volumes) == 5, volumes     # 4 data + cluster-secret
        # No built-in secret: the one-shot `secret` service generated one, 0600, not in any environment.
        mode = project("exec", "-T", "controller", "python", "-c",
                       "import os; print(oct(os.stat('/var/lib/minibroker-secret/cluster.secret').st_mode & 0o777))",
                       timeout=60).stdout.strip()
        assert mode == "0o600", mode

        cli.create_topic("orders", partitions=1, replication_factor=3, min_isr=2,
                         bootstrap="localhost:19092")
        start = wait_for(lambda r: r.leader is not None and set(r.isr) == {1, 2, 3},
                         "orders to have a leader and a full ISR", timeout=30)
        step(f"created: {start}")
        produce_acked("isr3")

        leader = start.leader
        assert leader is not None
        first, second = [b for b in start.replicas if b != leader]

        kill(first)
        t = time.monotonic()
        shrunk = wait_for(lambda r: first not in r.isr, f"broker {first} to leave the ISR",
                          timeout=SESSION_TIMEOUT_S + FENCING_SLACK_S)
        step(f"killed broker-{first}: ISR shrank in {time.monotonic() - t:.1f}s: {shrunk}")
        assert set(shrunk.isr) == {leader, second} and shrunk.leader == leader
        produce_acked("isr2")

        kill(second)
        t = time.monotonic()
        alone = wait_for(lambda r: second not in r.isr, f"broker {second} to leave the ISR",
                         timeout=SESSION_TIMEOUT_S + FENCING_SLACK_S)
        step(f"killed broker-{second}: ISR shrank in {time.monotonic() - t:.1f}s: {alone}")
        assert set(alone.isr) == {leader} and alone.leader == leader
        rejected = [f"isr1-{i}" for i in range(5)]
        attempted.extend(rejected)
        # NOT_ENOUGH_REPLICAS is retriable: with the producer's default retries the
        # record would only expire after delivery.timeout.ms (2 min). Three retries
        # is kafka-console-producer's --message-send-max-retries default.
        proc = cli.produce("orders", rejected, bootstrap=bootstrap(), properties={"retries": "3"})
        step(f"produce at ISR=1: exit {proc.returncode}")
        assert proc.returncode != 0 and NOT_ENOUGH_REPLICAS.search(proc.stdout + proc.stderr), \
            f"expected NOT_ENOUGH_REPLICAS:\n{proc.stdout}{proc.stderr}"

        project("start", f"broker-{first}", f"broker-{second}")
        states = project.health()       # compose v1 can exit 0 though a container failed to start
        assert all(states.get(f"broker-{b}") in ("starting", "healthy", "unhealthy") for b in (first, second)), \
            f"a restarted broker is not running: {states}"
        alive |= {first, second}
        t = time.monotonic()
        whole = wait_for(lambda r: set(r.isr) == {1, 2, 3}, "the ISR to be whole again", timeout=90)
        step(f"restarted both: ISR whole in {time.monotonic() - t:.1f}s: {whole}")
        produce_acked("healed")

        before = orders()
        assert before.leader is not None
        expected = next(b for b in before.replicas if b in before.isr and b != before.leader)
        kill(before.leader)
        t = time.monotonic()
        after = wait_for(lambda r: r.leader not in (None, before.leader), "a new leader",
                         timeout=SESSION_TIMEOUT_S + FENCING_SLACK_S)
        step(f"killed leader broker-{before.leader}: new leader in {time.monotonic() - t:.1f}s: {after}")
        assert after.leader_epoch > before.leader_epoch
        assert after.leader == expected, "the first in-sync replica in replica order leads"
        produce_acked("newleader")

        consumed = cli.consume_all("orders", bootstrap=bootstrap())
        step(f"consumed {len(consumed)} records, {len(acked)} acknowledged")
        missing = [v for v in acked if v not in consumed]
        assert not missing, f"acknowledged records lost: {missing}"
        in_order = [v for v in consumed if v in set(acked)]
        assert sorted(set(in_order), key=in_order.index) == acked, "acknowledged records out of order"
        assert set(consumed) <= set(attempted), f"records nobody produced: {set(consumed) - set(attempted)}"
        assert cli.offsets("orders", bootstrap=bootstrap()) == {0: len(consumed)}
    except BaseException:
        print(project.logs())
        raise
