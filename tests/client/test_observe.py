from minibroker.client.describe import describe_from_metadata
from minibroker.client.observe import join

META = {"brokers": [{"node_id": b, "host": "h", "port": 1} for b in (1, 2, 3)],
        "topics": [{"topic": "orders", "error": 0, "configs": {}, "partitions": [
            {"partition": 0, "error": 0, "leader": 1, "leader_epoch": 3, "replicas": [1, 2, 3], "isr": [1, 2],
             "elr": [], "last_known_elr": []},
            {"partition": 1, "error": 5, "leader": -1, "leader_epoch": 4, "replicas": [2, 3, 1], "isr": [2],
             "elr": [], "last_known_elr": []}]}]}


def status(node, parts):
    return {"node_id": node, "partitions": parts}


def test_leader_status_gives_hw_and_each_replica_lag():
    statuses = {1: status(1, [{"topic": "orders", "partition": 0, "role": "leader", "leader_epoch": 3, "leo": 120,
                               "hw": 110, "log_start_offset": 0, "isr": [1, 2],
                               "replicas": [{"broker_id": 2, "leo": 110, "in_isr": True, "caught_up": True},
                                            {"broker_id": 3, "leo": 40, "in_isr": False, "caught_up": False}]}])}
    v0, v1 = join(describe_from_metadata(META), statuses)
    assert (v0.leader, v0.leader_epoch, v0.hw) == (1, 3, 110)
    assert [(r.broker_id, r.leo, r.lag, r.in_isr) for r in v0.replicas] == [
        (1, 120, 0, True), (2, 110, 10, True), (3, 40, 80, False)]
    assert v1.leader is None and v1.note == "offline" and v1.hw is None


def test_missing_leader_status_is_noted():
    (v0, _) = join(describe_from_metadata(META), {})
    assert v0.note == "no status from leader 1" and v0.hw is None


def test_a_broker_that_no_longer_leads_is_noted():
    statuses = {1: status(1, [{"topic": "orders", "partition": 0, "role": "follower", "leo": 5, "hw": 5}])}
    (v0, _) = join(describe_from_metadata(META), statuses)
    assert "role follower" in v0.note


def test_a_stuck_follower_is_shown_with_its_reason():
    statuses = {1: status(1, [{"topic": "orders", "partition": 0, "role": "leader", "leader_epoch": 3, "leo": 120,
                               "hw": 110, "log_start_offset": 0, "isr": [1, 2],
                               "replicas": [{"broker_id": 2, "leo": 110, "in_isr": True, "caught_up": True},
                                            {"broker_id": 3, "leo": 40, "in_isr": False, "caught_up": False}]}]),
                3: status(3, [{"topic": "orders", "partition": 0, "role": "follower", "leo": 40, "hw": 40,
                               "fetch_state": {"stuck": True, "stuck_reason": "truncation changed nothing"}}])}
    v0, _ = join(describe_from_metadata(META), statuses)
    assert [r.stuck for r in v0.replicas] == [None, None, "truncation changed nothing"]
    assert v0.note == "3 stuck: truncation changed nothing"
    from minibroker.cli.watch import row
    assert row(v0)[-1].startswith("1:120/0  2:110/10  3:40/80*!  (3 stuck")
