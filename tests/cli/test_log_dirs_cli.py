"""`log-dirs --describe` (kafka-log-dirs) on a real cluster: every broker's one log directory, the
replicas in it and their sizes, which match across the replicas of a partition once it has replicated."""
from __future__ import annotations

import json
import os

import pytest

from minibroker.testing.fixtures import shared_cluster  # noqa: F401
from minibroker.testing.wait import until_sync

from cli_process import cluster_cli as run, ok

pytestmark = pytest.mark.cluster


def test_each_broker_lists_its_replicas_and_their_sizes(shared_cluster):
    c = shared_cluster
    ok(run(c, "topics", "create", "--topic", "ld", "--replica-assignment", "1:2"))
    ok(run(c, "produce", "--topic", "ld", input=b"".join(b"record-%d\n" % i for i in range(200))))

    def described() -> dict:
        lines = ok(run(c, "log-dirs", "--describe", "--topic-list", "ld")).splitlines()
        assert lines[:2] == ["Querying brokers for log directories information",
                             "Received log directory information from brokers 1,2,3"]
        return json.loads(lines[2])

    def sizes() -> dict[int, list[int]]:
        return {b["broker"]: [p["size"] for d in b["logDirs"] for p in d["partitions"]]
                for b in described()["brokers"]}
    until_sync(lambda: sizes()[1] == sizes()[2] and sizes()[1][0] > 200 * len("record-0"),
               "both replicas of ld-0 hold the same bytes", timeout_s=30, interval_s=0.2)
    doc = described()
    assert doc["version"] == 1 and [b["broker"] for b in doc["brokers"]] == [1, 2, 3]
    (one,) = doc["brokers"][0]["logDirs"]
    assert list(one) == ["logDir", "error", "partitions"] and one["error"] is None
    assert one["logDir"] == os.path.abspath(os.path.join(c.data_dir, "broker-1", "data"))
    assert one["partitions"] == [{"partition": "ld-0", "size": one["partitions"][0]["size"], "offsetLag": 0,
                                  "isFuture": False}]
    assert doc["brokers"][2]["logDirs"][0]["partitions"] == []            # broker 3 has no replica of ld
    only = json.loads(ok(run(c, "log-dirs", "--describe", "--broker-list", "2", "--topic-list", "ld")).splitlines()[2])
    assert [b["broker"] for b in only["brokers"]] == [2]
    bad = run(c, "log-dirs", "--describe", "--broker-list", "2,9")
    assert bad.returncode == 1 and bad.stderr.decode().strip() == (
        "ERROR: The given brokers do not exist from --broker-list: 9. Current existent brokers: 1,2,3")
