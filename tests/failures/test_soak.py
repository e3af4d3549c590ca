"""The long randomised variants (skipped unless --runslow or MINIBROKER_RUNSLOW=1):
a seeded random fault schedule under load (S19), and the bounce modes of the
matrix for 5 rounds as Kafka's replication_test runs them."""
from __future__ import annotations

import os

import pytest

from minibroker.verify.soak import plan_faults, run_soak

from . import test_replication_matrix as matrix
from .rig import Rig, assert_clean, make_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SOAK_S = float(os.environ.get("MINIBROKER_SOAK_SECONDS", "120"))


@pytest.mark.timeout(SOAK_S * 3 + 300)
@pytest.mark.parametrize("seed", [1, 2])
async def test_random_faults_lose_no_acknowledged_record(cluster_factory, seed):
    c = make_cluster(cluster_factory)
    async with Rig(c, "soak", 3) as rig:
        await rig.create_topic()
        res = await run_soak(rig, plan_faults(seed, SOAK_S), seed=seed, rate=400, duration_s=SOAK_S)
    print("\n".join(res.timeline))
    assert not res.unhealed, res.unhealed
    assert_clean(res.report, min_acked=1000)


@pytest.mark.parametrize("target", ["leader", "controller"])
@pytest.mark.parametrize("mode", ["clean_bounce", "hard_bounce"])
async def test_five_bounce_rounds_lose_no_acknowledged_record(cluster_factory, monkeypatch, mode, target):
    monkeypatch.setattr(matrix, "ROUNDS", 5)
    c = make_cluster(cluster_factory)
    async with Rig(c) as rig:
        await rig.create_topic()
        await rig.start_load()
        await rig.progress(100)
        await matrix.apply_fault(rig, mode, target)
        rep = await rig.finish()
    assert_clean(rep, min_acked=200)

