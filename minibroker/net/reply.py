"""A response completed later by whoever resolves the request (Kafka's response callback).

Owns: one request's response while it does not exist yet, and the single callback
that delivers it. A handler that must wait (an acks=all produce for the HW, a
Fetch for data) returns a `Reply`; the request server attaches its answer, and the
code that resolves the wait calls `complete`, so the response is written in that
same call, with no task wake-up in between: Kafka's DelayedOperation.onComplete
runs the response callback on the thread that completed it. A handler that can
answer at once returns a completed Reply. Whoever only wants to await a handler
(the Kafka listener, the group coordinator, tests) awaits the Reply.

Must not know: what the response says, sockets, or what is waited for. The
creator passes `on_cancel` to undo its registrations when nobody wants the answer
any more (the connection closed, the awaiting task was cancelled).
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

Answer = Callable[[Any, BaseException | None], None]


class Reply:
    """Invariant: completes at most once (`done`), and then holds `result` or
    `error` and no callback (so no reference cycle through its creator outlives
    it: the broker's cyclic GC runs rarely); the attached callback runs exactly
    once, when both exist; a cancelled Reply never completes."""

    __slots__ = ("done", "result", "error", "cancelled", "_answer", "_on_cancel")

    def __init__(self, on_cancel: Callable[[], None] | None = None) -> None:
        self.done = False
        self.cancelled = False
        self.result: Any = None
        self.error: BaseException | None = None
        self._answer: Answer | None = None
        self._on_cancel = on_cancel

    @classmethod
    def of(cls, result: Any) -> Reply:
        """A Reply completed already (a handler that answers at once)."""
        r = cls()
        r.done = True
        r.result = result
        return r

    def complete(self, result: Any) -> None:
        """Triggered once by whoever resolves the request: delivers `result` now."""
        if self.done or self.cancelled:
            return
        self.done = True
        self.result = result
        self._on_cancel = None                  # (it refers back to its creator: no cycle outlives the answer)
        answer = self._answer
        if answer is not None:
            self._answer = None
            answer(result, None)

    def fail(self, error: BaseException) -> None:
        """The request failed while it waited: the attached answer gets `error`."""
        if self.done or self.cancelled:
            return
        self.done = True
        self.error = error
        self._on_cancel = None
        answer = self._answer
        if answer is not None:
            self._answer = None
            answer(None, error)

    def attach(self, answer: Answer) -> None:
        """Triggered by the one party that delivers the response: `answer(result, error)`
        runs when the Reply completes (now, if it has)."""
        if self.done:
            answer(self.result, self.error)
        else:
            self._answer = answer

    def cancel(self) -> None:
        """Triggered when nobody wants the answer any more: the creator's `on_cancel` runs once."""
        if self.done or self.cancelled:
            return
        self.cancelled = True
        self._answer = None
        on_cancel, self._on_cancel = self._on_cancel, None
        if on_cancel is not None:
            on_cancel()

    def __await__(self) -> Generator[Any, None, Any]:
        if not self.done:
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

            def settle(result: Any, error: BaseException | None) -> None:
                if fut.done():
                    return
                if error is not None:
                    fut.set_exception(error)
                else:
                    fut.set_result(result)
            self.attach(settle)
            try:
                return (yield from fut.__await__())
            except asyncio.CancelledError:
                self.cancel()
                raise
        if self.error is not None:
            raise self.error
        return self.result
