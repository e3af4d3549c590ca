"""A verification run against a real, healthy cluster: everything acknowledged
is read back, the replicas compare identical, and a replica tampered with on
disk is reported as divergent."""
import os
import struct

import pytest

from minibroker.records import EPOCH_POS
from minibroker.testing.fixtures import cluster_factory  # noqa: F401
from minibroker.verify.replicas import ReplicaDirs, read_partition
from minibroker.verify.runner import FinishOptions, Workload, ensure_topic, run_verify, verify_topic

pytestmark = pytest.mark.cluster


async def test_a_healthy_run_passes_with_identical_replicas(cluster_factory):
    c = cluster_factory(overrides={"min.insync.replicas": "2"})
    rep = await run_verify(c.bootstrap, "v", records=600, duration_s=20,
                           replica_dirs=ReplicaDirs.of_local_cluster(c.data_dir))
    assert rep.ok, "\n".join(rep.lines())
    assert rep.acked == 600 and rep.read == 600
    assert sum("identical" in n for n in rep.notes) == 3


async def test_a_replica_whose_batch_epoch_differs_on_disk_is_reported_divergent(cluster_factory):
    c = cluster_factory(overrides={"min.insync.replicas": "2"})
    dirs = ReplicaDirs.of_local_cluster(c.data_dir)
    async with c.admin() as admin:
        await ensure_topic(admin, "v", configs={}, assignments=[[1, 2, 3]])
    wl = Workload(c.bootstrap, "v", 1)
    await wl.start(records=200)
    await wl.producer.sending_done()
    await wl.stop()
    pdir = dirs.partition_dir(3, "v", 0)
    assert read_partition(pdir), "broker 3 holds nothing to tamper with"
    (seg,) = [n for n in os.listdir(pdir) if n.endswith(".log")]
    with open(os.path.join(pdir, seg), "r+b") as f:         # the epoch sits outside the CRC, as in Kafka
        f.seek(EPOCH_POS)
        f.write(struct.pack(">i", 7))
    rep = await verify_topic(c.bootstrap, "v", 1, wl.run, wl.producer, wl.live,
                             FinishOptions(replica_dirs=dirs))
    assert not rep.ok and [d[1] for d in rep.divergent] == [0], "\n".join(rep.lines())
    assert not rep.lost


async def test_minibroker_verify_prints_the_report_and_exits_by_result(cluster_factory):
    import asyncio
    import sys
    c = cluster_factory(overrides={"min.insync.replicas": "2"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "minibroker.cli", "verify", "--data-dir", c.data_dir, "--topic", "cli",
        "--records", "300", "--duration", "20", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()
    assert text.splitlines()[0].startswith("acked=300 ") and text.rstrip().endswith("RESULT: PASS")
    assert "replicas of cli-0 on brokers [1, 2, 3]: identical" in text
