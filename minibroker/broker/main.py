"""`minibroker broker`: run one broker process until SIGTERM/SIGINT.

Sets up uvloop and logging (one structured JSON line per event at INFO, a
few lifecycle lines, otherwise quiet) and runs `BrokerServer`."""
from __future__ import annotations

import asyncio
import gc
import logging
import os
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


def tune_gc() -> None:
    """Full (generation 2) collections walk every live object: with a large
    request's hundreds of thousands of objects they paused the loop for
    100 ms and more. Objects alive at startup leave the collector's view
    (gc.freeze), and full collections run 100 times less often."""
    gc.freeze()
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(max(gen0, 10_000), gen1, 1_000)


def raise_fd_limit() -> None:
    """Lift the soft descriptor limit to the hard one (a distribution's 1024
    default is far below what thousands of partitions and connections need;
    Kafka's packaging sets LimitNOFILE for the same reason)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return
        logging.getLogger("minibroker.broker").info("raised the open-file limit from %d to %d", soft, target)


def run(config: Config) -> int:
    """Run a broker with `config` until it is told to stop; returns the exit
    status (0 after a clean or controlled shutdown). Configuration errors
    raise minibroker.config.ConfigError before anything starts."""
    setup_logging(config)
    server = BrokerServer(config)
    tune_gc()
    raise_fd_limit()
    profile_dir = os.environ.get("MB_CPROFILE_DIR", "")
    if profile_dir:                       # bench/profile_cluster.py: a cProfile of the whole run
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
        try:
            return _run_loop(server)
        finally:
            prof.disable()
            prof.dump_stats(os.path.join(profile_dir, f"broker-{server.node_id}.prof"))
    return _run_loop(server)


def _run_loop(server: BrokerServer) -> int:
    try:
        import uvloop
        return uvloop.run(server.run())
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.run(server.run())
