"""`watch` never waits on one broker: every broker is asked in parallel within a
deadline, a paused broker shows as such, controller events come by default, and
an explicit bootstrap wins over a stale local state file."""
import asyncio
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from minibroker.cli.watch import frame_text, local_cluster, open_watch
from minibroker.client import Admin
from minibroker.client.network import now_ms
from minibroker.client.observe import Probe, broker_views, merge_metadata
from minibroker.testing.cluster import LocalCluster
from minibroker.testing.fixtures import cluster, cluster_factory  # noqa: F401


@pytest.mark.cluster
async def test_watch_once_answers_within_2s_while_a_broker_is_paused(cluster, monkeypatch):
    monkeypatch.setenv("MINIBROKER_HOME", cluster.data_dir)
    monkeypatch.delenv("MINIBROKER_BOOTSTRAP", raising=False)
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic("orders", assignments=[[1, 2, 3]])
    cluster.pause(2)
    try:
        local = local_cluster(None, cluster.bootstrap)
        assert local is not None
        w = open_watch(cluster.bootstrap, local, None, 1000)
        try:
            await asyncio.wait_for(w.once(1.0), 2.0)
            frame = w.observer.frame(now_ms())
        finally:
            await w.close()
            await w.admin.close()
    finally:
        cluster.resume(2)
    states = {b.node_id: (b.state, b.process) for b in frame.brokers}
    assert states[2] == ("not answering", "paused")
    assert states[1] == ("ok", "running") and states[3] == ("ok", "running")
    (v,) = frame.views
    assert (v.topic, v.leader, v.isr) == ("orders", 1, (1, 2, 3))
    assert v.hw is not None                       # the leader's ReplicaStatus arrived
    sources = {line.source for line in w.follower.lines}
    assert "controller" in sources and "broker 1" in sources
    text = "\n".join(frame_text(frame, list(w.follower.lines), 50, False))
    assert "broker 2 (" in text and "not answering" in text and "process paused" in text
    assert "[controller] broker_registered" in text


def _layout(tmp_path, name):
    return LocalCluster.create(str(tmp_path / name), free_ports=True)


def test_an_explicit_bootstrap_ignores_a_stale_state_file(tmp_path, monkeypatch):
    stale = _layout(tmp_path, "stale")
    other = _layout(tmp_path, "other")
    monkeypatch.setenv("MINIBROKER_HOME", stale.data_dir)
    monkeypatch.delenv("MINIBROKER_BOOTSTRAP", raising=False)
    assert local_cluster(None, stale.bootstrap).data_dir == stale.data_dir
    assert local_cluster(other.bootstrap, other.bootstrap) is None
    assert local_cluster(stale.layout.brokers[0].address, stale.layout.brokers[0].address) is not None
    monkeypatch.setenv("MINIBROKER_BOOTSTRAP", other.bootstrap)
    assert local_cluster(None, other.bootstrap) is None


def _meta(epoch, isr, brokers=(1, 2, 3)):
    return {"brokers": [{"node_id": b, "host": "h", "port": b, "rack": f"r{b}"} for b in brokers],
            "topics": [{"topic": "t", "error": 0, "partitions": [
                {"partition": 0, "leader": 1, "leader_epoch": epoch, "partition_epoch": epoch, "replicas": [1, 2, 3],
                 "isr": isr}]}]}


def test_merged_metadata_keeps_the_freshest_epoch_of_each_partition():
    merged = merge_metadata([_meta(5, [1, 2, 3]), _meta(7, [1, 2]), _meta(6, [1, 3])])
    (t,) = merged["topics"]
    assert t["partitions"][0]["isr"] == [1, 2]
    assert [b["node_id"] for b in merged["brokers"]] == [1, 2, 3]


def test_a_broker_past_its_deadline_is_not_answering_and_a_refused_one_unreachable():
    ok = Probe(("h", 1), 1, _meta(1, [1]), {}, answered_ms=9_900)
    paused = Probe(("h", 2), 2, None, None, answered_ms=5_000, asked_ms=8_000)
    dead = Probe(("h", 3), 3, error="NETWORK_EXCEPTION: connection refused")
    views = {v.node_id: v for v in broker_views([ok, paused, dead], 10_000, 1000)}
    assert views[1].state == "ok" and views[1].rack == "r1"
    assert views[2].state == "not answering" and views[2].detail == "no answer for 5.0 s"
    assert views[3].state == "unreachable" and "refused" in views[3].detail


@pytest.mark.cluster
async def test_the_live_view_fits_a_small_terminal_and_says_how_many_partitions_it_left_out(cluster):
    """More partitions than the terminal has rows: the live view draws those that fit and one line
    for the rest (rendering every row twice a second took more than half a core at 1,000)."""
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic("wide", num_partitions=40, replication_factor=3)
        await admin.wait_for_leaders("wide", timeout_ms=30_000)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120", "LINES": "24", "PYTHONIOENCODING": "utf-8"}
    env.pop("MINIBROKER_BOOTSTRAP", None)
    proc = subprocess.Popen([sys.executable, "-m", "minibroker.cli", "watch", "--bootstrap-server", cluster.bootstrap,
                             "--interval-ms", "200"], stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 60
        while b"more partitions" not in out and time.monotonic() < deadline and proc.poll() is None:
            ready = await asyncio.get_running_loop().run_in_executor(None, _read_some, master)
            out += ready
    finally:
        proc.terminate()
        proc.wait(10)
        os.close(master)
    text = out.decode(errors="replace")
    assert "more partitions" in text, text[-2000:]
    assert "│ wide-0 " in text and "│ wide-39 " not in text       # table rows (events name partitions too)


def _read_some(fd: int) -> bytes:
    if select.select([fd], [], [], 1.0)[0]:
        try:
            return os.read(fd, 65536)
        except OSError:
            return b""
    return b""
