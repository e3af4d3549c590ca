"""ruff over the package and tests, mypy --strict over the pure cores: part of the suite, so CI runs them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

# The pure cores: state machines that take now_ms and return decisions.
CORES = [
    "minibroker/replication",
    "minibroker/controller/state.py",
    "minibroker/controller/election.py",
    "minibroker/controller/placement.py",
    "minibroker/coordinator/group.py",
    "minibroker/broker/lifecycle.py",
    "minibroker/broker/alter_partition_queue.py",
    "minibroker/broker/fetch_session.py",
]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean_at_120_columns() -> None:
    res = _run(str(BIN / "ruff"), "check", "--no-cache", "minibroker", "tests", "bench")
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_strict_is_clean_for_the_pure_cores() -> None:
    res = _run(sys.executable, "-m", "mypy", "--strict", "--no-incremental", *CORES)
    assert res.returncode == 0, res.stdout + res.stderr
