"""`reassign-partitions` (kafka-reassign-partitions) as a user runs it: real CLI processes against a
real 3-broker cluster. A new replica copies the log, joins the ISR, the old replica and its log go,
and the leadership moves with it; a reassignment whose new replica cannot catch up is listed,
described and cancelled."""
from __future__ import annotations

import json
import os

import pytest

from minibroker.testing.fixtures import cluster_factory, shared_cluster  # noqa: F401
from minibroker.testing.wait import until_sync

from cli_process import cluster_cli as run, ok

pytestmark = pytest.mark.cluster


def partition_fields(c, topic: str) -> dict[str, str]:
    line = ok(run(c, "topics", "describe", "--topic", topic)).splitlines()[1]
    return dict(f.split(": ", 1) for f in line.strip("\t").split("\t"))


def plan(tmp_path, name: str, topic: str, replicas: list[int]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}))
    return str(path)


def test_a_replica_moves_with_its_log_and_the_leadership_and_the_old_replica_goes(shared_cluster, tmp_path):
    c = shared_cluster
    ok(run(c, "topics", "create", "--topic", "mv", "--replica-assignment", "1:2"))
    ok(run(c, "produce", "--topic", "mv", input=b"".join(b"m%d\n" % i for i in range(50))))
    assert (partition_fields(c, "mv")["Leader"], partition_fields(c, "mv")["Replicas"]) == ("1", "1,2")
    move = plan(tmp_path, "move.json", "mv", [3, 2])
    started = ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--execute"))
    assert started.splitlines() == [
        "Current partition replica assignment", "",
        '{"version":1,"partitions":[{"topic":"mv","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}', "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Successfully started partition reassignment for mv-0"]

    def verified() -> bool:
        return "is completed." in ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--verify"))
    until_sync(verified, "broker 3 caught up and the reassignment of mv-0 completed", timeout_s=60, interval_s=0.2)
    assert ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--verify")).splitlines() == [
        "Status of partition reassignment:", "Reassignment of partition mv-0 is completed.", ""]
    # Broker 1 left: the first replica of the target in the ISR leads, and it has every record.
    fields = partition_fields(c, "mv")
    assert (fields["Leader"], fields["Replicas"], sorted(fields["Isr"].split(","))) == ("3", "3,2", ["2", "3"])
    assert "Adding Replicas" not in fields
    got = ok(run(c, "consume", "--topic", "mv", "--from-beginning", "--max-messages", "50")).split()
    assert got == [f"m{i}" for i in range(50)]
    assert ok(run(c, "reassign-partitions", "--list")).splitlines() == ["No partition reassignments found."]
    until_sync(lambda: not os.path.exists(os.path.join(c.data_dir, "broker-1", "data", "mv-0")),
               "broker 1 deleted its replica of mv-0", timeout_s=30, interval_s=0.1)
    again = run(c, "reassign-partitions", "--reassignment-json-file", plan(tmp_path, "bad.json", "mv", [2, 9]),
                "--execute")
    assert again.returncode == 1 and again.stderr.decode().splitlines() == [
        "Error reassigning partition for:",
        "mv-0: org.apache.kafka.common.errors.InvalidReplicaAssignmentException: The manual partition "
        "assignment includes broker 9, but no such broker is registered."]


def test_a_reassignment_that_cannot_finish_is_listed_described_and_cancelled(cluster_factory, tmp_path):
    c = cluster_factory()
    ok(run(c, "topics", "create", "--topic", "stuck", "--replica-assignment", "1:2"))
    ok(run(c, "produce", "--topic", "stuck", input=b"a\nb\n"))
    c.stop(3)                      # broker 3 is registered but down: its new replica never joins the ISR
    move = plan(tmp_path, "move.json", "stuck", [1, 3])
    ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--execute"))
    assert ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--verify")).splitlines()[1] == \
        "Reassignment of partition stuck-0 is still in progress."
    assert ok(run(c, "reassign-partitions", "--list")).splitlines() == [
        "Current partition reassignments:", "stuck-0: replicas: 1,3,2. adding: 3. removing: 2."]
    fields = partition_fields(c, "stuck")
    assert (fields["Replicas"], fields["Adding Replicas"], fields["Removing Replicas"]) == ("1,3,2", "3", "2")
    watched = [line for line in ok(run(c, "watch", "--once")).splitlines() if line.startswith("stuck-0 ")]
    assert len(watched) == 1 and "(reassigning: adding 3; removing 2)" in watched[0]
    topic_line = ok(run(c, "topics", "describe", "--topic", "stuck")).splitlines()[0]
    assert "\tReplicationFactor: 2\t" in topic_line
    busy = run(c, "reassign-partitions", "--reassignment-json-file", move, "--execute")
    assert busy.returncode == 1 and b"Cannot execute because there is an existing partition assignment" \
        in busy.stderr
    # acks=all still needs only the ISR (1, 2): writes go on during the move.
    ok(run(c, "produce", "--topic", "stuck", "--request-required-acks", "all", input=b"c\n"))
    cancelled = ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--cancel"))
    assert cancelled.splitlines() == ["Successfully cancelled partition reassignment for: stuck-0",
                                      "None of the specified partition moves are active."]
    fields = partition_fields(c, "stuck")
    assert (fields["Replicas"], "Adding Replicas" in fields) == ("1,2", False)
    assert ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--cancel")).splitlines()[0] == \
        "None of the specified partition reassignments are active."
    assert ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--verify")).splitlines()[1] == \
        "There is no active reassignment of partition stuck-0, but replica set is 1,2 rather than 1,3."
    # Adding/Removing Replicas come from the controller; without it describe still shows what the brokers know.
    c.stop_process("controller")
    assert partition_fields(c, "stuck")["Replicas"] == "1,2"


def test_generate_proposes_kafkas_placement_on_the_brokers_given(shared_cluster, tmp_path):
    c = shared_cluster
    ok(run(c, "topics", "create", "--topic", "gen", "--replica-assignment", "1:2,1:2,1:2"))
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics": [{"topic": "gen"}], "version": 1}')
    out = ok(run(c, "reassign-partitions", "--topics-to-move-json-file", str(topics), "--broker-list", "2,3",
                 "--generate")).splitlines()
    assert out[:3] == ["Current partition replica assignment", json.dumps({"version": 1, "partitions": [
        {"topic": "gen", "partition": p, "replicas": [1, 2], "log_dirs": ["any", "any"]} for p in range(3)]},
        separators=(",", ":")), ""]
    assert out[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(out[4])["partitions"]
    assert [p["partition"] for p in proposed] == [0, 1, 2]
    assert all(sorted(p["replicas"]) == [2, 3] for p in proposed)          # RF 2 on the two brokers given
    assert len({p["replicas"][0] for p in proposed}) == 2                   # leaders spread over both
    bad = run(c, "reassign-partitions", "--topics-to-move-json-file", str(topics), "--broker-list", "2,9",
              "--generate")
    assert bad.returncode == 1 and bad.stderr.decode().strip() == "Error: Unknown broker id(s) in --broker-list: 9"
