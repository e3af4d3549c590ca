"""Failure tests: real clusters, faults, the checker's verdict.

`--runslow` (tests/conftest.py) also runs the tests marked `slow`.
"""
from __future__ import annotations

import pytest

from minibroker.testing.fixtures import cluster_factory  # noqa: F401
