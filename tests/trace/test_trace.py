"""The trace replayer: input format, output format, bad input, entry points."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from minibroker.trace import TraceError, main, parse

WORKED = """LAG_MAX 500
REPLICAS 5 6 7
0 APPEND 4
100 FETCH 6 4
120 FETCH 7 2
130 STATUS
400 FETCH 6 4
550 STATUS
600 FETCH 7 4
601 STATUS
"""
WORKED_OUT = (
    "t=130 ISR=5,6,7 HW=2 LEO=4 WRITES=OK\n"
    "t=550 ISR=5,6 HW=4 LEO=4 WRITES=OK\n"
    "t=601 ISR=5,6,7 HW=4 LEO=4 WRITES=OK\n"
)


def replay(text: str, tmp_path: Path, explain: bool = False) -> tuple[int, str, str]:
    p = tmp_path / "t.trace"
    p.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    code = main(str(p), explain, out, err)
    return code, out.getvalue(), err.getvalue()


def ok(text: str, tmp_path: Path) -> str:
    code, out, err = replay(text, tmp_path)
    assert (code, err) == (0, "")
    return out


def bad(text: str, tmp_path: Path) -> str:
    code, out, err = replay(text, tmp_path)
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.count("\n") == 1
    return err.rstrip("\n")


# ------------------------------------------------------------------ format


def test_worked_trace_from_a_file(tmp_path: Path) -> None:
    assert ok(WORKED, tmp_path) == WORKED_OUT


def test_comments_blank_lines_and_extra_spaces_are_ignored(tmp_path: Path) -> None:
    text = "# a comment\n\n  LAG_MAX   500  # trailing\nREPLICAS 5 6 7\n\n" + \
        "\n".join("   " + ln + "   # note" for ln in WORKED.splitlines()[2:]) + "\n"
    assert ok(text, tmp_path) == WORKED_OUT


def test_file_without_final_newline_and_with_crlf(tmp_path: Path) -> None:
    assert ok(WORKED.replace("\n", "\r\n").rstrip(), tmp_path) == WORKED_OUT


def test_min_isr_defaults_to_one(tmp_path: Path) -> None:
    assert parse("LAG_MAX 5\nREPLICAS 1 2\n").min_isr == 1


def test_status_without_events_shows_initial_state(tmp_path: Path) -> None:
    out = ok("LAG_MAX 10\nREPLICAS 1 2 3\n0 STATUS\n", tmp_path)
    assert out == "t=0 ISR=1,2,3 HW=0 LEO=0 WRITES=OK\n"


def test_isr_is_printed_in_replica_list_order(tmp_path: Path) -> None:
    out = ok("LAG_MAX 100\nREPLICAS 9 3 7\n0 APPEND 1\n150 FETCH 3 1\n"
             "150 STATUS\n160 FETCH 7 1\n160 STATUS\n", tmp_path)
    assert out == ("t=150 ISR=9,3 HW=1 LEO=1 WRITES=OK\n"
                   "t=160 ISR=9,3,7 HW=1 LEO=1 WRITES=OK\n")


def test_single_replica_produce_is_acked_by_its_own_append(tmp_path: Path) -> None:
    out = ok("LAG_MAX 10\nREPLICAS 1\n5 PRODUCE 2\n6 STATUS\n", tmp_path)
    assert out == ("t=5 PRODUCE 2 -> APPENDED offsets 0..1\n"
                   "t=5 ACKED offsets 0..1\n"
                   "t=6 ISR=1 HW=2 LEO=2 WRITES=OK\n")


def test_several_completions_print_in_offset_order_before_status(tmp_path: Path) -> None:
    out = ok("LAG_MAX 100\nREPLICAS 1 2\n0 PRODUCE 1\n1 PRODUCE 2\n2 PRODUCE 1\n"
             "200 STATUS\n", tmp_path)
    assert out == ("t=0 PRODUCE 1 -> APPENDED offsets 0..0\n"
                   "t=1 PRODUCE 2 -> APPENDED offsets 1..2\n"
                   "t=2 PRODUCE 1 -> APPENDED offsets 3..3\n"
                   "t=200 ACKED offsets 0..0\n"
                   "t=200 ACKED offsets 1..2\n"
                   "t=200 ACKED offsets 3..3\n"
                   "t=200 ISR=1 HW=4 LEO=4 WRITES=OK\n")


def test_partial_hw_move_completes_only_the_produces_it_passed(tmp_path: Path) -> None:
    out = ok("LAG_MAX 100\nREPLICAS 1 2\n0 PRODUCE 2\n0 PRODUCE 2\n10 FETCH 2 3\n"
             "20 FETCH 2 4\n", tmp_path)
    assert out == ("t=0 PRODUCE 2 -> APPENDED offsets 0..1\n"
                   "t=0 PRODUCE 2 -> APPENDED offsets 2..3\n"
                   "t=10 ACKED offsets 0..1\n"
                   "t=20 ACKED offsets 2..3\n")


def test_pending_produces_never_time_out(tmp_path: Path) -> None:
    out = ok("LAG_MAX 100000\nREPLICAS 1 2\n0 PRODUCE 1\n99999 STATUS\n", tmp_path)
    assert out == ("t=0 PRODUCE 1 -> APPENDED offsets 0..0\n"
                   "t=99999 ISR=1,2 HW=0 LEO=1 WRITES=OK\n")


def test_fetch_out_of_range_changes_nothing(tmp_path: Path) -> None:
    base = "LAG_MAX 100\nREPLICAS 1 2\n0 APPEND 2\n"
    out = ok(base + "50 FETCH 2 3\n50 FETCH 2 -1\n150 STATUS\n", tmp_path)
    assert out == ("t=50 FETCH 2 3 -> OFFSET_OUT_OF_RANGE\n"
                   "t=50 FETCH 2 -1 -> OFFSET_OUT_OF_RANGE\n"
                   "t=150 ISR=1 HW=2 LEO=2 WRITES=OK\n")


def test_equal_times_are_allowed(tmp_path: Path) -> None:
    assert ok("LAG_MAX 1\nREPLICAS 1 2\n3 APPEND 1\n3 FETCH 2 1\n3 STATUS\n", tmp_path) == \
        "t=3 ISR=1,2 HW=1 LEO=1 WRITES=OK\n"


def test_min_isr_above_replication_factor_refuses_every_acks_all(tmp_path: Path) -> None:
    # The lesson does not cap MIN_ISR at the replication factor (Kafka 3.7+ does).
    out = ok("LAG_MAX 10\nMIN_ISR 3\nREPLICAS 1 2\n0 PRODUCE 1\n0 STATUS\n", tmp_path)
    assert out == ("t=0 PRODUCE 1 -> NOT_ENOUGH_REPLICAS\n"
                   "t=0 ISR=1,2 HW=0 LEO=0 WRITES=NOT_ENOUGH_REPLICAS\n")


def test_explain_names_the_branch_and_the_reasons(tmp_path: Path) -> None:
    code, out, err = replay(WORKED, tmp_path, explain=True)
    assert code == 0 and out == WORKED_OUT
    lines = err.splitlines()
    assert "t=100 FETCH 6 4: branch 1" in lines[0]
    assert "t=120 FETCH 7 2: branch 2" in lines[1]
    assert "t=120 HW 0 -> 2 (min LEO over ISR 5,6,7)" in lines
    assert any(ln.startswith("t=550 ISR 5,6,7 -> 5,6: 7 left (550 - last_caught_up 0 = 550 > "
                             "LAG_MAX 500)") for ln in lines)
    assert "t=550 HW 2 -> 4 (min LEO over ISR 5,6)" in lines
    assert "t=600 ISR 5,6 -> 5,6,7: 7 joined (LEO 4 >= HW 4)" in lines


# --------------------------------------------------------------- bad input


@pytest.mark.parametrize("text, message", [
    ("REPLICAS 1 2\n0 STATUS\n", "line 2: missing header LAG_MAX before the first timed command"),
    ("LAG_MAX 5\n\n0 STATUS\n", "line 3: missing header REPLICAS before the first timed command"),
    ("LAG_MAX 5\n", "line 1: missing header REPLICAS"),
    ("", "line 1: missing header LAG_MAX"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 JUMP\n", "line 3: unknown command 'JUMP'"),
    ("LAG_MAX 5\nREPLICAS 1 2\nSTATUS\n", "line 3: unknown command 'STATUS'"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 status\n", "line 3: unknown command 'status'"),
    ("LAG_MAX 5\nREPLICAS 1 2\n7\n", "line 3: missing command after time 7"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 FETCH 3 0\n", "line 3: unknown replica 3 (REPLICAS are 1 2)"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 FETCH 1 0\n",
     "line 3: replica 1 is the leader; only followers fetch"),
    ("LAG_MAX 5\nREPLICAS 1 2\n10 STATUS\n# x\n9 STATUS\n",
     "line 5: time goes backwards (9 after 10)"),
    ("LAG_MAX 5\nREPLICAS 1 2\n-1 STATUS\n", "line 3: time goes backwards (-1 after 0)"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 APPEND x\n", "line 3: count 'x' is not an integer"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 APPEND 1.5\n", "line 3: count '1.5' is not an integer"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 FETCH 2 +1\n", "line 3: offset '+1' is not an integer"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 FETCH two 1\n", "line 3: replica 'two' is not an integer"),
    ("LAG_MAX 5\nREPLICAS 1 2\n1e3 STATUS\n", "line 3: unknown command '1e3'"),
    ("LAG_MAX five\n", "line 1: LAG_MAX 'five' is not an integer"),
    ("LAG_MAX -1\n", "line 1: LAG_MAX must not be negative"),
    ("LAG_MAX 5 6\n", "line 1: LAG_MAX takes exactly one number"),
    ("MIN_ISR 0\n", "line 1: MIN_ISR must be at least 1"),
    ("LAG_MAX 5\nLAG_MAX 6\n", "line 2: header LAG_MAX given twice"),
    ("REPLICAS\n", "line 1: REPLICAS needs at least one replica id"),
    ("REPLICAS 1 2 1\n", "line 1: REPLICAS lists 1 twice"),
    ("REPLICAS 1 x\n", "line 1: replica id 'x' is not an integer"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 STATUS\nMIN_ISR 2\n",
     "line 4: header MIN_ISR after the first timed command"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 APPEND\n", "line 3: APPEND takes 1 argument, got 0"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 STATUS now\n", "line 3: STATUS takes 0 arguments, got 1"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 FETCH 2\n", "line 3: FETCH takes 2 arguments, got 1"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 APPEND 0\n", "line 3: APPEND count must be at least 1, got 0"),
    ("LAG_MAX 5\nREPLICAS 1 2\n0 PRODUCE -2\n",
     "line 3: PRODUCE count must be at least 1, got -2"),
])
def test_bad_input_is_reported_by_line_with_exit_code_2(
        text: str, message: str, tmp_path: Path) -> None:
    assert bad(text, tmp_path) == message


def test_bad_input_late_in_the_file_prints_nothing_on_stdout(tmp_path: Path) -> None:
    assert bad(WORKED + "700 FETCH 8 0\n", tmp_path) == \
        "line 11: unknown replica 8 (REPLICAS are 5 6 7)"


def test_invalid_utf8_is_bad_input(tmp_path: Path) -> None:
    p = tmp_path / "t.trace"
    p.write_bytes(b"LAG_MAX 5\nREPLICAS 1\n0 \xff\n")
    err = io.StringIO()
    assert main(str(p), False, io.StringIO(), err) == 2
    assert err.getvalue() == "line 3: not valid UTF-8\n"


def test_missing_file_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    err = io.StringIO()
    assert main(str(tmp_path / "nope.trace"), False, io.StringIO(), err) == 2
    assert err.getvalue().startswith(f"cannot read {tmp_path / 'nope.trace'}: ")


def test_parse_error_carries_the_line_number() -> None:
    with pytest.raises(TraceError) as ei:
        parse("LAG_MAX 1\nREPLICAS 1\n\n\n0 NOPE\n")
    assert ei.value.line == 5


# ------------------------------------------------------------ entry points


def test_python_dash_m_reads_stdin_with_dash() -> None:
    r = subprocess.run([sys.executable, "-m", "minibroker.trace", "-"], input=WORKED,
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, WORKED_OUT, "")


def test_python_dash_m_explain_and_bad_input(tmp_path: Path) -> None:
    p = tmp_path / "w.trace"
    p.write_text(WORKED)
    r = subprocess.run([sys.executable, "-m", "minibroker.trace", str(p), "--explain"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == WORKED_OUT and "branch 2" in r.stderr
    p.write_text("LAG_MAX 5\nREPLICAS 1\n0 FLY\n")
    r = subprocess.run([sys.executable, "-m", "minibroker.trace", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "line 3: unknown command 'FLY'\n")
