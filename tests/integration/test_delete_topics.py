"""DeleteTopics (API 20) end to end: controller record, brokers stop and delete
their replicas' files, the topic can be created again, and `topics delete`
speaks kafka-topics' words."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from minibroker.client import Admin, Producer
from minibroker.errors import ErrorCode, KafkaError
from minibroker.testing.fixtures import shared_cluster  # noqa: F401
from minibroker.testing.wait import until

pytestmark = pytest.mark.cluster


def cli(c, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minibroker.cli", "topics", *args,
                           "--bootstrap-server", c.bootstrap], capture_output=True, text=True, timeout=60)


def replica_dirs(c, topic: str) -> list[str]:
    out = []
    for b in c.layout.brokers:
        for root, dirs, _ in os.walk(c.layout.node_dir(b.name)):
            out += [os.path.join(root, d) for d in dirs if d.startswith(f"{topic}-")]
    return out


async def test_deleting_a_topic_removes_it_from_metadata_and_its_files_from_every_broker(shared_cluster):
    c = shared_cluster
    async with Admin(c.bootstrap) as admin:
        await admin.create_topic("doomed", assignments=[[1, 2, 3], [2, 3, 1]])
    async with Producer(c.bootstrap, {"acks": "all"}) as p:
        await p.send_and_wait("doomed", b"x", partition=0)
    await until(lambda: len(replica_dirs(c, "doomed")) == 6, "six replica directories", timeout_s=30)
    r = await asyncio.to_thread(cli, c, "delete", "--topic", "doomed")
    assert r.returncode == 0 and r.stdout == "", r.stderr
    async with Admin(c.bootstrap) as admin:
        assert "doomed" not in await admin.list_topics()
    await until(lambda: replica_dirs(c, "doomed") == [], "every replica's files removed", timeout_s=30)
    async with Admin(c.bootstrap) as admin:                     # the name is free again
        await admin.create_topic("doomed", assignments=[[3, 1, 2]])
        await admin.delete_topic("doomed")


async def test_deleting_an_unknown_topic_is_kafkas_error(shared_cluster):
    c = shared_cluster
    r = await asyncio.to_thread(cli, c, "delete", "--topic", "never-was")
    assert r.returncode != 0
    assert "Error while executing topic command : Topic 'never-was' does not exist as expected" in r.stderr + r.stdout
    assert (await asyncio.to_thread(cli, c, "delete", "--topic", "never-was", "--if-exists")).returncode == 0
    async with Admin(c.bootstrap) as admin:
        with pytest.raises(KafkaError) as exc:
            await admin.delete_topic("never-was")
        assert exc.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
