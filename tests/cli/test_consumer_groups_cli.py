"""`consume --group` and `consumer-groups` as a user runs them: real CLI processes
against a real 3-broker cluster (minibroker's own group member, msgpack listener)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from minibroker.testing.fixtures import shared_cluster  # noqa: F401
from minibroker.testing.wait import until_sync

from cli_process import cluster_cli as run, ok

pytestmark = pytest.mark.cluster




def start_member(c, topic: str, group: str) -> subprocess.Popen:
    """A `consume --group --follow` process, once it owns `topic`'s partition 0 in a Stable group."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    env["MINIBROKER_BOOTSTRAP"] = c.bootstrap
    member = subprocess.Popen([sys.executable, "-m", "minibroker.cli", "consume", "--topic", topic, "--group",
                               group, "--follow"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def stable() -> bool:
        r = run(c, "consumer-groups", "--describe", "--group", group)
        out = r.stdout.decode()
        return r.returncode == 0 and f" {topic} " in out and "no active" not in out and "rebalancing" not in out
    try:
        until_sync(stable, f"the member owns {topic}-0", timeout_s=60, interval_s=0.2)
    except BaseException:
        member.kill()
        member.wait(30)
        raise
    return member


def row(out: str, topic: str, partition: int) -> list[str]:
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[1] == topic and cols[2] == str(partition):
            return cols
    raise AssertionError(f"no row for {topic}-{partition} in:\n{out}")


def test_consume_group_commits_and_resumes_and_describe_shows_lag_against_the_high_watermark(shared_cluster):
    c = shared_cluster
    ok(run(c, "topics", "create", "--topic", "cg", "--partitions", "1", "--replication-factor", "3"))
    ok(run(c, "produce", "--topic", "cg", input=b"".join(b"v%d\n" % i for i in range(10))))
    first = run(c, "consume", "--topic", "cg", "--group", "cli-g", "--from-beginning", "--max-messages", "4")
    got_first = ok(first).split()
    assert len(got_first) == 4 and b"Processed a total of 4 messages" in first.stderr
    described = ok(run(c, "consumer-groups", "--describe", "--group", "cli-g"))
    assert "Consumer group 'cli-g' has no active members." in described
    assert described.splitlines()[3].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                                 "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert row(described, "cg", 0) == ["cli-g", "cg", "0", "4", "10", "6", "-", "-", "-"]
    # A restarted member starts at the committed offsets: it gets the other six, none twice.
    rest = ok(run(c, "consume", "--topic", "cg", "--group", "cli-g")).split()
    assert sorted(got_first + rest) == sorted(f"v{i}" for i in range(10))
    # watch shows the offsets topic's partitions and an event per coordinator load.
    frame = ok(run(c, "watch", "--once", "--events", "200", "--all-events"))
    assert "__consumer_offsets-0 " in frame and "coordinator_load" in frame
    assert ok(run(c, "consumer-groups", "--list")).split().count("cli-g") == 1
    dry = run(c, "consumer-groups", "--reset-offsets", "--group", "cli-g", "--topic", "cg", "--to-earliest")
    assert "WARN: No action will be performed" in ok(dry)
    assert row(ok(dry), "cg", 0)[3] == "0"
    assert row(ok(run(c, "consumer-groups", "--describe", "--group", "cli-g")), "cg", 0)[3] != "0"
    ok(run(c, "consumer-groups", "--reset-offsets", "--group", "cli-g", "--topic", "cg", "--to-offset", "1",
           "--execute"))
    after = ok(run(c, "consumer-groups", "--describe", "--group", "cli-g"))
    assert row(after, "cg", 0)[3:6] == ["1", "10", "9"]
    # The other resets kafka-consumer-groups offers (dry runs unless --execute; NEW-OFFSET is the 4th column).
    ok(run(c, "consumer-groups", "--reset-offsets", "--group", "cli-g", "--topic", "cg:0", "--shift-by", "2",
           "--execute"))
    assert row(ok(run(c, "consumer-groups", "--describe", "--group", "cli-g")), "cg", 0)[3] == "3"

    def dry_new_offset(*how: str) -> tuple[str, str]:
        out = ok(run(c, "consumer-groups", "--reset-offsets", "--group", "cli-g", "--topic", "cg", *how))
        return out, row(out, "cg", 0)[3]
    assert dry_new_offset("--to-current")[1] == "3"
    assert dry_new_offset("--shift-by", "-100")[1] == "0"
    assert dry_new_offset("--by-duration", "P1D")[1] == "0"              # every record is younger than a day
    future, offset = dry_new_offset("--to-datetime", "2999-01-01T00:00:00.000Z")
    assert offset == "10" and "Warn: Partition 0 from topic cg is empty. Falling back to latest known offset." \
        in future
    both = run(c, "consumer-groups", "--reset-offsets", "--group", "cli-g", "--all-topics", "--to-current",
               "--to-latest")
    assert both.returncode == 1 and b"takes exactly one of these options" in both.stderr
    deleted = ok(run(c, "consumer-groups", "--delete", "--group", "cli-g"))
    assert "Deletion of requested consumer groups ('cli-g') was successful." in deleted
    assert "cli-g" not in ok(run(c, "consumer-groups", "--list")).split()
    gone = run(c, "consumer-groups", "--describe", "--group", "cli-g")
    assert gone.returncode == 1 and b"Consumer group 'cli-g' does not exist." in gone.stderr


def test_a_static_console_consumer_restarted_keeps_its_partition_and_does_not_leave(shared_cluster):
    """`consume --consumer-property group.instance.id=...` is a static member (KIP-345): stopped, it sends
    no LeaveGroup (the group keeps it, Stable); started again, it takes its old member's place, with a new
    member id, and the group's generation and its other member are left alone."""
    c = shared_cluster
    ok(run(c, "topics", "create", "--topic", "cg-static", "--partitions", "2", "--replication-factor", "3"))
    ok(run(c, "produce", "--topic", "cg-static", "--property", "parse.key=true", "--property", "key.separator=:",
           input=b"".join(b"k%d:v%d\n" % (i, i) for i in range(20))))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    env["MINIBROKER_BOOTSTRAP"] = c.bootstrap

    def member(instance: str, *extra: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "minibroker.cli", "consume", "--topic", "cg-static", "--group",
                                 "static-g", "--consumer-property", f"group.instance.id={instance}",
                                 "--consumer-property", "session.timeout.ms=60000", *extra],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def members() -> list[list[str]]:
        r = run(c, "consumer-groups", "--describe", "--members", "--group", "static-g")
        out = r.stdout.decode()
        if r.returncode or "rebalancing" in out or "no active" in out:
            return []
        return [line.split() for line in out.splitlines()[2:]]

    def generations() -> set[int]:
        frame = ok(run(c, "watch", "--once", "--events", "5000", "--all-events"))
        return {int(g) for g in re.findall(r"group static-g: generation (\d+) with", frame)}
    steady = member("i-steady", "--follow")
    first = member("i-once", "--follow")
    try:
        until_sync(lambda: sorted(m[2] for m in members()) == ["i-once", "i-steady"] and
                   all(m[-1] == "1" for m in members()), "two static members with a partition each", timeout_s=60)
        before = {m[2]: m[1] for m in members()}
        generations_before = generations()
        assert generations_before, "no generation event for static-g"
        state = ok(run(c, "consumer-groups", "--describe", "--state", "--group", "static-g")).splitlines()[2].split()
        first.terminate()                      # SIGTERM: closes cleanly, commits, and (static) does not leave
        assert first.wait(30) == 0
        assert {m[2]: m[1] for m in members()} == before
        again = member("i-once", "--follow")
        try:
            until_sync(lambda: {m[2] for m in members()} == {"i-once", "i-steady"} and
                       {m[2]: m[1] for m in members()}["i-once"] != before["i-once"],
                       "the restarted instance to take its old member's place", timeout_s=60)
            after = {m[2]: m[1] for m in members()}
            assert after["i-steady"] == before["i-steady"]
            assert generations() == generations_before                 # no rebalance: no new generation
            assert ok(run(c, "consumer-groups", "--describe", "--state", "--group", "static-g")).splitlines()[2]\
                .split() == state                                      # Stable, the same two members
        finally:
            again.kill()
            again.wait(30)
    finally:
        for p in (steady, first):
            if p.poll() is None:
                p.kill()
                p.wait(30)


def test_an_active_groups_offsets_are_not_reset(shared_cluster):
    c = shared_cluster
    ok(run(c, "topics", "create", "--topic", "cg-active", "--partitions", "1", "--replication-factor", "3"))
    member = start_member(c, "cg-active", "active-g")
    try:
        described = ok(run(c, "consumer-groups", "--describe", "--group", "active-g"))
        cols = row(described, "cg-active", 0)
        assert cols[6].startswith("console-consumer-") and cols[7].startswith("/127.")
        assert cols[8] == "console-consumer"
        lines = ok(run(c, "consumer-groups", "--describe", "--members", "--group", "active-g")).splitlines()
        assert lines[0] == "" and lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert lines[2].split() == ["active-g", cols[6], cols[7], "console-consumer", "1"]
        verbose = ok(run(c, "consumer-groups", "--describe", "--members", "--verbose", "--group", "active-g"))
        assert verbose.splitlines()[1].split()[-1] == "ASSIGNMENT"
        assert verbose.splitlines()[2].split()[-2:] == ["1", "cg-active(0)"]
        state = ok(run(c, "consumer-groups", "--describe", "--state", "--group", "active-g")).splitlines()
        assert state[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert state[2].split()[0] == "active-g" and state[2].split()[-3:] == ["range", "Stable", "1"]
        assert state[2].split()[2].startswith("(") and state[2].split()[1].count(":") == 1
        r = run(c, "consumer-groups", "--reset-offsets", "--group", "active-g", "--topic", "cg-active",
                "--to-earliest", "--execute")
        assert r.returncode == 1 and b"can only be reset if the group 'active-g' is inactive" in r.stderr
        d = run(c, "consumer-groups", "--delete", "--group", "active-g")
        assert d.returncode == 1 and b"GroupNotEmptyException" in d.stderr
    finally:
        member.kill()
        member.wait(30)



def test_delete_offsets_keeps_the_topics_an_active_member_reads(shared_cluster):
    """kafka-consumer-groups --delete-offsets: Kafka's lines, a partition-level refusal for the topic
    the live member reads, the topic whose partitions cannot be listed, a group that does not exist."""
    c = shared_cluster
    for topic, partitions in (("od-read", "1"), ("od-old", "2")):
        ok(run(c, "topics", "create", "--topic", topic, "--partitions", partitions, "--replication-factor", "3"))
    ok(run(c, "produce", "--topic", "od-old", "--partition", "0", input=b"a\nb\n"))
    ok(run(c, "produce", "--topic", "od-old", "--partition", "1", input=b"c\nd\n"))
    ok(run(c, "consume", "--topic", "od-old", "--group", "od-g", "--from-beginning", "--max-messages", "4"))
    member = start_member(c, "od-read", "od-g")
    try:
        r = run(c, "consumer-groups", "--delete-offsets", "--group", "od-g", "--topic", "od-read",
                "--topic", "od-old:0", "--topic", "od-none")
        assert r.returncode == 1
        assert r.stderr.decode() == "\nError: Encounter some partition level error, see the follow-up details:\n"
        assert r.stdout.decode().splitlines() == [
            "",
            f"{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}",
            f"{'od-none':<30} {'Not Provided':<15} Error: :org.apache.kafka.common.errors."
            "UnknownTopicOrPartitionException: This server does not host this topic-partition.",
            f"{'od-old':<30} {'0':<15} {'Successful':<15}",
            f"{'od-read':<30} {'0':<15} Error: :org.apache.kafka.common.errors.GroupSubscribedToTopicException: "
            "The consumer group is actively subscribed to the topic",
        ]
        described = ok(run(c, "consumer-groups", "--describe", "--group", "od-g"))
        assert "od-old" in described and row(described, "od-old", 1)[3] == "2"
        assert all(line.split()[1:3] != ["od-old", "0"] for line in described.splitlines() if line.split())
    finally:
        member.terminate()
        member.wait(30)
    until_sync(lambda: "Empty" in run(c, "consumer-groups", "--describe", "--state", "--group", "od-g").stdout.decode(),
               "the member left the group", timeout_s=60, interval_s=0.2)
    done = ok(run(c, "consumer-groups", "--delete-offsets", "--group", "od-g", "--topic", "od-old"))
    assert done.splitlines()[0] == "Request succeed for deleting offsets with topic od-old group od-g"
    assert done.splitlines()[3:] == [f"{'od-old':<30} {'0':<15} {'Successful':<15}",
                                     f"{'od-old':<30} {'1':<15} {'Successful':<15}"]
    missing = run(c, "consumer-groups", "--delete-offsets", "--group", "od-nope", "--topic", "od-old:0")
    assert missing.returncode == 1 and missing.stderr.decode() == "\nError: 'od-nope' does not exist.\n"
    assert missing.stdout.decode().splitlines()[-1] == (
        f"{'od-old':<30} {'0':<15} Error: :org.apache.kafka.common.errors.GroupIdNotFoundException: "
        "The group id does not exist.")
