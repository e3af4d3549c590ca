"""Random event sequences against the core: invariants hold after every event,
and replaying the emitted records rebuilds the same image."""
from hypothesis import event, given, settings
from hypothesis import strategies as st

from minibroker.controller.state import ControllerState
from minibroker.metadata import NO_LEADER, PartitionRecord

from .harness import SESSION_MS, Harness

BROKERS = (1, 2, 3, 4)

op = st.one_of(
    st.tuples(st.just("register"), st.sampled_from(BROKERS), st.booleans()),
    st.tuples(st.just("heartbeat"), st.sampled_from(BROKERS),
              st.sampled_from(["plain", "fence", "shutdown", "behind"])),
    st.tuples(st.just("silence"), st.sampled_from(BROKERS), st.integers(0, 2 * SESSION_MS)),
    st.tuples(st.just("alter"), st.integers(0, 2), st.lists(st.sampled_from(BROKERS), max_size=4, unique=True)),
    st.tuples(st.just("elect"), st.sampled_from([0, 1]), st.integers(0, 2)),
    st.tuples(st.just("create"), st.integers(1, 3), st.integers(1, 3)),
)


def check_invariants(h: Harness, last: dict) -> None:
    st_ = h.state
    elr_on = st_.settings.elr_enabled
    for p in st_.topics.all_partitions():
        assert len(set(p.isr)) == len(p.isr) and set(p.isr) <= set(p.replicas), p
        assert p.leader == NO_LEADER or p.leader in p.isr, p
        assert p.leader == NO_LEADER or st_.cluster.is_active(p.leader), p
        assert not set(p.elr) & set(p.isr), p
        if not elr_on:
            assert p.isr and p.elr == () and p.last_known_elr == (), p
        prev: PartitionRecord | None = last.get(p.key)
        if prev is not None and prev != p:
            assert p.partition_epoch > prev.partition_epoch, (prev, p)
            assert p.leader_epoch >= prev.leader_epoch, (prev, p)
            if p.leader != prev.leader:
                assert p.leader_epoch > prev.leader_epoch, (prev, p)
        last[p.key] = p


def run_ops(ops, elr: bool) -> None:
    h = Harness(elr_enabled=elr, leader_imbalance_check_interval_ms=5000, unclean_leader_election_interval_ms=7000)
    silent: set[int] = set()
    last: dict = {}
    h.start(*BROKERS)
    h.create("t0", partitions=1, rf=3, configs={"min.insync.replicas": "2"})
    h.create("t1", partitions=1, rf=2)
    h.create("t2", partitions=1, rf=3, configs={"unclean.leader.election.enable": "true"})
    topics = 3
    for o in ops:
        kind = o[0]
        if kind == "register":
            b, clean = o[1], o[2]
            h.register(b, prev=h.epochs.get(b, -1) if clean else -1)
            silent.discard(b)
        elif kind == "heartbeat" and o[1] in h.epochs:
            b, how = o[1], o[2]
            kw = {"fence": {"want_fence": True}, "shutdown": {"want_shut_down": True}}.get(how, {})
            off = h.epochs[b] - 1 if how == "behind" else None
            h.heartbeat(b, offset=off, **kw)
            silent.discard(b)
        elif kind == "silence":
            silent.add(o[1])
            h.advance(o[2])
            for b in h.epochs:
                if b not in silent:
                    h.heartbeat(b)
            h.tick()
        elif kind == "alter" and topics:
            part = h.state.topics.get(f"t{o[1] % topics}", 0)
            if part is not None and part.leader != NO_LEADER:
                isr = [part.leader] + [b for b in o[2] if b != part.leader and b in part.replicas]
                h.alter(part.leader, isr, topic=part.topic)
        elif kind == "elect" and topics:
            h._keep(h.state.elect_leaders(h.now, o[1], [{"topic": f"t{o[2] % topics}", "partitions": [0]}]))
        elif kind == "create":
            out = h.create(f"t{topics}", partitions=o[1], rf=o[2], configs={"min.insync.replicas": "2"})
            if out.response["topics"][0]["error"] == 0:
                topics += 1
        check_invariants(h, last)
    event(f"topics created: {min(topics - 3, 2)}+")
    event(f"elections: {min(len(h.events('election')), 3)}+")
    event(f"offline: {min(len(h.events('offline')), 1)}+")
    records = [r for o in h.log for r in o.records]
    assert [off for off, _ in records] == list(range(h.state.next_offset))
    fresh = ControllerState(h.state.settings)
    for off, rec in records:
        fresh.replay(off, rec)
    assert fresh.image() == h.state.image()


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=40))
def test_random_histories_keep_invariants_without_elr(ops):
    run_ops(ops, elr=False)


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=40))
def test_random_histories_keep_invariants_with_elr(ops):
    run_ops(ops, elr=True)
