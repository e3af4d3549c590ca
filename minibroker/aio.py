"""asyncio helpers the package needs where Python 3.11's standard library falls short.

Owns nothing stateful. `wait_event` replaces `asyncio.wait_for(event.wait(), t)`: on 3.11,
wait_for can swallow a cancellation that arrives as the event is set (fixed in 3.12,
gh-86296), and a caller looping on it then never sees the cancel (a Ctrl-C that does not
stop `consume --follow`, a close that waits forever).
"""
from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until `event` is set or `timeout_s` passes; whether it is set. A cancellation
    of the caller always propagates."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((waiter,), timeout=timeout_s)
    finally:
        waiter.cancel()
    return event.is_set()
