"""Progress on long CLI runs: a rich progress line on stderr when stderr is a
terminal, nothing at all in pipes and files (so output stays parseable), and
Ctrl-C handling that lets a command print its summary instead of a traceback."""
from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def wanted(disabled: bool = False, stdout_is_output: bool = False) -> bool:
    """A bar goes on stderr when it is a terminal; for commands whose records go to
    stdout, only when stdout is not that same terminal (records and bar would mix)."""
    if disabled or not sys.stderr.isatty():
        return False
    return not (stdout_is_output and sys.stdout.isatty())


@contextmanager
def bar(label: str, total: int | None, enabled: bool, unit: str = "records") -> Iterator[Callable[..., None]]:
    """Yields `update(completed, note="")`; a no-op when not enabled."""
    if not enabled:
        yield lambda completed, note="": None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    columns: list[Any] = [TextColumn(label)]
    if total:
        columns += [BarColumn(), MofNCompleteColumn()]
    else:
        columns += [SpinnerColumn(), TextColumn(f"{{task.completed}} {unit}")]
    columns += [TimeElapsedColumn(), TextColumn("{task.fields[note]}")]
    prog = Progress(*columns, console=Console(stderr=True), transient=False)
    with prog:
        task = prog.add_task(label, total=total, note="")
        yield lambda completed, note="": prog.update(task, completed=completed, note=note)


def interrupt_event() -> asyncio.Event:
    """An event set by the first Ctrl-C (SIGINT) on the running loop; a second Ctrl-C
    interrupts for real. Call from inside the loop."""
    ev = asyncio.Event()
    loop = asyncio.get_running_loop()

    def first() -> None:
        ev.set()
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    loop.add_signal_handler(signal.SIGINT, first)
    return ev
