"""minibroker.testing.wait: polling a condition until it holds or a deadline passes."""
from __future__ import annotations

import itertools

import pytest

from minibroker.testing.wait import until, until_sync


async def test_until_returns_the_first_truthy_value_of_a_sync_condition():
    calls = itertools.count()
    assert await until(lambda: next(calls) >= 2 and "ready", interval_s=0.001) == "ready"


async def test_until_awaits_an_async_condition():
    seen = []

    async def cond():
        seen.append(1)
        return len(seen) if len(seen) >= 3 else 0

    assert await until(cond, interval_s=0.001) == 3


async def test_until_names_what_and_the_last_value_when_the_deadline_passes():
    values = iter([None, 0, []] + [""] * 1000)
    with pytest.raises(AssertionError, match=r"waiting for the ISR to shrink; last value: ''"):
        await until(lambda: next(values), "the ISR to shrink", timeout_s=0.05, interval_s=0.01)


async def test_until_lets_an_exception_from_the_condition_through():
    def cond():
        raise KeyError("gone")

    with pytest.raises(KeyError):
        await until(cond, timeout_s=1)


def test_until_sync_polls_until_truthy_and_fails_with_the_last_value():
    calls = itertools.count()
    assert until_sync(lambda: next(calls) == 2, interval_s=0.001) is True
    with pytest.raises(AssertionError, match=r"waiting for leader; last value: 0"):
        until_sync(lambda: 0, "leader", timeout_s=0.05, interval_s=0.01)


def test_until_sync_refuses_an_async_condition():
    async def cond():
        return True

    with pytest.raises(TypeError, match="use `await until"):
        until_sync(cond)
