"""Running `minibroker` as a user does, in a subprocess, against a cluster it started."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from minibroker.testing.cluster import LocalCluster


def run(env: dict[str, str], *args: str, input: bytes | None = None,
        timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minibroker.cli", *args], input=input, env=env,
                          capture_output=True, timeout=timeout)


def cluster_cli(c: LocalCluster, *args: str, input: bytes | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
    """`minibroker ARGS` bootstrapping from cluster `c` (no other MINIBROKER_ setting of this process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    env["MINIBROKER_BOOTSTRAP"] = c.bootstrap
    return run(env, *args, input=input, timeout=timeout)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, (r.stdout.decode(), r.stderr.decode())
    return r.stdout.decode()


@contextmanager
def cli_cluster(home: str, *up_args: str) -> Iterator[dict[str, str]]:
    """`minibroker cluster up UP_ARGS` with MINIBROKER_HOME=home; yields the environment
    (its `_UP_OUTPUT` holds what `up` printed); `cluster down`, then SIGKILL what is left."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    e["MINIBROKER_HOME"] = home
    e["_UP_OUTPUT"] = ok(run(e, "cluster", "up", *up_args))
    try:
        yield e
    finally:
        try:
            run(e, "cluster", "down", "--timeout", "5", timeout=60)
        finally:
            try:
                LocalCluster.load(home).destroy()
            except Exception:
                pass
