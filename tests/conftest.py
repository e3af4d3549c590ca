"""Suite-wide options. `--runslow` (or MINIBROKER_RUNSLOW=1) also runs the
tests marked `slow` (long randomised fault runs); without it they are skipped."""
from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run tests marked slow (long randomised fault runs)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow") or os.environ.get("MINIBROKER_RUNSLOW", "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow (or MINIBROKER_RUNSLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
