"""S1 and offline partitions vs unclean election, on real processes.

The rig for both: the leader A (broker 1) of every partition is cut off
from the other brokers (both directions, through the fault proxy) but keeps
its path to the controller, so after the lag timeout it shrinks each ISR to
{A} through AlterPartition. Then A is killed: the controller fences it, and
A is the last ISR member.
"""
from __future__ import annotations

import pytest

from minibroker.errors import ErrorCode
from minibroker.verify.runner import FinishOptions, Workload, ensure_topic
from minibroker.verify.replicas import ReplicaDirs

from .rig import SESSION_S, Rig, assert_clean, cut_pairs, make_cluster, until

pytestmark = pytest.mark.cluster

A_CUT = [(1, 2), (1, 3)]


async def test_s1_isr_shrunk_to_the_leader_refuses_acks_all_then_stays_offline_until_it_returns(cluster_factory):
    """S1 (Jepsen 2013): with min.insync.replicas=2 every acks=all write is refused with
    NOT_ENOUGH_REPLICAS once the ISR is {A}, nothing is acknowledged by A alone, and after A
    dies the partition stays offline (leader -1, ISR still [A]) instead of electing B or C."""
    c = make_cluster(cluster_factory)
    async with Rig(c, "s1", 1) as rig:
        await rig.create_topic([[1, 2, 3]])
        wl = await rig.start_load(rate=400)
        await rig.progress(100)

        cut_pairs(c, A_CUT)
        await rig.wait_view(lambda vs: vs[0]["isr"] == [1], "ISR shrunk to [1]")
        acked_at_shrink = wl.acked
        refused = lambda: sum(1 for f in wl.producer.failures if f.error == "NOT_ENOUGH_REPLICAS")  # noqa: E731
        base = refused()
        await until(lambda: refused() >= base + 20 or wl.acked >= acked_at_shrink + 20,
                    "20 acks=all writes refused with NOT_ENOUGH_REPLICAS")
        assert wl.acked == acked_at_shrink, "a write was acknowledged by the leader alone (the 0.8 bug)"

        rig.kill(1)
        await rig.wait_view(lambda vs: vs[0]["leader"] == -1, "partition 0 offline", exclude={1})
        await rig.hold(SESSION_S * 2)           # several fence/election opportunities go by
        view = await rig.freshest(0, exclude={1})
        assert view is not None and view["leader"] == -1 and view["isr"] == [1], view

        c.heal()
        rig.start(1)
        await rig.wait_isr_full()
        await rig.progress(50)
        rep = await rig.finish()
    assert_clean(rep, min_acked=150)
    assert rep.failed_definite >= 20


async def test_offline_partition_waits_for_its_isr_member_unless_unclean_election_is_on(cluster_factory):
    """Two topics, min.insync.replicas=1 (so A alone acknowledges writes while ISR = {A}):
    `clean` with unclean election off, `unclean` with it on. After A dies, `clean` stays
    offline until A returns and loses nothing; `unclean` elects B or C at once, and the
    records only A held are reported lost by the checker (while the replicas, once A
    truncated to the new leader, are still byte-identical)."""
    c = make_cluster(cluster_factory)
    dirs = ReplicaDirs.of_local_cluster(c.data_dir)
    async with Rig(c, "clean", 1) as rig:
        await ensure_topic(rig.admin, "clean", configs={"min.insync.replicas": "1"}, assignments=[[1, 2, 3]])
        await ensure_topic(rig.admin, "unclean", configs={"min.insync.replicas": "1",
                                                          "unclean.leader.election.enable": "true"},
                           assignments=[[1, 2, 3]])
        await rig.wait_isr_full()
        rig_u = Rig(c, "unclean", 1)
        await rig_u.wait_isr_full()
        loads = {}
        for t in ("clean", "unclean"):
            loads[t] = Workload(c.bootstrap, t, 1, rate=300, producer_config={"request.timeout.ms": "3000",
                                                                               "delivery.timeout.ms": "6000"})
            await loads[t].start()
            await loads[t].progress(50)

        cut_pairs(c, A_CUT)
        for r in (rig, rig_u):
            await r.wait_view(lambda vs: vs[0]["isr"] == [1], f"{r.topic}: ISR shrunk to [1]")
        for t in ("clean", "unclean"):
            await loads[t].progress(50)         # acknowledged by A alone: min ISR 1

        rig.kill(1)
        rig_u.down.add(1)
        await rig.wait_view(lambda vs: vs[0]["leader"] == -1, "clean: offline", exclude={1})
        await rig_u.wait_view(lambda vs: vs[0]["leader"] in (2, 3), "unclean: B or C elected", exclude={1})
        await loads["unclean"].progress(30)
        view = await rig.freshest(0, exclude={1})
        assert view is not None and view["leader"] == -1 and view["isr"] == [1], view

        c.heal()
        rig.start(1)
        rig_u.down.discard(1)
        await rig.wait_running()
        await rig.wait_isr_full()
        await rig_u.wait_isr_full()
        opts = FinishOptions(replica_dirs=dirs)
        clean = await loads["clean"].finish(opts)
        unclean = await loads["unclean"].finish(opts)
        await rig_u.close()
    print("\n".join(unclean.lines()))
    assert_clean(clean, min_acked=100)
    assert unclean.lost, "an unclean election after A acknowledged writes alone must lose them"
    assert not unclean.divergent and not unclean.unconverged, "\n".join(unclean.lines())
    assert not unclean.failed_read
    assert any("on no replica's disk" in n for n in unclean.notes)
    assert ErrorCode.NOT_ENOUGH_REPLICAS.name not in clean.notes
