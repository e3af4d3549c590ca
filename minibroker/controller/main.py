"""`minibroker controller`: run one controller process until SIGTERM/SIGINT."""
from __future__ import annotations

import asyncio
import logging
import signal

import uvloop

from minibroker.config import Config
from minibroker.controller.server import ControllerServer, configure_logging

log = logging.getLogger("minibroker.controller")


async def serve_until_signalled(config: Config) -> None:
    """Start a controller, run until SIGTERM/SIGINT (or a fatal error), then stop it cleanly."""
    server = ControllerServer(config)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        done_waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(server.stopped.wait())]
        await asyncio.wait(done_waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in done_waiters:
            w.cancel()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        log.info("controller %d shutting down", server.settings.node_id)
        await server.stop()
    if server.fatal is not None:
        raise RuntimeError(f"controller stopped after a fatal error: {server.fatal}")


def run(config: Config) -> None:
    """Blocking entry point for the CLI: uvloop, serve until SIGTERM/SIGINT, exit cleanly."""
    configure_logging()
    from minibroker.memory import tune_allocator, tune_gc
    tune_gc()
    tune_allocator()
    uvloop.run(serve_until_signalled(config))
