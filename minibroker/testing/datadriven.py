"""Data-driven scenario files, in the style of etcd raft's `testdata/*.txt`.

A file is a sequence of blocks. Each block is one command line, a `----`
line, and the expected output (one or more non-blank lines), ended by a
blank line or the end of the file. Lines starting with `#` between blocks
are comments. A command is a name and `key=value` arguments (a bare `key`
means `key=`):

    # a follower that led epoch 1 without appending
    log leo=5 epochs=0:0,1:5
    ----
    ok

`run_file(path, handler)` runs every block through `handler(cmd) -> str`
(an empty answer is written `ok`) and fails with every mismatch. With the
environment variable MINIBROKER_REWRITE=1 it writes the actual outputs
back into the file instead (comments and commands are kept), so a change
of behaviour is reviewed as a diff of the golden files.

Owns only the file format; the handlers (one per core) live with the tests.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

REWRITE_ENV = "MINIBROKER_REWRITE"
SEPARATOR = "----"


def ids(xs: Any) -> str:
    """`[1,2,3]`: a list of ids as the scenario files print it."""
    return "[" + ",".join(str(x) for x in xs) + "]"


def value(v: Any) -> str:
    """A before/after value of an event: lists as `ids`, dicts as `{k=v ...}`."""
    if isinstance(v, (list, tuple)):
        return ids(v)
    if isinstance(v, dict):
        return "{" + " ".join(f"{k}={value(x)}" for k, x in v.items()) + "}"
    return str(v)


def event_line(e: Any) -> str:
    """One `minibroker.events.Event` as a scenario output line."""
    return f"event {e.kind} {value(e.before)} -> {value(e.after)}: {e.reason}"


class ScenarioError(Exception):
    """A malformed scenario file or command; the message names the file and line."""


@dataclass
class Command:
    name: str
    args: dict[str, str]
    line: int
    where: str = ""

    def has(self, key: str) -> bool:
        return key in self.args

    def text(self, key: str, default: str | None = None) -> str:
        if key in self.args:
            return self.args[key]
        if default is None:
            raise ScenarioError(f"{self.where}: `{self.name}` needs {key}=")
        return default

    def num(self, key: str, default: int | None = None) -> int:
        if key not in self.args:
            if default is None:
                raise ScenarioError(f"{self.where}: `{self.name}` needs {key}=")
            return default
        try:
            return int(self.args[key])
        except ValueError:
            raise ScenarioError(f"{self.where}: {key}={self.args[key]!r} is not an integer") from None

    def nums(self, key: str, default: list[int] | None = None) -> list[int]:
        """A comma-separated list (`-` or empty for none)."""
        raw = self.text(key, None if default is None else ",".join(map(str, default)))
        if raw in ("", "-"):
            return []
        return [int(x) for x in raw.split(",")]

    def pairs(self, key: str) -> list[tuple[int, int]]:
        """`a:b,c:d` -> [(a, b), (c, d)] (`-` or empty for none)."""
        raw = self.text(key, "")
        if raw in ("", "-"):
            return []
        out = []
        for item in raw.split(","):
            a, _, b = item.partition(":")
            out.append((int(a), int(b)))
        return out

    def flag(self, key: str, default: bool = False) -> bool:
        if key not in self.args:
            return default
        return self.args[key] in ("", "true", "yes", "1")


@dataclass
class _Block:
    before: list[str]
    command: str
    line: int
    expected: list[str] = field(default_factory=list)


def parse(text: str, where: str = "") -> tuple[list[_Block], list[str]]:
    """(blocks, trailing lines) of a scenario file."""
    lines = text.splitlines()
    blocks: list[_Block] = []
    pending: list[str] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        if not ln.strip() or ln.lstrip().startswith("#"):
            pending.append(ln)
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != SEPARATOR:
            raise ScenarioError(f"{where}:{i + 1}: command {ln!r} is not followed by {SEPARATOR}")
        block = _Block(pending, ln, i + 1)
        pending = []
        i += 2
        while i < len(lines) and lines[i].strip():
            block.expected.append(lines[i])
            i += 1
        blocks.append(block)
    return blocks, pending


def parse_command(line: str, lineno: int, where: str) -> Command:
    words = line.split()
    args: dict[str, str] = {}
    for w in words[1:]:
        k, _, v = w.partition("=")
        args[k] = v
    return Command(words[0], args, lineno, f"{where}:{lineno}")


def run_file(path: str, handler: Callable[[Command], str]) -> None:
    """Run every block of `path`; rewrite it under MINIBROKER_REWRITE=1, else assert."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    where = os.path.basename(path)
    blocks, trailing = parse(text, where)
    mismatches: list[str] = []
    actual_all: list[list[str]] = []
    for b in blocks:
        cmd = parse_command(b.command, b.line, where)
        out = handler(cmd).rstrip("\n")
        actual = [ln for ln in out.splitlines() if ln.strip()] or ["ok"]
        actual_all.append(actual)
        if actual != b.expected:
            mismatches.append(f"{where}:{b.line}: {b.command}\n  expected:\n    "
                              + "\n    ".join(b.expected or ["<nothing>"])
                              + "\n  actual:\n    " + "\n    ".join(actual))
    if os.environ.get(REWRITE_ENV) == "1":
        out_lines: list[str] = []
        for b, actual in zip(blocks, actual_all, strict=True):
            out_lines += [*b.before, b.command, SEPARATOR, *actual]
        out_lines += trailing
        new = "\n".join(out_lines) + "\n"
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
        return
    if mismatches:
        raise AssertionError(f"{len(mismatches)} scenario block(s) differ (set {REWRITE_ENV}=1 to rewrite):\n"
                             + "\n".join(mismatches))
