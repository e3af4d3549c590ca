"""Kafka's replication_test matrix on a local cluster of real processes.

3 brokers, 3 partitions, RF=3, min.insync.replicas=2, acks=all, unclean
election off. Each failure mode is aimed at the leader of partition 0, at a
follower of it (broker 3 leads nothing at the start), and at the controller
process. Load runs throughout; after each fault the run must keep getting
acknowledgements (one broker down leaves 2 = min ISR). At the end every
fault is undone, the replicas converge, every partition is read from offset
0, and the checker must report no lost acknowledged record, no read of a
definitely failed produce, and byte-identical replica logs.

  clean_shutdown  SIGTERM (controlled shutdown), stays down until the end
  hard_shutdown   SIGKILL, stays down until the end
  clean_bounce    ROUNDS x: SIGTERM, start, wait until back in every ISR
  hard_bounce     ROUNDS x: SIGKILL, wait until its session expired (out of
                  every ISR), start, wait until back in every ISR
  freeze          SIGSTOP past the session timeout (until fenced; for the
                  controller: 1.5 x the session), SIGCONT, wait for the ISRs
  isolate         cut every inter-process path of the node (clients still reach
                  it) past the session timeout, heal, wait for the ISRs
"""
from __future__ import annotations

import pytest

from minibroker.testing.layout import CONTROLLER_ID

from .rig import SESSION_S, Rig, assert_clean, make_cluster

pytestmark = pytest.mark.cluster

ROUNDS = 2
MODES = ["clean_shutdown", "hard_shutdown", "clean_bounce", "hard_bounce", "freeze", "isolate"]
TARGETS = ["leader", "follower", "controller"]


async def apply_fault(rig: Rig, mode: str, kind: str) -> None:
    node = await rig.target(kind)
    ctl = node == CONTROLLER_ID
    if mode == "clean_shutdown":
        rig.stop(node)
        if not ctl:
            await rig.wait_out_of_isr(node)
        await rig.progress(50)
    elif mode == "hard_shutdown":
        rig.kill(node)
        if ctl:
            await rig.hold(SESSION_S * 1.5, progress=50)
        else:
            await rig.wait_out_of_isr(node)
            await rig.progress(50)
    elif mode in ("clean_bounce", "hard_bounce"):
        for _ in range(ROUNDS):
            node = await rig.target(kind)
            if mode == "clean_bounce":
                rig.stop(node)
            else:
                rig.kill(node)
                if not ctl:
                    await rig.wait_out_of_isr(node)
            rig.start(node)
            await rig.wait_running()
            await rig.wait_isr_full()
            await rig.progress(50)
    elif mode == "freeze":
        rig.pause(node)
        if ctl:
            await rig.hold(SESSION_S * 1.5, progress=50)
        else:
            await rig.wait_out_of_isr(node)
            await rig.progress(50)
        rig.resume(node)
        await rig.wait_isr_full()
        await rig.progress(50)
    elif mode == "isolate":
        rig.isolate(node)
        if ctl:
            await rig.hold(SESSION_S * 1.5, progress=50)
        else:
            await rig.wait_out_of_isr(node)
            await rig.progress(50)
        rig.heal(node)
        await rig.wait_isr_full()
        await rig.progress(50)
    else:
        raise AssertionError(mode)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", MODES)
async def test_no_acked_loss_and_identical_replicas_under_fault(cluster_factory, mode, target):
    c = make_cluster(cluster_factory)
    async with Rig(c) as rig:
        await rig.create_topic()
        await rig.start_load()
        await rig.progress(100)
        await apply_fault(rig, mode, target)
        rep = await rig.finish()
    assert_clean(rep, min_acked=200)
