"""bench/leader_path.py drives a real ReplicaManager through the awaited acks=all cycle (straight to the
handlers, and through the request server on in-memory transports): it completes every record it sends
and prints its figure. What the figure is, is not tested."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "leader_path.py"


@pytest.mark.parametrize("extra", [[], ["--server"]])
def test_the_leader_path_bench_runs_every_cycle(extra: list[str]) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--records", "200", "--runs", "1", *extra],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert out.returncode == 0, out.stderr
    assert "200 awaited records" in out.stdout and "us/record" in out.stdout
    assert ("through the request server" in out.stdout) == bool(extra)
