"""Consumer groups on the Kafka listener with real clients (confluent-kafka) on a
real 3-broker cluster: partitions shared and moved on a member's death, offsets
committed through a group surviving SIGKILL of the coordinator."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from minibroker.testing.wait import until_sync

from kafkatests import create_topic

pytest.importorskip("confluent_kafka")

GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}
SESSION_MS = 6000


@pytest.fixture
def group_cluster(cluster_factory):
    return cluster_factory(overrides=GROUP_SETTINGS)


def produce(bs: str, topic: str, values: list[str], partition_of) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5})
    errors: list = []
    for v in values:
        p.produce(topic, v.encode(), partition=partition_of(v),
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(60) == 0 and not errors, errors


class Member:
    """One group member process and the lines it printed."""

    def __init__(self, bs: str, group: str, topic: str, instance: str = "", session_ms: int = SESSION_MS) -> None:
        here = os.path.dirname(__file__)
        self.proc = subprocess.Popen([sys.executable, os.path.join(here, "group_member.py"), bs, group, topic,
                                      str(session_ms), *([instance] if instance else [])],
                                     stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def assignment(self) -> set[int]:
        for line in reversed(list(self.lines)):
            if line.startswith("assigned"):
                rest = line.split(" ", 1)[1] if " " in line else ""
                return {int(x) for x in rest.split(",") if x}
            if line == "revoked":
                return set()
        return set()

    def values(self) -> set[str]:
        return {ln.split(" ", 3)[3] for ln in list(self.lines) if ln.startswith("record ")}

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


def kill_all(members: list[Member]) -> None:
    for m in members:
        if m.proc.poll() is None:
            m.kill()


def test_three_consumers_share_six_partitions_and_a_killed_members_partitions_move_with_nothing_skipped(
        group_cluster):
    c = group_cluster
    bs = c.kafka_bootstrap
    create_topic(c, "shared", partitions=6, rf=3)
    first = [f"a{i}" for i in range(300)]
    produce(bs, "shared", first, lambda v: int(v[1:]) % 6)
    members = [Member(bs, "g1", "shared") for _ in range(3)]
    try:
        def shared_three_ways() -> bool:
            parts = [m.assignment() for m in members]
            return all(len(p) == 2 for p in parts) and set().union(*parts) == set(range(6))
        until_sync(shared_three_ways, "six partitions shared two by two among three members", timeout_s=120)
        until_sync(lambda: set(first) <= set().union(*(m.values() for m in members)),
                   "the first 300 records processed", timeout_s=120)
        victim, survivors = members[0], members[1:]
        lost = victim.assignment()
        victim.kill()
        second = [f"b{i}" for i in range(300)]
        produce(bs, "shared", second, lambda v: int(v[1:]) % 6)

        def moved() -> bool:
            parts = [m.assignment() for m in survivors]
            return set().union(*parts) == set(range(6)) and all(len(p) == 3 for p in parts)
        until_sync(moved, f"the killed member's partitions {sorted(lost)} moved to the two others",
                   timeout_s=SESSION_MS / 1000 + 60)
        until_sync(lambda: set(second) <= set().union(*(m.values() for m in survivors)),
                   "every record produced after the kill processed by the survivors", timeout_s=120)
        seen = set().union(*(m.values() for m in members))
        assert seen >= set(first) | set(second)
    finally:
        kill_all(members)
    events = c_events(c, "member_removed")
    assert any("session timeout" in e["reason"] for e in events), events


def test_a_static_member_killed_and_restarted_takes_back_its_partitions_without_a_rebalance(group_cluster):
    """KIP-345 with librdkafka: two static members (group.instance.id) share four partitions; one is
    SIGKILLed and started again with its instance id within its session timeout. It takes its old
    member's place and partitions at once, and the other member is never revoked (with the eager range
    assignor any rebalance would revoke it before the restarted member could be assigned)."""
    c = group_cluster
    bs = c.kafka_bootstrap
    create_topic(c, "static", partitions=4, rf=3)
    session_ms = 60_000
    steady = Member(bs, "gs", "static", instance="i-steady", session_ms=session_ms)
    victim = Member(bs, "gs", "static", instance="i-restarted", session_ms=session_ms)
    members = [steady, victim]
    try:
        def shared() -> bool:
            a, b = steady.assignment(), victim.assignment()
            return len(a) == 2 and len(b) == 2 and a | b == set(range(4))
        until_sync(shared, "four partitions shared two by two between the static members", timeout_s=120)
        held, lost = steady.assignment(), victim.assignment()
        revoked_before = steady.lines.count("revoked")
        victim.kill()
        reborn = Member(bs, "gs", "static", instance="i-restarted", session_ms=session_ms)
        members.append(reborn)
        until_sync(lambda: reborn.assignment() == lost, f"the restarted member to take back {sorted(lost)}",
                   timeout_s=60)
        assert steady.lines.count("revoked") == revoked_before and steady.assignment() == held
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
        described = subprocess.run([sys.executable, "-m", "minibroker.cli", "consumer-groups", "--describe",
                                    "--members", "--group", "gs", "--bootstrap-server", c.bootstrap],
                                   env=env, capture_output=True, text=True, timeout=120)
        assert described.returncode == 0, described.stderr
        lines = described.stdout.splitlines()
        assert lines[1].split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert sorted(line.split()[2] for line in lines[2:]) == ["i-restarted", "i-steady"]
        values = [f"s{i}" for i in range(40)]
        produce(bs, "static", values, lambda v: int(v[1:]) % 4)
        until_sync(lambda: set(values) <= steady.values() | reborn.values(), "the records consumed by both",
                   timeout_s=60)
    finally:
        kill_all(members)
    replaced = c_events(c, "member_replaced")
    assert any("static member i-restarted" in e["reason"] for e in replaced), replaced


def c_events(c, kind: str) -> list[dict]:
    """Every broker's structured events of `kind` (the coordinator emits group events)."""
    import asyncio

    from minibroker.client.admin import Admin

    async def go() -> list[dict]:
        out: list[dict] = []
        async with Admin(c.bootstrap) as admin:
            for b in c.broker_ids:
                try:
                    resp = await admin.events(c.broker_address(b), max_events=10_000)
                except Exception:      # a killed broker has no events to give
                    continue
                out += [e for e in resp["events"] if e["kind"] == kind]
        return out
    return asyncio.run(go())


def test_offsets_committed_through_a_group_survive_sigkill_of_the_coordinator(group_cluster):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    c = group_cluster
    bs = c.kafka_bootstrap
    create_topic(c, "durable", partitions=1, rf=3)
    produce(bs, "durable", [f"v{i}" for i in range(100)], lambda _v: 0)
    conf = {"bootstrap.servers": bs, "group.id": "g2", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS}
    first = Consumer(conf)
    first.subscribe(["durable"])
    got: list = []

    def read(consumer, n):
        def more():
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
            return len(got) >= n
        until_sync(more, f"{n} records", timeout_s=120, interval_s=0)
    read(first, 40)
    first.commit(message=got[39], asynchronous=False)     # committed offset 40
    first.close()
    admin = AdminClient({"bootstrap.servers": bs})
    desc = admin.describe_consumer_groups(["g2"])["g2"].result(timeout=30)
    coordinator = desc.coordinator.id
    c.kill(coordinator)
    got.clear()
    second = Consumer(conf)
    second.subscribe(["durable"])
    try:
        read(second, 1)
        assert got[0].offset() == 40 and got[0].value() == b"v40"
        committed = second.committed([TopicPartition("durable", 0)], timeout=30)
        assert committed[0].offset == 40
    finally:
        second.close()
    loads = [e for e in c_events(c, "coordinator_load") if e.get("groups", 0) >= 1]
    assert loads, "a surviving broker loaded the group from its log"


def test_group_wire_rules_batched_find_coordinator_member_id_required_and_fencing(group_cluster):
    from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
    from kafkatests import RawKafka

    c = group_cluster
    addrs = c.kafka_bootstrap.split(",")

    def find(k, keys):
        k.send(FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=keys))
        return k.recv(FindCoordinatorResponse, 4).coordinators

    with RawKafka(addrs[0]) as k:
        def found():
            coords = find(k, ["ga", "gb", ""])
            return coords if all(x.error_code == 0 for x in coords[:2]) else None
        coords = until_sync(found, "both groups' coordinators (the offsets topic is created on first use)",
                            timeout_s=60)
        assert [x.key for x in coords] == ["ga", "gb", ""]
        assert coords[2].error_code == 24                      # INVALID_GROUP_ID
    leader = next(x for x in coords if x.key == "ga")
    coordinator = f"{leader.host}:{leader.port}"
    other = next(a for a in addrs if a != coordinator)
    proto = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]

    def join(k, version, member_id=""):
        k.send(JoinGroupRequest(version=version, group_id="ga", session_timeout_ms=6000, rebalance_timeout_ms=6000,
                                member_id=member_id, protocol_type="consumer", protocols=proto))
        return k.recv(JoinGroupResponse, version)

    with RawKafka(other) as k:
        assert join(k, 4).error_code == 16                     # NOT_COORDINATOR
    with RawKafka(coordinator) as k:
        first = until_sync(lambda: (r := join(k, 4)).error_code != 14 and r, "the group's partition loaded")
        assert first.error_code == 79 and first.member_id     # MEMBER_ID_REQUIRED (KIP-394)
        joined = join(k, 4, first.member_id)
        assert joined.error_code == 0 and joined.leader == first.member_id and joined.generation_id == 1
        assert [m.member_id for m in joined.members] == [first.member_id]
        k.send(HeartbeatRequest(version=4, group_id="ga", generation_id=0, member_id=first.member_id))
        assert k.recv(HeartbeatResponse, 4).error_code == 22   # ILLEGAL_GENERATION
    with RawKafka(coordinator) as k:
        # v0-3: no MEMBER_ID_REQUIRED round trip; the first member, which never rejoins, is removed
        # at the rebalance timeout and the new one leads generation 2.
        v0 = join(k, 0)
        assert v0.error_code == 0 and v0.generation_id == 2 and v0.leader == v0.member_id != first.member_id


def test_kafka_python_group_commits_and_a_new_member_resumes_and_its_admin_lists_the_group(group_cluster):
    kafka = pytest.importorskip("kafka")
    c = group_cluster
    bs = c.kafka_bootstrap
    create_topic(c, "kp", partitions=2, rf=3)
    produce(bs, "kp", [f"k{i}" for i in range(40)], lambda v: int(v[1:]) % 2)
    conf = dict(bootstrap_servers=bs, group_id="kpg", enable_auto_commit=False, auto_offset_reset="earliest",
                session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500, consumer_timeout_ms=1000)
    first = kafka.KafkaConsumer("kp", **conf)
    got: list = []
    until_sync(lambda: got.extend(first.poll(timeout_ms=500, max_records=10).values()) or
               sum(len(b) for b in got) >= 10, "ten records through a kafka-python group member", timeout_s=120)
    first.commit()
    positions = {tp.partition: first.position(tp) for tp in first.assignment()}
    first.close()
    admin = kafka.KafkaAdminClient(bootstrap_servers=bs)
    try:
        groups = admin.list_groups()
        assert "kpg" in [g["group_id"] for g in groups], groups
        offsets = admin.list_group_offsets({"kpg": None})["kpg"]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == positions, offsets
    finally:
        admin.close()
    second = kafka.KafkaConsumer("kp", **conf)
    try:
        resumed: dict[int, int] = {}

        def first_offsets() -> bool:
            for tp, recs in second.poll(timeout_ms=500).items():
                resumed.setdefault(tp.partition, recs[0].offset)
            return set(resumed) == {p for p, pos in positions.items() if pos < 20}
        until_sync(first_offsets, "the new member's first record of each unfinished partition", timeout_s=120)
        assert all(resumed[p] == positions[p] for p in resumed)
        # OffsetDelete (KIP-496) through kafka-python's admin: not while a member reads the topic...
        admin = kafka.KafkaAdminClient(bootstrap_servers=bs)
        kp0 = kafka.TopicPartition("kp", 0)
        assert admin.delete_group_offsets("kpg", [kp0]) == {kp0: kafka.errors.GroupSubscribedToTopicError}
    finally:
        second.close()
    try:
        # ... and once the group is Empty: partition 0's offset goes, partition 1's stays.
        assert admin.delete_group_offsets("kpg", [kp0]) == {kp0: kafka.errors.NoError}
        left = admin.list_group_offsets({"kpg": None})["kpg"]
        assert {tp.partition for tp in left} == {1}, left
        with pytest.raises(kafka.errors.GroupIdNotFoundError):
            admin.delete_group_offsets("no-such-group", [kp0])
    finally:
        admin.close()


def test_kcat_balanced_consumer_librdkafka_2_0_2_joins_commits_and_a_second_run_resumes(group_cluster):
    from kafkatests import KCAT, needs_kcat  # noqa: F401
    if KCAT is None:
        pytest.skip("kcat is not installed (Debian: apt-get install -y kcat)")
    c = group_cluster
    bs = c.kafka_bootstrap
    create_topic(c, "kc", partitions=2, rf=3)
    produce(bs, "kc", [f"r{i}" for i in range(100)], lambda v: int(v[1:]) % 2)

    def run_kcat(count: int) -> list[str]:
        r = subprocess.run([KCAT, "-b", bs, "-G", "kcg", "-X", "auto.offset.reset=earliest", "-X",
                            "session.timeout.ms=6000", "-c", str(count), "-q", "kc"],
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        return r.stdout.decode().split()
    first = run_kcat(60)
    second = run_kcat(40)
    assert len(first) == 60 and len(second) == 40
    assert sorted(first + second) == sorted(f"r{i}" for i in range(100))
