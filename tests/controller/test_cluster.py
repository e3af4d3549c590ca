from minibroker.controller.cluster import BrokerState, Cluster
from minibroker.metadata import BrokerRecord, Endpoint

EP = (Endpoint("PLAINTEXT", "h", 1),)


def cluster(*specs):
    c = Cluster()
    for b, epoch, fenced, ics in specs:
        c.apply(BrokerRecord(b, epoch, None, EP, fenced, ics), 0)
    return c


def nxt(c, b, fence=False, shut=False, offset=100, leads=False):
    return c.next_state(b, want_fence=fence, want_shut_down=shut, metadata_offset=offset,
                        has_leaderships=lambda: leads)


def test_fenced_broker_unfences_when_caught_up_and_not_asking_to_stay_fenced():
    c = cluster((1, 10, True, False))
    assert nxt(c, 1, offset=9) is BrokerState.FENCED
    assert nxt(c, 1, offset=10) is BrokerState.UNFENCED
    assert nxt(c, 1, fence=True) is BrokerState.FENCED
    assert nxt(c, 1, shut=True) is BrokerState.SHUTDOWN_NOW


def test_unfenced_broker_transitions():
    c = cluster((1, 10, False, False))
    assert nxt(c, 1) is BrokerState.UNFENCED
    assert nxt(c, 1, fence=True) is BrokerState.FENCED
    assert nxt(c, 1, fence=True, shut=True) is BrokerState.SHUTDOWN_NOW
    assert nxt(c, 1, shut=True, leads=True) is BrokerState.CONTROLLED_SHUTDOWN
    assert nxt(c, 1, shut=True, leads=False) is BrokerState.SHUTDOWN_NOW


def test_controlled_shutdown_completes_once_it_leads_nothing_and_active_brokers_caught_up():
    c = cluster((1, 10, False, True), (2, 11, False, False))
    c.sessions[1].controlled_shutdown_offset = 20
    c.sessions[2].metadata_offset = 19
    assert nxt(c, 1, shut=True, leads=True) is BrokerState.CONTROLLED_SHUTDOWN
    assert nxt(c, 1, shut=True) is BrokerState.CONTROLLED_SHUTDOWN
    c.sessions[2].metadata_offset = 20
    assert nxt(c, 1, shut=True) is BrokerState.SHUTDOWN_NOW


def test_stale_broker_is_the_unfenced_one_silent_longest_past_timeout():
    c = cluster((1, 1, False, False), (2, 2, False, False), (3, 3, True, False))
    c.sessions[1].last_contact_ms = 500
    c.sessions[2].last_contact_ms = 100
    c.sessions[3].last_contact_ms = 0
    assert c.find_one_stale(1000, 1000) is None
    assert c.find_one_stale(1101, 1000) == (2, 1001)


def test_new_incarnation_gets_a_fresh_session():
    c = cluster((1, 1, False, False))
    c.sessions[1].metadata_offset = 7
    assert c.apply(BrokerRecord(1, 1, None, EP, True, False), 5) is False
    assert c.sessions[1].metadata_offset == 7
    assert c.apply(BrokerRecord(1, 9, None, EP, True, False), 5) is True
    assert c.sessions[1].metadata_offset == -1 and c.sessions[1].last_contact_ms == 5
