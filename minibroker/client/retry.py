"""When to retry and how long to wait: pure decisions, no clock, no sleep.

Kafka's producer retries a batch while the error is retriable, the batch has
attempts left (`retries`) and `delivery.timeout.ms` has not passed since the
batch was created; it waits `retry.backoff.ms`, growing exponentially to
`retry.backoff.max.ms` with +-20% jitter (KIP-580). Errors of the
InvalidMetadata family also ask for a metadata refresh first.
"""
from __future__ import annotations

from dataclasses import dataclass

from minibroker.errors import ErrorCode


@dataclass(frozen=True)
class Backoff:
    """Kafka's ExponentialBackoff: initial * 2**attempt, capped, times a jitter factor."""
    initial_ms: int = 100
    max_ms: int = 1000
    multiplier: float = 2.0
    jitter: float = 0.2

    def delay_ms(self, attempt: int, rand: float = 0.5) -> int:
        """Delay before retry number `attempt` (0-based); `rand` in [0, 1) drives the jitter."""
        if self.initial_ms >= self.max_ms:
            base = float(self.max_ms)
        else:
            base = min(self.initial_ms * self.multiplier ** max(0, attempt), float(self.max_ms))
        factor = 1.0 - self.jitter + 2.0 * self.jitter * rand
        return max(0, int(base * factor))


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    refresh_metadata: bool
    reason: str


def is_retriable(code: int) -> bool:
    return code in ErrorCode._value2member_map_ and ErrorCode(code).retriable


def needs_metadata(code: int) -> bool:
    return code in ErrorCode._value2member_map_ and ErrorCode(code).refresh_metadata


def decide_retry(code: int, *, attempts: int, created_ms: int, now_ms: int,
                 retries: int, delivery_timeout_ms: int, retriable: bool | None = None) -> RetryDecision:
    """Whether a produce batch that failed with `code` after `attempts` sends may go again
    (`retriable` overrides the code's own flag: the idempotent producer's sequence rule)."""
    refresh = needs_metadata(code)
    if not (is_retriable(code) if retriable is None else retriable):
        return RetryDecision(False, refresh, "not retriable")
    if attempts > retries:
        return RetryDecision(False, refresh, f"retries={retries} exhausted")
    if now_ms - created_ms >= delivery_timeout_ms:
        return RetryDecision(False, refresh, f"delivery.timeout.ms={delivery_timeout_ms} passed")
    return RetryDecision(True, refresh, "retriable")
