"""Regression tests for the named scenarios of reliability-scenarios.md, on
real processes. Each docstring says how the rig reproduces the scenario:
the precise orderings come from the fault proxy (cut or hold one path),
SIGSTOP/SIGKILL ordering and conditions observed through ReplicaStatus,
never from sleeping and hoping. Brokers are A/B/C as in the catalogue;
which broker id plays which role is set by explicit replica assignments.
"""
from __future__ import annotations

import os
import shutil

import pytest

from minibroker.client.types import TopicPartition
from minibroker.net.sasl import AUTH_FRAMES
from minibroker.storage.manager import CLEAN_SHUTDOWN_FILE
from minibroker.verify.checker import Ack, Failure, Read, Report, check, compare_replicas
from minibroker.verify.replicas import ReplicaDirs, read_partition, read_segment_batches

from .rig import (Rig, assert_clean, cut_pairs, make_cluster, outcomes, producer, read_values, uncut_pairs,
                  until)

pytestmark = pytest.mark.cluster


async def send_each(p, topic: str, values: list[str], partition: int = 0, first_seq: int = 0) -> list[Ack]:
    """One batch per record, each acknowledged before the next is sent (send order = seq)."""
    out = []
    for i, v in enumerate(values, first_seq):
        md = await p.send_and_wait(topic, v.encode(), partition=partition)
        out.append(Ack(v, partition, md.offset, i))
    return out


async def status(rig: Rig, broker: int, p: int = 0) -> dict:
    return (await rig.status_of(broker))[p]


async def wait_status(rig: Rig, broker: int, pred, what: str, timeout_s: float = 30.0, p: int = 0) -> dict:
    async def cond():
        st = await status(rig, broker, p)
        return st if pred(st) else None
    return await until(cond, f"broker {broker}: {what}", timeout_s)


async def events(rig: Rig, broker: int) -> list[dict]:
    """Every event in the broker's ring buffer (ISR changes, elections, truncations...)."""
    resp = await rig.admin.events(rig.c.broker_address(broker), 0, 0, 10000)
    return list(resp.get("events", ()))


def verdict(acks: list[Ack], reads: list[tuple[int, str]], failures: list[Failure] = (),
            replicas: dict[int, list] | None = None, name: str = "t-0") -> Report:
    rep = check(acks, failures, [Read(v, 0, o) for o, v in reads])
    if replicas is not None:
        compare_replicas(name, replicas, rep)
    return rep


async def converged_replicas(rig: Rig, brokers: list[int], p: int = 0) -> dict[int, list]:
    """Wait until the brokers' LEOs equal the leader's HW and LEO, then read their partition files."""
    dirs = ReplicaDirs.of_local_cluster(rig.c.data_dir)

    async def cond():
        sts = {b: await status(rig, b, p) for b in brokers}
        lead = [s for s in sts.values() if s["role"] == "leader"]
        if len(lead) != 1 or lead[0]["hw"] != lead[0]["leo"]:
            return None
        return lead[0]["leo"] if all(s["leo"] == lead[0]["leo"] for s in sts.values()) else None
    leo = await until(cond, f"replicas {brokers} converged", 40)
    return {b: read_partition(dirs.partition_dir(b, rig.topic, p), leo) for b in brokers}


# ---------------------------------------------------------------------------------------- S3


async def test_s3_follower_with_a_stale_hw_keeps_its_suffix_and_serves_it_as_the_next_leader(cluster_factory):
    """KIP-101 scenario 1. B=1 leads, C=2 and A=3 follow. The last acknowledged record m is
    on A, but A's HW lags: A learns the HW only in the response to its next fetch, which the
    leader parks (replica.fetch.wait.max.ms=4000, HW-only changes do not wake it). Right after
    the ack A is cut from both brokers (the proxy aborts the parked fetch, so A never learns
    the HW; checked: A's HW <= m's offset). B is killed: C leads, A becomes C's follower but
    cannot reach it; a pre-KIP-101 follower would truncate to its HW here. C is killed: A, the
    last ISR member, leads, and m must still be there; after B and C return every replica
    holds every acknowledged record, byte for byte. (A restart of A instead of the leader
    change would make A leave the ISR in KRaft, so the leader change is where the old rule
    would bite; storage's own tests cover keeping the suffix across a restart.)"""
    c = make_cluster(cluster_factory, **{"replica.fetch.wait.max.ms": "4000", "replica.socket.timeout.ms": "10000",
                                         "replica.lag.time.max.ms": "10000"})
    async with Rig(c, "s3", 1) as rig:
        await rig.create_topic([[1, 2, 3]])
        async with producer(c.bootstrap) as p:
            acks = await send_each(p, "s3", [f"m{i}" for i in range(10)])
        m = acks[-1]
        cut_pairs(c, [(3, 1), (3, 2)])
        a = await status(rig, 3)
        assert a["leo"] == m.offset + 1 and a["hw"] <= m.offset, f"rig did not leave A's HW behind: {a}"
        epoch0 = a["leader_epoch"]

        rig.kill(1)
        a = await wait_status(rig, 3, lambda s: s["leader"] == 2 and s["leader_epoch"] > epoch0,
                              "follows C in a new epoch")
        assert a["role"] == "follower"
        assert a["leo"] == m.offset + 1, f"A truncated its unacknowledged-by-HW suffix on becoming a follower: {a}"

        rig.kill(2)
        a = await wait_status(rig, 3, lambda s: s["role"] == "leader", "leads")
        assert a["leo"] == m.offset + 1, a

        c.heal()
        rig.start(1)
        rig.start(2)
        await rig.wait_running()
        await rig.wait_isr_full()
        replicas = await converged_replicas(rig, [1, 2, 3])
        reads = await read_values(c.bootstrap, "s3")
    rep = verdict(acks, reads, replicas=replicas, name="s3-0")
    assert_clean(rep, min_acked=10)


# ---------------------------------------------------------------------------------------- S4


async def test_s4_logs_do_not_diverge_after_a_correlated_crash_with_a_lost_tail(cluster_factory):
    """KIP-101 scenario 2 (Kafka's shouldNotAllowDivergentLogs). RF=2 (A=1, B=2),
    min.insync.replicas=1. m0..m9 are written to both (one batch each). A is killed (B leads),
    then B is killed (offline). B's lost page cache is faked by cutting its segment file
    in the middle of batch 5 and removing any clean-shutdown marker. B restarts first, is
    elected with LEO 5 and takes n5..n9; then A restarts holding m0..m9. A must truncate to
    5 (the end of the epoch both share) and fetch n5..n9: afterwards both logs hold the same
    batches byte for byte. Losing m5..m9 is allowed (no copy survived); divergence is not."""
    c = make_cluster(cluster_factory, **{"min.insync.replicas": "1"})
    dirs = ReplicaDirs.of_local_cluster(c.data_dir)
    async with Rig(c, "s4", 1) as rig:
        await rig.create_topic([[1, 2]])
        async with producer(c.bootstrap) as p:
            acks = await send_each(p, "s4", [f"m{i}" for i in range(10)])
        await wait_status(rig, 2, lambda s: s["leo"] == 10, "holds m0..m9")

        rig.kill(1)
        await wait_status(rig, 2, lambda s: s["role"] == "leader", "leads after A died")
        rig.kill(2)
        await rig.wait_metadata(lambda pd: pd.leader is None and pd.isr == (2,), "offline, ISR [B]")

        pdir = dirs.partition_dir(2, "s4", 0)
        (seg,) = [n for n in os.listdir(pdir) if n.endswith(".log")]
        batches, _ = read_segment_batches(os.path.join(pdir, seg))
        cut = sum(len(b[3]) for b in batches[:5]) + 7
        os.truncate(os.path.join(pdir, seg), cut)
        marker = os.path.join(dirs.dirs[2], CLEAN_SHUTDOWN_FILE)
        if os.path.exists(marker):
            os.remove(marker)

        rig.start(2)
        b = await wait_status(rig, 2, lambda s: s["role"] == "leader", "leads with its short log")
        assert b["leo"] == 5, b
        async with producer(c.bootstrap) as p:
            new = await send_each(p, "s4", [f"n{i}" for i in range(5, 10)], first_seq=10)
        assert [a.offset for a in new] == [5, 6, 7, 8, 9]

        rig.start(1)
        await rig.wait_running()
        await rig.wait_isr_full()
        replicas = await converged_replicas(rig, [1, 2])
        reads = await read_values(c.bootstrap, "s4")
    rep = verdict(acks[:5] + new, reads, replicas=replicas, name="s4-0")
    assert_clean(rep, min_acked=10)
    assert replicas[1] == replicas[2], "A and B hold different batches"
    assert [v for _, v in reads] == [f"m{i}" for i in range(5)] + [f"n{i}" for i in range(5, 10)]


# ---------------------------------------------------------------------------------------- S5


async def test_s5_fast_double_failover_converges_to_identical_logs(cluster_factory):
    """KAFKA-6361 / KIP-279. Assignment [B=2, A=1, C=3]; A is made leader (B stopped and
    restarted), epoch e. X (offsets 0-9) is on every replica. The followers' paths to A are
    cut and Y (10-20, acks=1) is appended on A only. A is frozen (SIGSTOP) and a preferred
    election makes B the leader in epoch e+1 while A is still in the ISR (session and lag
    timeouts are 8-10 s in this cluster, so nothing is fenced or shrunk meanwhile); B takes
    Z (10-15, acks=1), which C copies. B then shuts down (controlled), and A, still in the
    ISR, is elected for epoch e+2 without ever having seen e+1. A resumes with X+Y. C, and B
    when it returns, hold Z in epoch e+1: both must truncate back to 10 (A answers epoch e
    ends at 21, the follower walks back through its own epochs) and fetch Y. End state:
    identical logs, X and Y readable, Z gone (acks=1, allowed)."""
    c = make_cluster(cluster_factory, **{"broker.session.timeout.ms": "8000", "replica.lag.time.max.ms": "10000"})
    tp = TopicPartition("s5", 0)
    async with Rig(c, "s5", 1) as rig:
        await rig.create_topic([[2, 1, 3]])
        rig.stop(2)
        await rig.wait_view(lambda vs: vs[0]["leader"] == 1, "A leads", exclude={2})
        rig.start(2)
        await rig.wait_running()
        await rig.wait_isr_full()

        async with producer(c.bootstrap) as p:
            xs = [await p.send("s5", f"x{i}".encode(), partition=0) for i in range(10)]
            x_acks = [Ack(f"x{i}", 0, o, i) for i, (o, e) in enumerate(await outcomes(xs)) if e is None]
        assert len(x_acks) == 10
        cut_pairs(c, [(2, 1), (3, 1)], both_ways=False)      # followers cannot fetch from A
        async with producer(c.bootstrap, acks="1") as p:
            ys = [await p.send("s5", f"y{i}".encode(), partition=0) for i in range(11)]
            y_out = await outcomes(ys)
        assert [o for o, _ in y_out] == list(range(10, 21)), y_out
        a = await status(rig, 1)
        epoch_a = a["leader_epoch"]

        rig.pause(1)
        res = await rig.admin.elect_leaders("preferred", [tp])
        assert res[tp] is None, res
        await wait_status(rig, 2, lambda s: s["role"] == "leader" and s["leader_epoch"] == epoch_a + 1, "leads")
        async with producer(c.layout.broker(2).address, acks="1", **{"metadata.max.age.ms": "600000"}) as p:
            zs = [await p.send("s5", f"z{i}".encode(), partition=0) for i in range(6)]
            z_out = await outcomes(zs)
        assert [o for o, _ in z_out] == list(range(10, 16)), z_out
        await wait_status(rig, 3, lambda s: s["leo"] == 16, "copied Z")

        rig.stop(2)
        await wait_status(rig, 3, lambda s: s["leader"] == 1 and s["leader_epoch"] >= epoch_a + 2,
                          "sees A elected again")
        uncut_pairs(c, [(2, 1), (3, 1)], both_ways=False)
        rig.resume(1)
        await wait_status(rig, 1, lambda s: s["role"] == "leader" and s["leo"] == 21, "leads with X+Y")
        rig.start(2)
        await rig.wait_running()
        await rig.wait_isr_full()
        replicas = await converged_replicas(rig, [1, 2, 3])
        reads = await read_values(c.bootstrap, "s5")
    rep = verdict(x_acks, reads, replicas=replicas, name="s5-0")
    assert_clean(rep, min_acked=10)
    assert replicas[1] == replicas[2] == replicas[3]
    assert [v for _, v in reads] == [f"x{i}" for i in range(10)] + [f"y{i}" for i in range(11)]


# ---------------------------------------------------------------------------------------- S8


async def test_s8_follower_below_the_new_leaders_epoch_start_does_not_join_the_isr(cluster_factory):
    """KAFKA-7128. A=1 leads, B=2 and C=3 follow. 95 records reach everyone; then C's path
    to A is cut and 5 more are written. Once B holds them, A's answers to B are held in the
    proxy (B's fetches still reach A, so B stays caught up): the 5 are acknowledged when A
    drops C (ISR {A,B}), and B never hears of the HW move, so its HW stays at 95 (checked),
    as a follower one fetch behind. A is killed; B leads with epoch start 100 and HW 95. C's
    answers from B after authentication are held in the proxy, so C's fetch at offset 95 (>= B's HW, < B's
    epoch start) reaches B while C gets nothing back: B must not add C to the ISR (not even
    as a pending expansion). Released, C catches up to 100 and joins; B is killed and C,
    now a legitimate leader, holds all 100 acknowledged records."""
    c = make_cluster(cluster_factory, **{"replica.socket.timeout.ms": "10000"})
    async with Rig(c, "s8", 1) as rig:
        await rig.create_topic([[1, 2, 3]])
        async with producer(c.bootstrap, **{"linger.ms": "5", "request.timeout.ms": "10000",
                                            "delivery.timeout.ms": "20000"}) as p:    # outlasts A dropping C
            first = [await p.send("s8", f"m{i}".encode(), partition=0) for i in range(95)]
            acks = [Ack(f"m{i}", 0, o, i) for i, (o, e) in enumerate(await outcomes(first)) if e is None]
            await wait_status(rig, 3, lambda s: s["leo"] == 95, "holds 95 records")
            cut_pairs(c, [(3, 1)])
            last = [await p.send("s8", f"m{i}".encode(), partition=0) for i in range(95, 100)]
            await wait_status(rig, 2, lambda s: s["leo"] == 100, "holds 100 records")
            c.hold(2, 1, "responses")
            acks += [Ack(f"m{i}", 0, o, i)
                     for i, (o, e) in zip(range(95, 100), await outcomes(last), strict=True) if e is None]
        assert [a.offset for a in acks] == list(range(100)), acks[-5:]
        rig.kill(1)
        b = await status(rig, 2)
        assert b["leo"] == 100 and b["hw"] < 100, f"rig did not leave B's HW behind: {b}"
        epoch0 = b["leader_epoch"]

        c.block(3, 2)                              # drop any live C->B connection, then hold
        c.hold(3, 2, "responses", after=AUTH_FRAMES)   # every answer after authentication
        c.unblock(3, 2)
        c.unblock(3, 1)
        c.unblock(1, 3)
        c.release(2, 1)
        b = await wait_status(rig, 2, lambda s: s["role"] == "leader" and s["leader_epoch"] > epoch0, "leads")
        assert b["hw"] < 100 <= b["epoch_start_offset"], b

        def c_fetched_at_95(s):
            r = next(r for r in s["replicas"] if r["broker_id"] == 3)
            return s["role"] == "leader" and r["leo"] == 95
        b = await wait_status(rig, 2, c_fetched_at_95, "saw C fetch at offset 95")
        assert 3 not in b["isr"] and 3 not in b["maximal_isr"], f"C joined the ISR below the epoch start: {b}"

        c.release(3, 2)
        await wait_status(rig, 2, lambda s: 3 in s["isr"], "C joined after catching up")
        rig.kill(2)
        await wait_status(rig, 3, lambda s: s["role"] == "leader", "leads")
        rig.start(1)
        rig.start(2)
        await rig.wait_running()
        await rig.wait_isr_full()
        replicas = await converged_replicas(rig, [1, 2, 3])
        reads = await read_values(c.bootstrap, "s8")
    rep = verdict(acks, reads, replicas=replicas, name="s8-0")
    assert_clean(rep, min_acked=100)


# ---------------------------------------------------------------------------------------- S9


async def test_s9_delayed_isr_expansion_for_a_rebooted_empty_broker_is_rejected(cluster_factory):
    """KIP-903. RF=2 (A=1, B=2), min.insync.replicas=1. B's fetch path is cut until A drops it
    (ISR {A}); 20 more records are acknowledged by A alone. A's requests to the controller
    are then held in the proxy (broker.session.timeout.ms=6000 so A is not fenced meanwhile)
    and B's path reopened: B catches up and A proposes ISR {A,B}, stamped with B's broker
    epoch; the proposal waits in the proxy. B's path is cut again, B is killed, its log
    directory wiped, and it restarts (a new registration, a new broker epoch). The held
    request is released: the controller must refuse it (INELIGIBLE_REPLICA) and B, empty,
    must not be in the ISR. (A write is pending when B's path is first cut: Kafka keeps an idle
    follower whose LEO equals the leader's in the ISR, L3.) With B's path reopened, B copies everything and joins; A is
    killed and B, the new leader, holds every acknowledged record."""
    c = make_cluster(cluster_factory, **{"min.insync.replicas": "1", "broker.session.timeout.ms": "6000"})
    dirs = ReplicaDirs.of_local_cluster(c.data_dir)
    async with Rig(c, "s9", 1) as rig:
        await rig.create_topic([[1, 2]])
        async with producer(c.bootstrap, **{"request.timeout.ms": "10000", "delivery.timeout.ms": "20000"}) as p:
            acks = await send_each(p, "s9", [f"m{i}" for i in range(20)])
            c.block(2, 1)
            fut = await p.send("s9", b"m20", partition=0)     # B now lags (an idle B would stay, L3)
            await wait_status(rig, 1, lambda s: s["isr"] == [1], "dropped B from the ISR")
            ((off, err),) = await outcomes([fut])
            assert err is None, err
            acks.append(Ack("m20", 0, off, 20))
            acks += await send_each(p, "s9", [f"m{i}" for i in range(21, 40)], first_seq=21)

        c.hold(1, 0, "requests")
        c.unblock(2, 1)
        await wait_status(rig, 1, lambda s: 2 in s["maximal_isr"] and s["pending"] is not None,
                          "proposes adding B")
        c.block(2, 1)
        rig.kill(2)
        shutil.rmtree(dirs.dirs[2])
        rig.start(2)
        await rig.wait_running([2])
        c.release(1, 0)
        a = await wait_status(rig, 1, lambda s: s["pending"] is None, "got the controller's answer")
        assert a["isr"] == [1], f"the stale expansion added the empty broker: {a}"
        rejected = [e for e in await events(rig, 1) if e["kind"] == "isr_rejected"]
        assert [e.get("error") for e in rejected] == ["INELIGIBLE_REPLICA"], rejected
        view = await rig.freshest(0)
        assert view is not None and view["isr"] == [1], view

        c.unblock(2, 1)
        await wait_status(rig, 1, lambda s: sorted(s["isr"]) == [1, 2], "re-added B once it caught up")
        rig.kill(1)
        await wait_status(rig, 2, lambda s: s["role"] == "leader", "leads")
        rig.start(1)
        await rig.wait_running()
        await rig.wait_isr_full()
        replicas = await converged_replicas(rig, [1, 2])
        reads = await read_values(c.bootstrap, "s9")
    rep = verdict(acks, reads, replicas=replicas, name="s9-0")
    assert_clean(rep, min_acked=40)


# ------------------------------------------------------------------------------------- S11 / S12


async def _zombie_writes_fail(rig: Rig, stale, count: int) -> list[tuple[int, str | None]]:
    futs = [await stale.send(rig.topic, f"zombie{i}".encode(), partition=0) for i in range(count)]
    return await outcomes(futs)


async def test_s11_zombie_leader_after_sigstop_never_acknowledges_acks_all(cluster_factory):
    """KIP-320/KIP-380. A=1 leads partition 0 under load. A is frozen (SIGSTOP) until the
    controller fences it and another broker leads. A producer that only knows A (its
    bootstrap is A alone, metadata not refreshed) sends 20 acks=all records to it; they wait
    in A's socket. A resumes believing it leads in the old epoch: none of those records may be
    acknowledged (the followers fetch from the new leader, so A's HW cannot move). Then every
    replica converges and the checker sees no loss and identical logs."""
    c = make_cluster(cluster_factory)
    async with Rig(c, "s11", 1) as rig:
        await rig.create_topic([[1, 2, 3]])
        await rig.start_load(rate=300)
        await rig.progress(50)
        async with producer(c.layout.broker(1).address, **{"metadata.max.age.ms": "600000"}) as stale:
            await stale.send_and_wait("s11", b"warm", partition=0)
            rig.pause(1)
            await rig.wait_leader_not(1)
            await rig.progress(30)
            futs = [await stale.send("s11", f"zombie{i}".encode(), partition=0) for i in range(20)]
            rig.resume(1)
            res = await outcomes(futs)
        assert all(err is not None for _, err in res), f"the zombie acknowledged acks=all writes: {res}"
        await rig.wait_isr_full()
        await rig.progress(30)
        rep = await rig.finish()
    assert_clean(rep, min_acked=100)


async def test_s12_leader_cut_off_from_the_controller_never_acknowledges_after_being_replaced(cluster_factory):
    """A=1 leads; every path between A and the controller and the other brokers is cut, while
    clients still reach A. The controller fences A and elects another leader. A, which does
    not know, still calls itself leader (checked); a producer that only knows A sends it 20
    acks=all records: A cannot commit a smaller ISR (the controller is unreachable) nor move
    its HW, so every one fails (time-outs). After healing, A follows the new leader, truncates
    its unacknowledged suffix, and the checker sees no loss and identical logs."""
    c = make_cluster(cluster_factory)
    async with Rig(c, "s12", 1) as rig:
        await rig.create_topic([[1, 2, 3]])
        await rig.start_load(rate=300)
        await rig.progress(50)
        async with producer(c.layout.broker(1).address, **{"metadata.max.age.ms": "600000"}) as stale:
            await stale.send_and_wait("s12", b"warm", partition=0)
            rig.isolate(1)
            await rig.wait_leader_not(1)
            await rig.progress(30)
            a = await status(rig, 1)
            assert a["role"] == "leader", f"A should still believe it leads: {a}"
            res = await _zombie_writes_fail(rig, stale, 20)
        assert all(err is not None for _, err in res), f"the cut-off leader acknowledged acks=all writes: {res}"
        rig.heal(1)
        await rig.wait_isr_full()
        await rig.progress(30)
        rep = await rig.finish()
    assert_clean(rep, min_acked=100)


# ---------------------------------------------------------------------------------------- S13


async def test_s13_min_isr_refuses_before_the_append_and_hides_writes_after_a_shrink(cluster_factory):
    """Kafka's appendRecordsToLeader / checkEnoughReplicasReachOffset, with 3.7+ strict min ISR.
    RF=3, min.insync.replicas=2, A=1 leads.
    1. B and C are killed; once ISR = {A} an acks=all write gets NOT_ENOUGH_REPLICAS and A's LEO
       does not move (nothing appended); an acks=1 write succeeds but the HW stays put, so a
       consumer cannot see it (X2).
    2. B returns and rejoins (ISR {A,B}); B is frozen and an acks=all write is appended and
       waits; when the ISR shrinks to {A} it is not acknowledged (time-out or
       NOT_ENOUGH_REPLICAS_AFTER_APPEND): it is in A's log, above the HW, invisible.
    3. B resumes and C returns: the ISR grows back, the HW passes both writes, and the
       definitely refused record of step 1 never appears."""
    c = make_cluster(cluster_factory)
    async with Rig(c, "s13", 1) as rig:
        await rig.create_topic([[1, 2, 3]])
        async with producer(c.bootstrap) as p:
            acks = await send_each(p, "s13", [f"m{i}" for i in range(10)])
        rig.kill(2)
        rig.kill(3)
        a = await wait_status(rig, 1, lambda s: s["isr"] == [1], "ISR = {A}")
        leo = a["leo"]
        async with producer(c.bootstrap) as p:
            (res,) = await outcomes([await p.send("s13", b"refused", partition=0)])
        assert res == (-1, "NOT_ENOUGH_REPLICAS"), res
        a = await status(rig, 1)
        assert a["leo"] == leo, f"a refused write was appended: {a}"
        async with producer(c.bootstrap, acks="1") as p:
            md = await p.send_and_wait("s13", b"acks1", partition=0)
        assert md.offset == leo
        a = await status(rig, 1)
        assert a["leo"] == leo + 1 and a["hw"] == leo, f"the HW moved under min ISR: {a}"
        assert [v for _, v in await read_values(c.bootstrap, "s13")][-1] == "m9"

        rig.start(2)
        await rig.wait_running([2])
        await wait_status(rig, 1, lambda s: sorted(s["isr"]) == [1, 2], "ISR = {A,B}")
        async with producer(c.layout.broker(1).address, **{"request.timeout.ms": "8000", "delivery.timeout.ms": "20000",
                                                           "metadata.max.age.ms": "600000"}) as p:
            await p.partitions_for("s13")              # metadata first: nothing to ask the frozen B
            rig.pause(2)
            fut = await p.send("s13", b"after-append", partition=0)
            await wait_status(rig, 1, lambda s: s["leo"] == leo + 2, "appended the acks=all write")
            await wait_status(rig, 1, lambda s: s["isr"] == [1], "ISR shrunk to {A}")
            (res,) = await outcomes([fut])
        assert res[1] in ("REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS_AFTER_APPEND"), res
        a = await status(rig, 1)
        assert a["leo"] == leo + 2 and a["hw"] == leo + 1, f"the HW passed the unacknowledged write: {a}"

        rig.resume(2)
        rig.start(3)
        await rig.wait_running()
        await rig.wait_isr_full()
        replicas = await converged_replicas(rig, [1, 2, 3])
        reads = await read_values(c.bootstrap, "s13")
    values = [v for _, v in reads]
    assert values[10:] == ["acks1", "after-append"], values
    rep = verdict(acks, reads, failures=[Failure("refused", 0, "NOT_ENOUGH_REPLICAS", 0)], replicas=replicas,
                  name="s13-0")
    assert_clean(rep, min_acked=10)
