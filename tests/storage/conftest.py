from __future__ import annotations

import pytest

from minibroker.events import Event

from .helpers import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def events() -> list[Event]:
    return []
