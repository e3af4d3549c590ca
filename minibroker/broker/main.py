"""`minibroker broker`: run one broker process until SIGTERM/SIGINT.

Sets up uvloop and logging (one structured JSON line per event at INFO, a
few lifecycle lines, otherwise quiet) and runs `BrokerServer`."""
from __future__ import annotations

import asyncio
import logging
import os
import sys

from minibroker.broker.server import BrokerServer
from minibroker.memory import tune_allocator, tune_gc
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
    tune_allocator()
    raise_fd_limit()
    profile_dir = os.environ.get("MB_CPROFILE_DIR", "")
    if profile_dir:                       # bench/profile_cluster.py: a cProfile of the whole run
        import cProfile
        import signal
        import time
        timer = time.thread_time if os.environ.get("MB_CPROFILE_CLOCK") == "cpu" else time.perf_counter
        profs = [cProfile.Profile(timer)]
        path = os.path.join(profile_dir, f"broker-{server.node_id}.prof")

        def cut(_sig: int, _frame: object) -> None:
            """SIGUSR1: write what was profiled since the last cut to <path>.<n> and start afresh,
            so two cuts bracket a window (idleness, say)."""
            profs[-1].disable()
            profs[-1].dump_stats(f"{path}.{len(profs)}")
            profs.append(cProfile.Profile(timer))
            profs[-1].enable()
        signal.signal(signal.SIGUSR1, cut)
        profs[0].enable()
        try:
            return _run_loop(server)
        finally:
            profs[-1].disable()
            profs[-1].dump_stats(path)
    return _run_loop(server)


def _run_loop(server: BrokerServer) -> int:
    try:
        import uvloop
        return uvloop.run(server.run())
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.run(server.run())
