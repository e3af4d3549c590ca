"""Waiting on a condition with a deadline: how tests synchronise, never by sleeping.

`await until(cond, "what")` in async tests (the condition may be sync or
async), `until_sync(cond, "what")` in sync ones. Both poll every
`interval_s`, return the first truthy value, and fail with an AssertionError
naming what was awaited and the last value seen. Exceptions from the
condition propagate at once. (`LocalCluster`'s `wait_for` is different: it
treats client errors as "not yet" and raises TimeoutError.)
"""
from __future__ import annotations

import asyncio
import inspect
import reprlib
import time
from typing import Any
from collections.abc import Awaitable, Callable

TIMEOUT_S = 10.0
INTERVAL_S = 0.05


def _timed_out(what: str, timeout_s: float, last: Any) -> AssertionError:
    return AssertionError(f"timed out after {timeout_s}s waiting for {what}; last value: {reprlib.repr(last)}")


async def until(cond: Callable[[], Any] | Callable[[], Awaitable[Any]], what: str = "condition", *,
                timeout_s: float = TIMEOUT_S, interval_s: float = INTERVAL_S) -> Any:
    """Poll `cond` (sync or async) until it returns something truthy; return that."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise _timed_out(what, timeout_s, value)
        await asyncio.sleep(interval_s)


def until_sync(cond: Callable[[], Any], what: str = "condition", *,
               timeout_s: float = TIMEOUT_S, interval_s: float = INTERVAL_S) -> Any:
    """`until` for code with no running event loop: `cond` must be sync."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise TypeError(f"until_sync: the condition for {what} is async; use `await until(...)`")
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s, value)
        time.sleep(interval_s)
