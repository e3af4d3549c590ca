"""The simulated event loop: asyncio with virtual time and simulated processes.

Owns: virtual time (`time()` starts at 0 and jumps to the next timer when
nothing is ready, so a run never waits on the wall clock), which simulated
process each callback belongs to (the `PROCESS` context variable, inherited
by every task and callback the process creates), and what a process's state
does to its callbacks: a paused process's callbacks are parked until it is
resumed (SIGSTOP/SIGCONT), a killed process's callbacks are dropped for good.
Executor calls (`asyncio.to_thread`, `run_in_executor`) run inline with no
running loop, so blocking file calls happen at a deterministic point.

Must not know: sockets (the simulated network provides transports through
`create_connection`/`create_server`), brokers, or what the processes run.
"""
# BaseEventLoop's private fields (_ready, _scheduled, ...) are not in typeshed:
# mypy: disable-error-code="attr-defined,has-type,override"
from __future__ import annotations

import asyncio
import contextvars
import heapq
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future as ConcurrentFuture
from typing import Any

from asyncio import events as _events


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is scheduled: the simulation cannot go on."""


class SimProcess:
    """One incarnation of a simulated process. Invariant: `alive` is False
    for good once killed; `parked` holds, in order, the callbacks that came
    due while the process was paused."""

    def __init__(self, name: str, host: str) -> None:
        self.name = name
        self.host = host
        self.alive = True
        self.paused = False
        self.parked: deque[asyncio.Handle] = deque()
        self.context = contextvars.copy_context()
        self.context.run(PROCESS.set, self)

    def __repr__(self) -> str:
        return f"SimProcess({self.name}{'' if self.alive else ', dead'}{', paused' if self.paused else ''})"


PROCESS: contextvars.ContextVar[SimProcess | None] = contextvars.ContextVar("minibroker_sim_process", default=None)


def current_process() -> SimProcess | None:
    return PROCESS.get()


def _owner(handle: asyncio.Handle) -> SimProcess | None:
    ctx = getattr(handle, "_context", None)
    return ctx.get(PROCESS) if ctx is not None else None


class _NoSelector:
    """Stands in for the selector: select(timeout) advances virtual time."""

    def __init__(self, loop: SimLoop) -> None:
        self.loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        loop = self.loop
        if timeout is None:
            raise Deadlock(f"no callback ready and no timer scheduled at t={loop.time():.3f}")
        if timeout > 0:
            loop._advance(timeout)
        return []

    def close(self) -> None:
        pass


class SimLoop(asyncio.BaseEventLoop):
    """Invariant: `_now` never decreases; callbacks run in (due time, scheduling order)."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        self._selector = _NoSelector(self)
        self._clock_resolution = 1e-9
        self.steps = 0
        self.callbacks = 0
        self.on_advance: Callable[[float], None] | None = None
        self.network: Any = None        # minibroker.sim.net.SimNetwork, set by it

    # -- time ---------------------------------------------------------------
    def time(self) -> float:
        return self._now

    def _advance(self, timeout: float) -> None:
        if self._scheduled:
            target = max(self._now, self._scheduled[0]._when)
        else:
            target = self._now + timeout
        self._now = target

    # -- BaseEventLoop's abstract hooks ---------------------------------------------
    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def _run_once(self) -> None:
        self.steps += 1
        sched = self._scheduled
        if len(sched) > 200 and self._timer_cancelled_count * 2 > len(sched):
            live = [h for h in sched if not h._cancelled]
            for h in sched:
                if h._cancelled:
                    h._scheduled = False
            heapq.heapify(live)
            self._scheduled = live
            self._timer_cancelled_count = 0
        while self._scheduled and self._scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1
            handle = heapq.heappop(self._scheduled)
            handle._scheduled = False
        if self._ready or self._stopping:
            timeout: float | None = 0
        elif self._scheduled:
            timeout = max(0.0, self._scheduled[0]._when - self._now)
        else:
            timeout = None
        self._selector.select(timeout)
        end_time = self._now + self._clock_resolution
        while self._scheduled:
            handle = self._scheduled[0]
            if handle._when >= end_time:
                break
            handle = heapq.heappop(self._scheduled)
            handle._scheduled = False
            self._ready.append(handle)
        ntodo = len(self._ready)
        for _ in range(ntodo):
            handle = self._ready.popleft()
            if handle._cancelled:
                continue
            proc = _owner(handle)
            if proc is not None:
                if not proc.alive:
                    continue
                if proc.paused:
                    proc.parked.append(handle)
                    continue
            self.callbacks += 1
            handle._run()
        handle = None  # type: ignore[assignment]

    # -- processes ------------------------------------------------------------
    def spawn(self, proc: SimProcess, coro: Any, name: str | None = None) -> asyncio.Task:
        """Start `coro` as `proc`'s main task (every task it creates belongs to `proc`)."""
        return self.create_task(coro, name=name, context=proc.context)

    def resume(self, proc: SimProcess) -> None:
        proc.paused = False
        while proc.parked:
            self._ready.append(proc.parked.popleft())

    def kill(self, proc: SimProcess) -> None:
        proc.alive = False
        proc.paused = False
        proc.parked.clear()

    # -- executors: inline, with no running loop (fsync guards see a worker thread) ------
    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future:
        fut = self.create_future()
        prev = _events._get_running_loop()
        _events._set_running_loop(None)
        try:
            result = func(*args)
        except BaseException as exc:  # noqa: BLE001 - delivered to the awaiting task
            _events._set_running_loop(prev)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            fut.set_exception(exc)
            return fut
        _events._set_running_loop(prev)
        fut.set_result(result)
        return fut

    def set_default_executor(self, executor: ConcurrentFuture) -> None:  # type: ignore[override]
        raise RuntimeError("the simulated loop runs executor calls inline")

    # -- sockets: only through the simulated network --------------------------------
    async def create_connection(self, protocol_factory: Callable[[], asyncio.BaseProtocol],  # type: ignore[override]
                                host: str | None = None, port: int | None = None, **kw: Any) -> tuple[Any, Any]:
        if self.network is None:
            raise OSError("no simulated network attached to this loop")
        return await self.network.connect(protocol_factory, host, port)

    async def create_server(self, protocol_factory: Callable[[], asyncio.BaseProtocol],  # type: ignore[override]
                            host: Any = None, port: int | None = None, **kw: Any) -> Any:
        if self.network is None:
            raise OSError("no simulated network attached to this loop")
        return self.network.listen(protocol_factory, host, port)

    def add_signal_handler(self, sig: int, callback: Callable[..., Any], *args: Any) -> None:
        raise RuntimeError("simulated processes take no signals")
