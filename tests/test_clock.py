"""The package clock: the wall clock's C reading agrees with its Python twin,
and `using` installs a clock for a block only."""
import time

import pytest

from minibroker import clock


def test_the_wall_clock_reads_time_time_in_milliseconds():
    for read in (clock.WallClock().now_ms, clock.wall_ms_py):
        before = int(time.time() * 1000)
        got = read()
        after = int(time.time() * 1000)
        assert before <= got <= after


def test_the_c_wall_clock_is_the_installed_default_where_built():
    speedups = pytest.importorskip("minibroker._speedups")
    assert clock.WallClock.now_ms is speedups.wall_ms


class Fixed:
    def now_ms(self) -> int:
        return 42

    def monotonic(self) -> float:
        return 1.5


def test_using_installs_a_clock_for_the_block():
    with clock.using(Fixed()):
        assert clock.now_ms() == 42 and clock.monotonic() == 1.5
    assert clock.now_ms() != 42
