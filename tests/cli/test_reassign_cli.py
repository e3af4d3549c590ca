"""`reassign-partitions` (kafka-reassign-partitions) as a user runs it: real CLI processes against a
real 3-broker cluster. A new replica copies the log, joins the ISR, the old replica and its log go,
and the leadership moves with it; a reassignment whose new replica cannot catch up is listed,
described and cancelled. A reassignment with --throttle sets Kafka's replication throttles, and
--verify (once nothing moves) or --cancel clears them."""
from __future__ import annotations

import asyncio
import json
import os

import pytest

from minibroker.dynamic_config import ResourceType
from minibroker.testing.fixtures import cluster_factory, shared_cluster  # noqa: F401
from minibroker.testing.wait import until_sync

from cli_process import cluster_cli as run, ok
from cli_process import run as run_cli

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
        "Status of partition reassignment:", "Reassignment of partition mv-0 is completed.", "",
        "Clearing broker-level throttles on brokers 1,2,3", "Clearing topic-level throttles on topic mv"]
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
                                      "None of the specified partition moves are active.",
                                      "Clearing broker-level throttles on brokers 1,2,3",
                                      "Clearing topic-level throttles on topic stuck"]
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


RATES = ("follower.replication.throttled.rate", "leader.replication.throttled.rate")
REPLICAS = ("follower.replication.throttled.replicas", "leader.replication.throttled.replicas")
NO_RATE = "9223372036854775807"


def throttles(c, topic: str) -> dict[str, dict[str, tuple[str, str]]]:
    """The throttle configs as DescribeConfigs answers them, `topic`'s and each broker's (asked of that
    broker): name -> (value, source)."""
    async def describe():
        async with c.admin() as admin:
            found = await admin.describe_configs([(ResourceType.TOPIC, topic)]
                                                 + [(ResourceType.BROKER, str(b)) for b in c.broker_ids])
        return {name: {e.name: (e.value, e.source.name) for e in entries if e.name in RATES + REPLICAS}
                for (_, name), entries in found.items()}
    return asyncio.run(describe())


def throttled(topic: str, leader: str | None = None, follower: str | None = None, rate: int | None = None,
              on: tuple[int, ...] = ()) -> dict[str, dict[str, tuple[str, str]]]:
    """What `throttles` shows when `topic`'s leader/follower throttled replicas are set (None: the default)
    and brokers `on` have both rates at `rate` (the others: the default)."""
    replicas = {n: (v, "DYNAMIC_TOPIC_CONFIG") if v is not None else ("", "DEFAULT_CONFIG")
                for n, v in zip(REPLICAS, (follower, leader), strict=True)}
    brokers = {str(b): {n: (str(rate), "DYNAMIC_BROKER_CONFIG") if b in on else (NO_RATE, "DEFAULT_CONFIG")
                        for n in RATES} for b in (1, 2, 3)}
    return {topic: replicas, **brokers}


def until_throttles(c, want: dict, what: str) -> None:
    """Each broker answers its own configs once it has replayed the record: wait for all of them."""
    topic = next(k for k in want if not k.isdigit())
    until_sync(lambda: throttles(c, topic) == want, what, timeout_s=20, interval_s=0.1)


def test_a_throttled_reassignment_sets_kafkas_throttles_and_verify_clears_them_once_done(shared_cluster, tmp_path):
    c = shared_cluster
    ok(run(c, "topics", "create", "--topic", "thr", "--replica-assignment", "1:2"))
    ok(run(c, "produce", "--topic", "thr", input=b"a\nb\n"))
    move = plan(tmp_path, "move.json", "thr", [1, 3])
    c.block(3, 1)                 # broker 3 cannot fetch from the leader: the move stays in progress
    try:
        started = ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--execute",
                         "--throttle", "5000000"))
        assert started.splitlines() == [
            "Current partition replica assignment", "",
            '{"version":1,"partitions":[{"topic":"thr","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}',
            "", "Save this to use as the --reassignment-json-file option during rollback",
            "Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
            "throttle is removed.",
            "The inter-broker throttle limit was set to 5000000 B/s",
            "Successfully started partition reassignment for thr-0"]
        # Kafka's move map: sources 1,2 lead, destination 3 follows; the rates on every broker that moves.
        until_throttles(c, throttled("thr", "0:1,0:2", "0:3", 5000000, (1, 2, 3)), "the throttles of the move")
        assert ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--verify")).splitlines() == [
            "Status of partition reassignment:", "Reassignment of partition thr-0 is still in progress.", ""]
        assert throttles(c, "thr") == throttled("thr", "0:1,0:2", "0:3", 5000000, (1, 2, 3))
        busy = run(c, "reassign-partitions", "--reassignment-json-file", move, "--execute", "--throttle", "6000000")
        assert busy.returncode == 1 and busy.stderr.decode().strip().endswith(
            "The --additional flag can also be used to change the throttle by resubmitting the current reassignment.")
        # Resubmitting the reassignment in progress changes the rate; its sources are still 1,2 (not 1,3,2).
        again = ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--execute", "--additional",
                       "--throttle", "6000000")).splitlines()
        assert again[2] == ('{"version":1,"partitions":[{"topic":"thr","partition":0,"replicas":[1,3,2],'
                            '"log_dirs":["any","any","any"]}]}')
        assert again[-2:] == ["The inter-broker throttle limit was set to 6000000 B/s",
                              "Successfully started partition reassignment for thr-0"]
        until_throttles(c, throttled("thr", "0:1,0:2", "0:3", 6000000, (1, 2, 3)), "the throttles at the new rate")
    finally:
        c.unblock(3, 1)

    def done() -> bool:
        return "is completed." in ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--verify",
                                         "--preserve-throttles"))
    until_sync(done, "broker 3 caught up and the reassignment of thr-0 completed", timeout_s=60, interval_s=0.2)
    assert throttles(c, "thr") == throttled("thr", "0:1,0:2", "0:3", 6000000, (1, 2, 3))        # --preserve-throttles
    cleared = ["Status of partition reassignment:", "Reassignment of partition thr-0 is completed.", "",
               "Clearing broker-level throttles on brokers 1,2,3", "Clearing topic-level throttles on topic thr"]
    assert ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--verify")).splitlines() == cleared
    until_throttles(c, throttled("thr"), "the throttles cleared")
    # Deleting configs that are not set is no error.
    assert ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--verify")).splitlines() == cleared


def test_cancel_clears_the_throttles_unless_preserved(shared_cluster, tmp_path):
    c = shared_cluster
    ok(run(c, "topics", "create", "--topic", "thrc", "--replica-assignment", "1:2"))
    move = plan(tmp_path, "move.json", "thrc", [1, 3])
    c.block(3, 1)
    try:
        ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--execute", "--throttle", "1024"))
        want = throttled("thrc", "0:1,0:2", "0:3", 1024, (1, 2, 3))
        until_throttles(c, want, "the throttles of the move")
        kept = ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--cancel", "--preserve-throttles"))
        assert kept.splitlines() == ["Successfully cancelled partition reassignment for: thrc-0",
                                     "None of the specified partition moves are active."]
        assert throttles(c, "thrc") == want
        assert ok(run(c, "reassign-partitions", "--reassignment-json-file", move, "--cancel")).splitlines() == [
            "None of the specified partition reassignments are active.",
            "None of the specified partition moves are active.",
            "Clearing broker-level throttles on brokers 1,2,3", "Clearing topic-level throttles on topic thrc"]
        until_throttles(c, throttled("thrc"), "the throttles cleared")
    finally:
        c.unblock(3, 1)
    assert partition_fields(c, "thrc")["Replicas"] == "1,2"


@pytest.mark.parametrize("args, option, action", [
    (("--verify", "--throttle", "1000"), "throttle", "verify"),
    (("--cancel", "--throttle", "-1"), "throttle", "cancel"),
    (("--execute", "--preserve-throttles"), "preserve-throttles", "execute"),
])
def test_throttle_options_only_go_with_their_actions(tmp_path, args, option, action):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    r = run_cli(env, "reassign-partitions", "--reassignment-json-file", plan(tmp_path, "m.json", "t", [1]), *args)
    assert r.returncode == 2
    assert r.stderr.decode().splitlines()[-1] == f'Error: Option "[{option}]" can\'t be used with action "[{action}]"'
