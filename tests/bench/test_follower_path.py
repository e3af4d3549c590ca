"""bench/follower_path.py drives a real ReplicaManager's follower fetcher through the awaited cycle against an
in-memory leader (straight to the fake leader, and through a real Connection on an in-memory transport): it
appends every record the leader sends and prints its figure. What the figure is, is not tested."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "follower_path.py"


@pytest.mark.parametrize("extra", [[], ["--wire"]])
def test_the_follower_path_bench_runs_every_cycle(extra: list[str]) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(SCRIPT), "--records", "200", "--runs", "1", *extra],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "200 awaited records" in out.stdout and "us/record" in out.stdout
    assert ("through a Connection" in out.stdout) == bool(extra)
