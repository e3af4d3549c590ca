from minibroker.client.retry import Backoff, decide_retry
from minibroker.errors import ErrorCode


def test_backoff_grows_exponentially_to_the_cap():
    b = Backoff(100, 1000, jitter=0.0)
    assert [b.delay_ms(a) for a in range(6)] == [100, 200, 400, 800, 1000, 1000]


def test_backoff_jitter_stays_within_twenty_percent():
    b = Backoff(100, 1000)
    assert b.delay_ms(0, 0.0) == 80
    assert b.delay_ms(0, 0.999) in (119, 120)


def test_backoff_with_initial_at_or_above_max_is_constant():
    assert Backoff(1000, 500, jitter=0).delay_ms(3) == 500


def test_retriable_error_is_retried_while_attempts_and_time_remain():
    d = decide_retry(ErrorCode.NOT_ENOUGH_REPLICAS, attempts=1, created_ms=0, now_ms=10,
                     retries=3, delivery_timeout_ms=1000)
    assert d.retry and not d.refresh_metadata


def test_not_leader_retries_and_refreshes_metadata():
    d = decide_retry(ErrorCode.NOT_LEADER_OR_FOLLOWER, attempts=1, created_ms=0, now_ms=10,
                     retries=3, delivery_timeout_ms=1000)
    assert d.retry and d.refresh_metadata


def test_non_retriable_error_fails_at_once():
    d = decide_retry(ErrorCode.MESSAGE_TOO_LARGE, attempts=1, created_ms=0, now_ms=10,
                     retries=3, delivery_timeout_ms=1000)
    assert not d.retry


def test_retries_exhausted_after_retries_plus_one_sends():
    ok = decide_retry(ErrorCode.REQUEST_TIMED_OUT, attempts=3, created_ms=0, now_ms=10, retries=3,
                      delivery_timeout_ms=1000)
    over = decide_retry(ErrorCode.REQUEST_TIMED_OUT, attempts=4, created_ms=0, now_ms=10, retries=3,
                        delivery_timeout_ms=1000)
    assert ok.retry and not over.retry


def test_delivery_timeout_ends_retries():
    d = decide_retry(ErrorCode.NOT_ENOUGH_REPLICAS, attempts=1, created_ms=0, now_ms=1000, retries=10,
                     delivery_timeout_ms=1000)
    assert not d.retry and "delivery.timeout.ms" in d.reason


def test_offset_out_of_range_is_not_retriable():
    assert not decide_retry(ErrorCode.OFFSET_OUT_OF_RANGE, attempts=1, created_ms=0, now_ms=0, retries=5,
                            delivery_timeout_ms=100).retry
