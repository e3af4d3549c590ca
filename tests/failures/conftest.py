"""Failure tests: real clusters, faults, the checker's verdict.

`--runslow` (or MINIBROKER_RUNSLOW=1) also runs the tests marked `slow`
(long randomised variants); without it they are skipped.
"""
from __future__ import annotations

import os

import pytest

from minibroker.testing.fixtures import cluster_factory  # noqa: F401


def pytest_addoption(parser: pytest.Parser) -> None:
    try:
        parser.addoption("--runslow", action="store_true", default=False,
                         help="also run tests marked slow (long randomised fault runs)")
    except ValueError:       # already added by another conftest
        pass


def _runslow(config: pytest.Config) -> bool:
    try:
        if config.getoption("--runslow"):
            return True
    except ValueError:
        pass
    return os.environ.get("MINIBROKER_RUNSLOW", "") not in ("", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _runslow(config):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow (or MINIBROKER_RUNSLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
