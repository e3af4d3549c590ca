"""`minibroker trace FILE`: replay a scenario through the partition leader core.

Runs `PartitionLeader` in the lesson profile and acts as a controller that
commits every ISR change at once. The input and output formats are fixed
(other tools and tests compare them byte for byte); see docs/kafka-mapping.md
and minibroker/examples/*.trace.

Owns parsing, replay and formatting only: every replication rule lives in
minibroker/replication/. Must not know sockets, asyncio or the clock.

    python -m minibroker.trace FILE [--explain]      (FILE '-' reads stdin)
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TextIO

from minibroker.errors import ErrorCode
from minibroker.replication.leader import Decision, PartitionLeader
from minibroker.replication.profile import LESSON

_INT = re.compile(r"-?[0-9]+\Z")
_HEADERS = ("LAG_MAX", "MIN_ISR", "REPLICAS")
_COMMANDS = {"APPEND": 1, "FETCH": 2, "PRODUCE": 1, "STATUS": 0}


class TraceError(Exception):
    """Bad input: reported as `line N: <message>`, exit code 2."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


@dataclass(frozen=True, slots=True)
class Command:
    line: int
    time: int
    op: str
    args: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Script:
    lag_max_ms: int
    min_isr: int
    replicas: tuple[int, ...]
    commands: tuple[Command, ...]


def _int(token: str, line: int, what: str) -> int:
    if not _INT.match(token):
        raise TraceError(line, f"{what} {token!r} is not an integer")
    return int(token)


def parse(text: str) -> Script:
    """Parse and validate a whole trace before anything runs; TraceError on
    the first problem."""
    header: dict[str, object] = {}
    commands: list[Command] = []
    last_time = 0
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, raw in enumerate(lines, start=1):
        tokens = raw.split("#", 1)[0].split()
        if not tokens:
            continue
        head = tokens[0]
        if head in _HEADERS:
            if commands:
                raise TraceError(n, f"header {head} after the first timed command")
            if head in header:
                raise TraceError(n, f"header {head} given twice")
            args = tokens[1:]
            if head == "REPLICAS":
                if not args:
                    raise TraceError(n, "REPLICAS needs at least one replica id")
                ids = tuple(_int(a, n, "replica id") for a in args)
                for i, r in enumerate(ids):
                    if r < 0:
                        raise TraceError(n, f"replica id {r} is negative")
                    if r in ids[:i]:
                        raise TraceError(n, f"REPLICAS lists {r} twice")
                header[head] = ids
            else:
                if len(args) != 1:
                    raise TraceError(n, f"{head} takes exactly one number")
                value = _int(args[0], n, head)
                if head == "LAG_MAX" and value < 0:
                    raise TraceError(n, "LAG_MAX must not be negative")
                if head == "MIN_ISR" and value < 1:
                    raise TraceError(n, "MIN_ISR must be at least 1")
                header[head] = value
            continue
        if not _INT.match(head):
            raise TraceError(n, f"unknown command {head!r}")
        t = int(head)
        if len(tokens) < 2:
            raise TraceError(n, f"missing command after time {t}")
        op = tokens[1]
        if op not in _COMMANDS:
            raise TraceError(n, f"unknown command {op!r}")
        if not commands:
            for required in ("LAG_MAX", "REPLICAS"):
                if required not in header:
                    raise TraceError(n, f"missing header {required} before the first timed command")
        want = _COMMANDS[op]
        if len(tokens) - 2 != want:
            raise TraceError(n, f"{op} takes {want} argument{'s' if want != 1 else ''}, "
                                f"got {len(tokens) - 2}")
        if t < last_time:
            raise TraceError(n, f"time goes backwards ({t} after {last_time})")
        last_time = t
        names = {"APPEND": ("count",), "PRODUCE": ("count",), "FETCH": ("replica", "offset")}
        args = tuple(_int(a, n, what) for a, what in zip(tokens[2:], names.get(op, ()), strict=True))
        if op in ("APPEND", "PRODUCE") and args[0] < 1:
            raise TraceError(n, f"{op} count must be at least 1, got {args[0]}")
        if op == "FETCH":
            replicas = header["REPLICAS"]
            assert isinstance(replicas, tuple)
            if args[0] not in replicas:
                raise TraceError(n, f"unknown replica {args[0]} (REPLICAS are "
                                    f"{' '.join(map(str, replicas))})")
            if args[0] == replicas[0]:
                raise TraceError(n, f"replica {args[0]} is the leader; only followers fetch")
        commands.append(Command(n, t, op, args))
    for required in ("LAG_MAX", "REPLICAS"):
        if required not in header:
            raise TraceError(max(1, len(lines)), f"missing header {required}")
    return Script(
        lag_max_ms=header["LAG_MAX"],  # type: ignore[arg-type]
        min_isr=header.get("MIN_ISR", 1),  # type: ignore[arg-type]
        replicas=header["REPLICAS"],  # type: ignore[arg-type]
        commands=tuple(commands),
    )


@dataclass(eq=False)
class _Produce:
    first: int
    last: int


def _ids(rs: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(r) for r in rs)


class Replayer:
    """Feeds a parsed script through the core and prints what the format says."""

    def __init__(self, script: Script, out: TextIO, explain: TextIO | None) -> None:
        self.script = script
        self.out = out
        self.explain = explain
        self.leader = PartitionLeader(
            "trace", list(script.replicas), script.replicas[0],
            leader_epoch=0, partition_epoch=0, isr=list(script.replicas),
            leo=0, hw=0, lag_max_ms=script.lag_max_ms, min_isr=script.min_isr,
            profile=LESSON, now_ms=0,
        )

    def run(self) -> None:
        for c in self.script.commands:
            getattr(self, "_" + c.op.lower())(c)

    # ------------------------------------------------------------- commands

    def _append(self, c: Command) -> None:
        self._after(c.time, self.leader.on_append(self.leader.leo + c.args[0], c.time))

    def _fetch(self, c: Command) -> None:
        replica, offset = c.args
        d = self.leader.on_follower_fetch(replica, offset, c.time)
        if d.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._print(f"t={c.time} FETCH {replica} {offset} -> OFFSET_OUT_OF_RANGE")
            self._say(c.time, f"FETCH {replica} {offset}: offset outside "
                              f"[{self.leader.log_start_offset}, leader LEO {self.leader.leo}]; "
                              f"nothing changes")
            return
        self._after(c.time, d, fetch=(replica, offset))

    def _produce(self, c: Command) -> None:
        n = c.args[0]
        lead = self.leader
        if lead.check_produce(-1) != ErrorCode.NONE:
            self._print(f"t={c.time} PRODUCE {n} -> NOT_ENOUGH_REPLICAS")
            self._say(c.time, f"PRODUCE {n}: refused before append: ISR size {len(lead.isr)} "
                              f"< MIN_ISR {lead.effective_min_isr}; nothing appended")
            return
        first = lead.leo
        p = _Produce(first, first + n - 1)
        self._print(f"t={c.time} PRODUCE {n} -> APPENDED offsets {p.first}..{p.last}")
        self._say(c.time, f"PRODUCE {n}: admitted (ISR size {len(lead.isr)} >= MIN_ISR "
                          f"{lead.effective_min_isr}); acked once HW >= {p.last + 1}")
        d1 = lead.on_append(first + n, c.time)
        d2 = lead.add_waiter(p.last + 1, p, c.time)
        self._after(c.time, d1)
        self._after(c.time, d2)

    def _status(self, c: Command) -> None:
        lead, t = self.leader, c.time
        if self.explain is not None:
            verdicts = []
            for r in lead.isr:
                if r == lead.leader_id:
                    continue
                lcu = lead.followers[r].last_caught_up_ms
                if lcu is None:
                    verdicts.append(f"{r} leaves (never caught up)")
                    continue
                op, verb = ("<=", "stays") if lead.is_caught_up(r, t) else (">", "leaves")
                verdicts.append(f"{r} {verb} ({t} - last_caught_up {lcu} = {t - lcu} {op} "
                                f"LAG_MAX {lead.lag_max_ms})")
            self._say(t, "ISR check: " + ("; ".join(verdicts) or "leader alone"))
        self._after(t, lead.maybe_shrink_isr(t))
        writes = "OK" if lead.check_produce(-1) == ErrorCode.NONE else "NOT_ENOUGH_REPLICAS"
        self._print(f"t={t} ISR={_ids(lead.isr)} HW={lead.hw} LEO={lead.leo} WRITES={writes}")

    # ------------------------------------------------------------ formatting

    def _after(self, t: int, d: Decision, fetch: tuple[int, int] | None = None) -> None:
        """Explain the decision's events, then print its completions."""
        if self.explain is not None:
            for e in d.events:
                line = self._explain_event(e)
                if line:
                    self._say(t, line)
            if fetch is not None:
                blocker = self.leader.isr_join_blocker(fetch[0])
                if blocker is not None:
                    self._say(t, f"FETCH {fetch[0]} {fetch[1]}: {fetch[0]} stays out of the "
                                 f"ISR: {blocker}")
        for token, code in d.completed:
            assert isinstance(token, _Produce)
            if code == ErrorCode.NONE:
                self._print(f"t={t} ACKED offsets {token.first}..{token.last}")
            else:
                self._print(f"t={t} FAILED offsets {token.first}..{token.last} {code.name}")

    def _explain_event(self, e) -> str | None:
        x = e.extra
        if e.kind == "follower_fetch":
            label = {1: "branch 1, caught up now",
                     2: "branch 2, caught up as of its previous fetch",
                     0: "neither branch, not caught up"}[x["branch"]]
            before, after = e.before["last_caught_up_ms"], e.after["last_caught_up_ms"]
            change = (f"last_caught_up stays {after}" if before == after
                      else f"last_caught_up {before} -> {after}")
            if x["branch"] == 2:
                label += f" at {x['prev_last_fetch_ms']}"
            return f"FETCH {x['replica']} {x['fetch_offset']}: {label}: {e.reason}; {change}"
        if e.kind in ("isr_shrink", "isr_expand", "isr_change"):
            parts = []
            for r in x.get("left", []):
                lcu = x.get("last_caught_up_ms", {}).get(r)
                why = ("never caught up" if lcu is None else
                       f"{e.time_ms} - last_caught_up {lcu} = {e.time_ms - lcu} > "
                       f"LAG_MAX {x['lag_max_ms']}")
                parts.append(f"{r} left ({why})")
            for r in x.get("joined", []):
                parts.append(f"{r} joined (LEO {x['follower_leo']} >= HW {x['hw']})")
            return f"ISR {_ids(e.before)} -> {_ids(e.after)}: " + ", ".join(parts)
        if e.kind == "hw_move":
            return f"HW {e.before} -> {e.after} ({e.reason})"
        if e.kind == "produce_completed":
            lead = self.leader
            size = len(lead.maximal_isr)
            cmp = ">=" if size >= lead.effective_min_isr else "<"
            verdict = "ACKED" if e.after == ErrorCode.NONE.name else f"FAILED {e.after}"
            return (f"HW {lead.hw} reached {len(x['required_offsets'])} acks=all produce(s); "
                    f"ISR size {size} {cmp} MIN_ISR {lead.effective_min_isr}: {verdict}")
        return None

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")

    def _say(self, t: int, line: str) -> None:
        if self.explain is not None:
            self.explain.write(f"t={t} {line}\n")


def main(argv_path: str, explain: bool, stdout: TextIO, stderr: TextIO) -> int:
    """Replay the trace at `argv_path` ('-' = stdin). Returns the exit code:
    0, or 2 for unreadable or bad input (reported on stderr)."""
    try:
        if argv_path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(argv_path, "rb") as fh:
                data = fh.read()
    except OSError as exc:
        stderr.write(f"cannot read {argv_path}: {exc.strerror or exc}\n")
        return 2
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        stderr.write(f"line {line}: not valid UTF-8\n")
        return 2
    try:
        script = parse(text)
    except TraceError as exc:
        stderr.write(f"{exc}\n")
        return 2
    Replayer(script, stdout, stderr if explain else None).run()
    return 0


def _cli(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m minibroker.trace",
                                 description="Replay a partition-leader trace (lesson profile).")
    ap.add_argument("file", metavar="FILE", help="trace file, or - for stdin")
    ap.add_argument("--explain", action="store_true",
                    help="explain every decision on stderr")
    ns = ap.parse_args(argv)
    return main(ns.file, ns.explain, sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(_cli())
