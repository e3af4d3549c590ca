"""`minibroker broker`: run one broker process until SIGTERM/SIGINT.

Sets up uvloop and logging (one structured JSON line per event at INFO, a
few lifecycle lines, otherwise quiet) and runs `BrokerServer`."""
from __future__ import annotations

import asyncio
import logging
import sys

from minibroker.broker.server import BrokerServer
from minibroker.config import Config

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(config: Config) -> None:
    level_name = config.get("minibroker.log.level", "INFO").upper()
    level = getattr(logging, level_name, None)
    if not isinstance(level, int):
        level = logging.INFO
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("asyncio").setLevel(logging.WARNING)


def run(config: Config) -> int:
    """Run a broker with `config` until it is told to stop; returns the exit
    status (0 after a clean or controlled shutdown). Configuration errors
    raise minibroker.config.ConfigError before anything starts."""
    setup_logging(config)
    server = BrokerServer(config)
    try:
        import uvloop
        return uvloop.run(server.run())
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.run(server.run())
