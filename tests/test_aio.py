"""minibroker.aio.wait_event: a cancellation that arrives as the event is set is never lost
(asyncio.wait_for loses it on Python 3.11), and the timeout and the set event are reported."""
import asyncio

import pytest

from minibroker.aio import wait_event


async def test_a_cancel_that_arrives_as_the_event_is_set_propagates():
    ev = asyncio.Event()
    waiting = asyncio.ensure_future(wait_event(ev, 10))
    await asyncio.sleep(0)                     # let it start waiting
    ev.set()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_it_says_whether_the_event_was_set():
    ev = asyncio.Event()
    assert await wait_event(ev, 0.001) is False
    asyncio.get_running_loop().call_soon(ev.set)
    assert await wait_event(ev, 10) is True
    assert await wait_event(ev, 0) is True     # already set: no wait
