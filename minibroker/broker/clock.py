"""The broker's clock: wall-clock milliseconds, as Kafka's `time.milliseconds()`.

Drivers read it and pass `now_ms` into cores; cores never call it."""
from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
