import pytest

from minibroker.client.fetch_state import FetchState
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode

TP = TopicPartition("orders", 0)
LEADER, FOLLOWER = 1, 2


def state(reset="earliest"):
    s = FetchState(auto_offset_reset=reset, metadata_max_age_ms=300_000, retry_backoff_ms=100)
    s.assign([TP])
    return s


def known(_n):
    return True


def test_new_assignment_waits_for_a_reset_by_policy():
    s = state("latest")
    assert s.position(TP) is None
    assert s.needs_reset(0) == {TP: "latest"}
    s.on_reset(TP, 42)
    assert s.position(TP) == 42 and s.needs_reset(0) == {}


def test_seek_sets_the_position_and_cancels_a_pending_reset():
    s = state()
    s.seek(TP, 7)
    assert s.position(TP) == 7 and s.needs_reset(0) == {}


def test_without_preferred_replica_fetches_go_to_the_leader():
    s = state()
    s.seek(TP, 0)
    assert s.fetch_node(TP, 0, LEADER, known) == LEADER


def test_leader_naming_a_preferred_replica_redirects_fetches_there():
    s = state()
    s.seek(TP, 0)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=FOLLOWER, now_ms=1000)
    assert s.fetch_node(TP, 1001, LEADER, known) == FOLLOWER
    assert s.position(TP) == 0


def test_preferred_replica_expires_after_metadata_max_age():
    s = state()
    s.seek(TP, 0)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=FOLLOWER, now_ms=1000)
    assert s.fetch_node(TP, 1000 + 300_000, LEADER, known) == LEADER


def test_preferred_replica_missing_from_metadata_falls_back_to_the_leader():
    s = state()
    s.seek(TP, 0)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=FOLLOWER, now_ms=0)
    assert s.fetch_node(TP, 1, LEADER, lambda n: n != FOLLOWER) == LEADER


def test_an_unknown_preferred_replica_refreshes_metadata_once_and_reads_from_the_leader_without_the_rack():
    s = state()
    s.seek(TP, 0)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=FOLLOWER, now_ms=0)
    node, with_rack, r = s.route(TP, 1, LEADER, lambda n: n != FOLLOWER)
    assert (node, with_rack, r.refresh_metadata) == (LEADER, False, True)
    assert "not in our metadata" in r.note
    for t in range(2, 50):                             # until the refresh lands: no more refreshes asked
        node, with_rack, r = s.route(TP, t, LEADER, lambda n: n != FOLLOWER)
        assert (node, with_rack, r.refresh_metadata) == (LEADER, False, False)
    node, with_rack, r = s.route(TP, 50, LEADER, known)  # the metadata now knows it
    assert (node, with_rack, r.refresh_metadata) == (FOLLOWER, True, False)


def test_a_known_preferred_replica_named_again_after_it_was_unknown_asks_for_a_new_refresh():
    s = state()
    s.seek(TP, 0)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=FOLLOWER, now_ms=0)
    s.route(TP, 1, LEADER, lambda n: n != FOLLOWER)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=3, now_ms=2)
    assert s.route(TP, 3, LEADER, lambda n: n != 3)[2].refresh_metadata


def test_offset_out_of_range_from_preferred_replica_goes_back_to_leader_keeping_position():
    s = state()
    s.seek(TP, 5)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=FOLLOWER, now_ms=0)
    r = s.on_error(TP, FOLLOWER, ErrorCode.OFFSET_OUT_OF_RANGE, now_ms=10)
    assert r.error is None and "position kept" in r.note
    assert s.position(TP) == 5
    assert s.needs_reset(10) == {}
    assert s.fetch_node(TP, 10, LEADER, known) == LEADER


def test_offset_out_of_range_from_the_leader_resets_by_policy():
    s = state("earliest")
    s.seek(TP, 500)
    s.on_error(TP, LEADER, ErrorCode.OFFSET_OUT_OF_RANGE, now_ms=0)
    assert s.position(TP) is None and s.needs_reset(0) == {TP: "earliest"}


def test_offset_out_of_range_with_reset_none_is_raised():
    s = state("none")
    s.seek(TP, 500)
    r = s.on_error(TP, LEADER, ErrorCode.OFFSET_OUT_OF_RANGE, now_ms=0)
    assert r.error is not None and r.error.code == ErrorCode.OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                                  ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.REPLICA_NOT_AVAILABLE,
                                  ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
def test_metadata_errors_refresh_metadata_and_clear_the_preferred_replica(code):
    s = state()
    s.seek(TP, 3)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=FOLLOWER, now_ms=0)
    r = s.on_error(TP, FOLLOWER, code, now_ms=10)
    assert r.refresh_metadata and r.error is None
    assert s.fetch_node(TP, 200, LEADER, known) == LEADER
    assert s.position(TP) == 3


def test_unknown_leader_epoch_only_backs_off():
    s = state()
    s.seek(TP, 3)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=FOLLOWER, now_ms=0)
    r = s.on_error(TP, FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH, now_ms=10)
    assert not r.refresh_metadata and r.error is None
    assert s.fetchable(50) == [] and s.fetchable(110) == [TP]
    assert s.fetch_node(TP, 110, LEADER, known) == FOLLOWER


@pytest.mark.parametrize("code", [ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_REQUEST])
def test_fatal_error_is_raised_to_the_caller(code):
    s = state()
    s.seek(TP, 3)
    r = s.on_error(TP, LEADER, code, now_ms=0)
    assert r.error is not None and r.error.code == code
    assert s.position(TP) == 3


def test_other_retriable_errors_back_off_and_retry():
    s = state()
    s.seek(TP, 3)
    r = s.on_error(TP, LEADER, ErrorCode.REQUEST_TIMED_OUT, now_ms=0)
    assert r.error is None and s.fetchable(100) == [TP]


def test_data_moves_the_position_and_records_the_hw_and_the_serving_broker():
    s = state()
    s.seek(TP, 3)
    s.on_sent(TP)
    assert s.fetchable(0) == []
    s.on_data(TP, FOLLOWER, next_offset=8, high_watermark=8, log_start_offset=0,
              preferred_read_replica=-1, now_ms=0)
    st = s.parts[TP]
    assert (s.position(TP), st.high_watermark, st.last_fetched_from) == (8, 8, FOLLOWER)
    assert s.fetchable(0) == [TP]


def test_failed_request_to_preferred_replica_drops_it():
    s = state()
    s.seek(TP, 0)
    s.on_data(TP, LEADER, next_offset=None, high_watermark=10, log_start_offset=0,
              preferred_read_replica=FOLLOWER, now_ms=0)
    s.on_sent(TP)
    r = s.on_request_failed([TP], FOLLOWER, now_ms=5)
    assert r.refresh_metadata
    assert s.fetch_node(TP, 200, LEADER, known) == LEADER


def test_reassigning_keeps_state_of_partitions_that_stay():
    s = state()
    s.seek(TP, 9)
    other = TopicPartition("orders", 1)
    s.assign([TP, other])
    assert s.position(TP) == 9 and s.position(other) is None


def test_an_answer_for_a_position_that_moved_while_in_flight_is_dropped_as_stale():
    s = state()
    s.seek(TP, 10)
    s.on_sent(TP)
    assert not s.drop_if_stale(TP) and s.fetchable(0) == []
    s.on_sent(TP)
    s.seek(TP, 3)                              # a seek while the Fetch at 10 is in flight
    assert s.fetchable(0) == []                # one Fetch per partition at a time
    assert s.drop_if_stale(TP)
    assert s.position(TP) == 3 and s.fetchable(0) == [TP]


def test_an_answer_after_a_reset_was_requested_is_dropped_as_stale_and_lets_the_reset_run():
    s = state()
    s.seek(TP, 10)
    s.on_sent(TP)
    s.request_reset(TP, "earliest")
    assert s.needs_reset(0) == {}              # waits for the Fetch in flight
    assert s.drop_if_stale(TP)
    assert s.needs_reset(0) == {TP: "earliest"}


def test_an_answer_for_an_unassigned_partition_is_dropped_as_stale():
    s = state()
    s.seek(TP, 0)
    s.on_sent(TP)
    s.assign([])
    assert s.drop_if_stale(TP)
