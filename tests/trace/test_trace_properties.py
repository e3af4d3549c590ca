"""Random scripts through the replayer: valid ones follow the output grammar
and the lesson's invariants; arbitrary text never produces a traceback."""
from __future__ import annotations

import io
import os
import re
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.trace import TraceError, main, parse

STATUS = re.compile(r"t=(\d+) ISR=([\d,]+) HW=(\d+) LEO=(\d+) WRITES=(OK|NOT_ENOUGH_REPLICAS)\Z")
PRODUCED = re.compile(r"t=(\d+) PRODUCE (\d+) -> (?:APPENDED offsets (\d+)\.\.(\d+)|"
                      r"NOT_ENOUGH_REPLICAS)\Z")
DONE = re.compile(r"t=(\d+) (?:ACKED|FAILED) offsets (\d+)\.\.(\d+)"
                  r"(?: NOT_ENOUGH_REPLICAS_AFTER_APPEND)?\Z")
OUT_OF_RANGE = re.compile(r"t=(\d+) FETCH (\d+) (-?\d+) -> OFFSET_OUT_OF_RANGE\Z")


@st.composite
def scripts(draw: st.DrawFn) -> str:
    replicas = draw(st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True))
    lines = [f"LAG_MAX {draw(st.integers(0, 400))}", "REPLICAS " + " ".join(map(str, replicas))]
    if draw(st.booleans()):
        lines.insert(1, f"MIN_ISR {draw(st.integers(1, 4))}")
    t = 0
    for _ in range(draw(st.integers(0, 40))):
        t += draw(st.integers(0, 200))
        kind = draw(st.sampled_from(["APPEND", "PRODUCE", "STATUS", "FETCH", "FETCH"]))
        if kind in ("APPEND", "PRODUCE"):
            lines.append(f"{t} {kind} {draw(st.integers(1, 5))}")
        elif kind == "FETCH" and len(replicas) > 1:
            r = draw(st.sampled_from(replicas[1:]))
            lines.append(f"{t} FETCH {r} {draw(st.integers(-1, 40))}")
        else:
            lines.append(f"{t} STATUS")
    return "\n".join(lines) + "\n"


def run(text: str, explain: bool = False) -> tuple[int, str, str]:
    fd, path = tempfile.mkstemp(suffix=".trace")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        out, err = io.StringIO(), io.StringIO()
        return main(path, explain, out, err), out.getvalue(), err.getvalue()
    finally:
        os.unlink(path)


@settings(max_examples=200, deadline=None)
@given(scripts())
def test_valid_scripts_follow_the_output_grammar_and_invariants(text: str) -> None:
    script = parse(text)
    code, out, err = run(text)
    assert (code, err) == (0, "")
    last_hw, pending, done = 0, {}, set()
    for line in out.splitlines():
        if m := STATUS.match(line):
            isr = [int(x) for x in m[2].split(",")]
            hw, leo = int(m[3]), int(m[4])
            assert isr[0] == script.replicas[0]
            # Kafka's ISR order (rejoiners appended), so not necessarily replica order; no duplicates.
            assert len(set(isr)) == len(isr) and set(isr) <= set(script.replicas)
            assert last_hw <= hw <= leo
            last_hw = hw
            assert (m[5] == "OK") == (len(isr) >= script.min_isr)
            assert all(last + 1 > hw for last in pending.values())
        elif m := PRODUCED.match(line):
            if m[3] is not None:
                first, last = int(m[3]), int(m[4])
                assert last - first + 1 == int(m[2])
                pending[first] = last
        elif m := DONE.match(line):
            first, last = int(m[2]), int(m[3])
            assert pending.pop(first) == last and first not in done
            done.add(first)
        else:
            assert OUT_OF_RANGE.match(line), line
    code2, out2, _ = run(text, explain=True)
    assert (code2, out2) == (0, out)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789 -#\nLAG_MXREPCISNTUHFODx.")),
               max_size=120))
def test_arbitrary_text_is_replayed_or_rejected_by_line(text: str) -> None:
    code, out, err = run(text)
    assert code in (0, 2)
    assert "Traceback" not in err
    if code == 2:
        assert out == "" and re.fullmatch(r"line \d+: [^\n]+\n", err)
        try:
            parse(text)
        except TraceError:
            pass
        else:
            raise AssertionError("main rejected what parse accepts")
