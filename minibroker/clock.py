"""The package's one clock: every driver reads time here, cores get `now_ms`.

Owns which clock is installed: the wall clock by default, a virtual one
under `minibroker sim` (whose time is the simulated event loop's). Two
readings, as Kafka's `Time`: `now_ms()` is wall-clock milliseconds
(`time.milliseconds()`: record timestamps, linger, delivery timeouts, the
controller's session deadlines) and `monotonic()` is seconds that never go
backwards (`time.nanoseconds()`: client reconnect back-off, CLI and
verification deadlines). asyncio timers keep using `loop.time()`, which the
simulated loop makes virtual too.

Must not know: what the time is used for. Pure cores never import this
module; they take `now_ms` from their driver.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never decreases."""
        ...


def wall_ms_py() -> int:
    """Wall-clock milliseconds: `int(time.time() * 1000)`."""
    return int(time.time() * 1000)


try:    # the producer reads it once per record: minibroker._speedups has it in C, where it was built
    from minibroker._speedups import wall_ms
except ImportError:  # pragma: no cover - the C extension was not built
    wall_ms = wall_ms_py


class WallClock:
    """The real clock: `time.time()` and `time.monotonic()`."""

    now_ms = staticmethod(wall_ms)

    def monotonic(self) -> float:
        return time.monotonic()


_clock: Clock = WallClock()


def now_ms() -> int:
    """Wall-clock milliseconds from the installed clock (Kafka's time.milliseconds())."""
    return _clock.now_ms()


def monotonic() -> float:
    """Monotonic seconds from the installed clock."""
    return _clock.monotonic()


def monotonic_ms() -> int:
    return int(_clock.monotonic() * 1000)


def installed() -> Clock:
    return _clock


def install(clock: Clock) -> Clock:
    """Make `clock` the package's clock; returns the one it replaces."""
    global _clock
    previous, _clock = _clock, clock
    return previous


@contextmanager
def using(clock: Clock) -> Iterator[Clock]:
    """Install `clock` for the duration of a `with` block (the simulation's runs)."""
    previous = install(clock)
    try:
        yield clock
    finally:
        install(previous)


class AnchoredClock:
    """Wall-clock milliseconds that never go backwards: the wall time when
    created plus the monotonic time since (the controller's session clock)."""

    def __init__(self) -> None:
        self._wall0 = now_ms()
        self._mono0 = monotonic()

    def now_ms(self) -> int:
        return self._wall0 + int((monotonic() - self._mono0) * 1000)
