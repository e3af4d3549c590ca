"""Every bundled example trace reproduces its golden output byte for byte.

Golden files: tests/trace/golden/<name>.out (stdout) and <name>.explain
(stderr with --explain). Regenerate after a reviewed change with
MINIBROKER_UPDATE_GOLDEN=1 and read the diff before committing it.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import minibroker
from minibroker.trace import main

EXAMPLES = Path(minibroker.__file__).parent / "examples"
GOLDEN = Path(__file__).parent / "golden"
TRACES = sorted(EXAMPLES.glob("*.trace"))


def run(path: Path, explain: bool) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(str(path), explain, out, err)
    return code, out.getvalue(), err.getvalue()


def check(actual: str, golden: Path) -> None:
    if os.environ.get("MINIBROKER_UPDATE_GOLDEN") == "1":
        golden.write_text(actual)
    assert golden.exists(), f"missing golden file {golden}"
    assert actual == golden.read_text()


def test_examples_are_bundled() -> None:
    names = {p.stem for p in TRACES}
    assert {"lesson-worked", "steady-load", "exactly-lag-max", "hw-over-isr",
            "below-hw-no-rejoin", "min-isr-refusal"} <= names


@pytest.mark.parametrize("trace", TRACES, ids=[p.stem for p in TRACES])
def test_example_stdout_matches_golden(trace: Path) -> None:
    code, out, err = run(trace, explain=False)
    assert code == 0 and err == ""
    check(out, GOLDEN / f"{trace.stem}.out")


@pytest.mark.parametrize("trace", TRACES, ids=[p.stem for p in TRACES])
def test_example_explain_matches_golden_and_leaves_stdout_alone(trace: Path) -> None:
    code, out, err = run(trace, explain=True)
    assert code == 0
    assert out == run(trace, explain=False)[1]
    check(err, GOLDEN / f"{trace.stem}.explain")


def test_every_golden_file_belongs_to_an_example() -> None:
    stems = {p.stem for p in TRACES}
    assert {g.stem for g in GOLDEN.iterdir()} <= stems


def test_lesson_worked_trace_reproduces_the_lesson_exactly() -> None:
    code, out, _ = run(EXAMPLES / "lesson-worked.trace", explain=False)
    assert code == 0
    assert out == (
        "t=130 ISR=5,6,7 HW=2 LEO=4 WRITES=OK\n"
        "t=550 ISR=5,6 HW=4 LEO=4 WRITES=OK\n"
        "t=601 ISR=5,6,7 HW=4 LEO=4 WRITES=OK\n"
    )
