"""ReplicaManagers of several brokers in one process, talking over real TCP on
127.0.0.1: leader and followers run our real data path (request server,
fetchers, logs in tmp dirs, leader cores). The test plays the controller:
it feeds metadata records (PartitionRecord, BrokerRecord) into each broker's
image and answers AlterPartition like the controller would (validate epochs,
bump the partition epoch, publish the new record)."""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any

import pytest

from minibroker.broker.metadata_image import MetadataImage
from minibroker.broker.peers import InterBrokerConnections
from minibroker.broker.replica_manager import ReplicaManager
from minibroker.config import DEFAULTS, Config
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event
from minibroker.metadata import BrokerRecord, Endpoint, PartitionRecord, TopicRecord
from minibroker.net.connection import Connection
from minibroker.net.server import Dispatcher, HandlerSpec, serve
from minibroker.protocol.api import ApiKey
from minibroker.records import build_batch, iter_records
from minibroker.storage import LogManager, PartitionLog
from minibroker.testing.wait import until

SECRET = "test-secret-0123456789"
TOPIC = "orders"

BASE_CONFIG = {
    "minibroker.cluster.secret": SECRET,
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "50",
    "replica.lag.time.max.ms": "30000",
    "min.insync.replicas": "1",
}


class Controller:
    """The test's controller: holds the partition registrations, publishes
    metadata to every broker (in order, like the metadata log) and answers
    AlterPartition with Kafka's validation of epochs (C6, simplified)."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        self.partitions: dict[tuple[str, int], PartitionRecord] = {}
        self.topics: dict[str, TopicRecord] = {}
        self.brokers: dict[int, BrokerRecord] = {}
        self.offset = itertools.count()
        self.alter_requests: list[dict] = []
        self.accept_alter = True
        self.deaf: set[int] = set()      # brokers that stop receiving metadata (zombies)

    def publish(self, *records: Any, to: list[int] | None = None) -> None:
        for r in records:
            if isinstance(r, PartitionRecord):
                self.partitions[r.key] = r
            elif isinstance(r, TopicRecord):
                self.topics[r.topic] = r
            elif isinstance(r, BrokerRecord):
                self.brokers[r.broker_id] = r
        batch = [(next(self.offset), r) for r in records]
        for node_id, node in self.nodes.items():
            if (to is not None and node_id not in to) or node_id in self.deaf or node.rm is None:
                continue
            node.deliver(batch)

    def link(self, broker_id: int) -> AlterLink:
        return AlterLink(self, broker_id)

    async def alter_partition(self, broker_id: int, topic: str, partition: int, leader_epoch: int,
                              partition_epoch: int, new_isr_with_epochs: list[dict]) -> dict:
        self.alter_requests.append({"broker_id": broker_id, "topic": topic, "partition": partition,
                                    "leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
                                    "isr": [e["broker_id"] for e in new_isr_with_epochs]})
        if broker_id in self.deaf:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "controller unreachable")
        rec = self.partitions[(topic, partition)]
        base = {"partition": partition, "leader_id": rec.leader, "leader_epoch": rec.leader_epoch,
                "isr": list(rec.isr), "partition_epoch": rec.partition_epoch, "leader_recovery_state": 0}
        if leader_epoch < rec.leader_epoch or rec.leader != broker_id:
            return {**base, "error": int(ErrorCode.FENCED_LEADER_EPOCH)}
        if partition_epoch != rec.partition_epoch:
            return {**base, "error": int(ErrorCode.INVALID_UPDATE_VERSION)}
        if not self.accept_alter:
            return {**base, "error": int(ErrorCode.INELIGIBLE_REPLICA)}
        isr = tuple(e["broker_id"] for e in new_isr_with_epochs)
        new = dataclasses.replace(rec, isr=isr, partition_epoch=rec.partition_epoch + 1,
                                  reason=f"AlterPartition from leader {broker_id}")
        asyncio.get_running_loop().call_soon(self.publish, new)
        return {**base, "error": 0, "isr": list(isr), "partition_epoch": new.partition_epoch}


@dataclasses.dataclass
class AlterLink:
    controller: Controller
    broker_id: int

    async def submit(self, topic: str, partition: int, leader_epoch: int, partition_epoch: int,
                     new_isr_with_epochs: list[dict], leader_recovery_state: int = 0) -> dict:
        return await self.controller.alter_partition(self.broker_id, topic, partition, leader_epoch,
                                                     partition_epoch, new_isr_with_epochs)


class Node:
    """One broker: its real request server, LogManager and ReplicaManager."""

    def __init__(self, node_id: int, data_dir: str, controller: Controller, *, rack: str = "",
                 config: dict[str, str] | None = None, broker_epoch: int = 100) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.controller = controller
        self.rack = rack
        self.broker_epoch = broker_epoch
        self.config = Config({**DEFAULTS, **BASE_CONFIG, "node.id": str(node_id), "broker.rack": rack,
                              **(config or {})})
        self.events: list[Event] = []
        self.rm: ReplicaManager | None = None
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        self.log_manager: LogManager | None = None
        controller.nodes[node_id] = self

    async def start(self) -> None:
        self.image = MetadataImage(self.config)
        self.log_manager = await asyncio.to_thread(LogManager, self.data_dir, event_sink=self.events.append)
        self.peers = InterBrokerConnections(node_id=self.node_id, image=self.image, listener="PLAINTEXT",
                                            secret=SECRET, max_frame_bytes=100 << 20)
        self.rm = ReplicaManager(node_id=self.node_id, config=self.config, log_manager=self.log_manager,
                                 image=self.image, alter_partition=self.controller.link(self.node_id),
                                 peers=self.peers, events=self.events.append,
                                 broker_epoch=lambda: self.broker_epoch)
        rm = self.rm
        self.dispatcher = Dispatcher({
            ApiKey.PRODUCE: HandlerSpec(rm.handle_produce),
            ApiKey.FETCH: HandlerSpec(rm.handle_fetch),
            ApiKey.LIST_OFFSETS: HandlerSpec(rm.handle_list_offsets),
        }, secret=SECRET, role="broker")
        self.server = await serve(self.dispatcher, "127.0.0.1", self.port, "PLAINTEXT")
        self.port = self.server.sockets[0].getsockname()[1]
        await rm.start()
        c = self.controller
        snapshot = [*c.brokers.values(), *c.topics.values(), *c.partitions.values()]
        self.image.apply([], snapshot, next(c.offset))
        rm.on_metadata(list(c.partitions.values()), list(c.brokers.values()), rm.clock())

    def deliver(self, batch: list[tuple[int, Any]]) -> None:
        delta = self.image.apply(batch, None, batch[-1][0] + 1)
        assert self.rm is not None
        if delta.partitions or delta.brokers:
            self.rm.on_metadata(delta.partitions, delta.brokers, self.rm.clock())

    def broker_record(self, *, fenced: bool = False) -> BrokerRecord:
        return BrokerRecord(self.node_id, self.broker_epoch, self.rack or None,
                            (Endpoint("PLAINTEXT", "127.0.0.1", self.port),), fenced=fenced)

    async def stop(self) -> None:
        """Stop serving and replicating (the data stays on disk)."""
        if self.server is not None:
            self.server.close()
            for conn in list(self.dispatcher.connections):
                if conn.transport is not None:
                    conn.transport.abort()
        if self.rm is not None:
            self.peers.close()
            await self.rm.shutdown()
            self.rm = None

    def part(self, partition: int = 0):
        assert self.rm is not None
        return self.rm.partition(TOPIC, partition)

    def kinds(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]


class Cluster:
    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.controller = Controller()
        self.nodes: dict[int, Node] = {}
        self.conns: list[Connection] = []

    def node(self, node_id: int, **kw: Any) -> Node:
        n = Node(node_id, str(self.tmp_path / f"broker-{node_id}"), self.controller, **kw)
        self.nodes[node_id] = n
        return n

    async def start(self, *ids: int, topic_configs: dict[str, str] | None = None) -> None:
        for i in ids:
            await self.nodes[i].start()
        self.controller.publish(*(self.nodes[i].broker_record() for i in ids))
        if TOPIC not in self.controller.topics:
            self.controller.publish(TopicRecord(TOPIC, "t-1", 1, dict(topic_configs or {})))

    def assign(self, replicas: tuple[int, ...], leader: int, *, isr: tuple[int, ...] | None = None,
               leader_epoch: int = 0, partition: int = 0, to: list[int] | None = None) -> PartitionRecord:
        held = self.controller.partitions.get((TOPIC, partition))
        pe = held.partition_epoch + 1 if held is not None else 0
        rec = PartitionRecord(TOPIC, partition, replicas, isr if isr is not None else replicas, leader,
                              leader_epoch, pe, reason="test")
        self.controller.publish(rec, to=to)
        return rec

    async def client(self, node_id: int, *, secret: str | None = None) -> Connection:
        n = self.nodes[node_id]
        c = await Connection.open("127.0.0.1", n.port, client_id="test", secret=secret)
        self.conns.append(c)
        return c

    async def close(self) -> None:
        for c in self.conns:
            c.close()
        for n in self.nodes.values():
            await n.stop()


@pytest.fixture
async def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    await c.close()


def produce_body(values: list[bytes], *, acks: int = -1, timeout_ms: int = 10_000, partition: int = 0,
                 topic: str = TOPIC, records: bytes | None = None) -> dict:
    return {"acks": acks, "timeout_ms": timeout_ms,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "records": records if records is not None else build_batch(values)}]}]}


def fetch_body(offset: int, *, replica_id: int = -1, epoch: int = -1, last_fetched_epoch: int = -1,
               max_wait_ms: int = 0, rack: str = "", broker_epoch: int = -1, partition: int = 0,
               min_bytes: int = 1) -> dict:
    return {"replica_id": replica_id, "broker_epoch": broker_epoch, "max_wait_ms": max_wait_ms,
            "min_bytes": min_bytes, "rack_id": rack,
            "topics": [{"topic": TOPIC, "partitions": [{
                "partition": partition, "fetch_offset": offset, "current_leader_epoch": epoch,
                "last_fetched_epoch": last_fetched_epoch}]}]}


def p0(resp: dict) -> dict:
    assert not resp.get("error"), resp
    return resp["topics"][0]["partitions"][0]


def values(records: bytes) -> list[bytes]:
    return [r.value for r in iter_records(records)]


def log_bytes(lg: PartitionLog) -> bytes:
    return lg.read(lg.log_start_offset, 1 << 30) if lg.log_end_offset > lg.log_start_offset else b""


# ------------------------------------------------------------------ replication


async def test_acks_all_completes_once_the_follower_fetched_and_hw_reaches_follower(cluster):
    cluster.node(1)
    cluster.node(2)
    await cluster.start(1, 2)
    cluster.assign((1, 2), 1)
    prod = await cluster.client(1)
    resp = await prod.request(ApiKey.PRODUCE, produce_body([b"a", b"b", b"c"]))
    e = resp["topics"][0]["partitions"][0]
    assert (e["error"], e["base_offset"]) == (0, 0)
    leader, follower = cluster.nodes[1].part(), cluster.nodes[2].part()
    assert leader.hw == 3
    await until(lambda: follower.hw == 3, what="follower HW to reach 3")
    assert log_bytes(follower.log) == log_bytes(leader.log)
    assert follower.log.epoch_cache.entries == [(0, 0)]


def prepare_log(data_dir: str, batches: list[tuple], tag: str, *, hw: int | None = None) -> None:
    """Write a log before the broker starts: `batches` of (leader epoch,
    records[, tag]), one record per batch, values "<tag>@<offset>"."""
    lm = LogManager(data_dir)
    lg = lm.get_or_create(TOPIC, 0)
    for epoch, n, *t in batches:
        for _ in range(n):
            lg.append_as_leader(build_batch([f"{t[0] if t else tag}@{lg.log_end_offset}".encode()],
                                            timestamp_ms=1000), epoch)
    lm.shutdown({(TOPIC, 0): hw} if hw is not None else {})


async def test_forged_replica_fetch_on_unauthenticated_connection_is_refused_and_hw_unchanged(cluster):
    cluster.node(1)
    cluster.node(2)
    await cluster.start(1, 2)
    cluster.assign((1, 2), 1, to=[1])            # broker 2 never learns it: it does not fetch
    prod = await cluster.client(1)
    e = p0(await prod.request(ApiKey.PRODUCE, produce_body([b"x"] * 3, acks=1)))
    assert e["error"] == 0
    leader = cluster.nodes[1].part()
    assert (leader.leo, leader.hw) == (3, 0)     # follower 2's LEO is unknown: HW frozen (H3)
    forged = await cluster.client(1)
    resp = await forged.request(ApiKey.FETCH, fetch_body(3, replica_id=2, epoch=0))
    assert resp["error"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    resp = await forged.request(ApiKey.LIST_OFFSETS, {"replica_id": 2, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": 0, "timestamp": -1}]}]})
    assert resp["error"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert leader.hw == 0 and leader.core.followers[2].leo == -1
    # The same fetch from an authenticated peer is what moves the HW.
    peer = await cluster.client(1, secret=SECRET)
    e = p0(await peer.request(ApiKey.FETCH, fetch_body(3, replica_id=2, epoch=0, broker_epoch=100)))
    assert e["error"] == 0
    assert leader.hw == 3


async def test_fetch_epoch_checks_come_before_leadership_and_never_update_follower_state(cluster):
    cluster.node(1)
    cluster.node(2)
    await cluster.start(1, 2)
    rec = cluster.assign((1, 2), 1, leader_epoch=5, to=[1])     # 2 does not fetch yet
    prod = await cluster.client(1)
    assert p0(await prod.request(ApiKey.PRODUCE, produce_body([b"x"] * 4, acks=1)))["error"] == 0
    leader = cluster.nodes[1].part()
    before = leader.core.followers[2]
    peer = await cluster.client(1, secret=SECRET)

    async def err(node_peer: Connection, body: dict) -> dict:
        return p0(await node_peer.request(ApiKey.FETCH, body))

    e = await err(peer, fetch_body(0, replica_id=2, epoch=4, broker_epoch=100))
    assert e["error"] == ErrorCode.FENCED_LEADER_EPOCH
    assert e["current_leader"] == {"leader_id": 1, "leader_epoch": 5}
    e = await err(peer, fetch_body(0, replica_id=2, epoch=6, broker_epoch=100))
    assert e["error"] == ErrorCode.UNKNOWN_LEADER_EPOCH
    e = await err(peer, fetch_body(0, replica_id=9, epoch=5))          # not a replica (F4)
    assert e["error"] == ErrorCode.UNKNOWN_LEADER_EPOCH
    e = await err(peer, fetch_body(99, replica_id=2, epoch=5, broker_epoch=100))
    assert e["error"] == ErrorCode.OFFSET_OUT_OF_RANGE
    e = await err(peer, fetch_body(4, replica_id=2, epoch=5, broker_epoch=99))   # stale incarnation (L5)
    assert e["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.core.followers[2] == before and leader.hw == 0
    consumer = await cluster.client(1)
    e = await err(consumer, fetch_body(0, epoch=4))                      # consumers are fenced too (E5)
    assert e["error"] == ErrorCode.FENCED_LEADER_EPOCH
    cluster.controller.publish(rec, to=[2])
    on_follower = await cluster.client(2, secret=SECRET)
    await until(lambda: cluster.nodes[2].part().leader_epoch == 5)
    e = await err(on_follower, fetch_body(0, replica_id=1, epoch=5))
    assert e["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    e = await err(on_follower, fetch_body(0, epoch=5))                   # consumer without a rack (F2)
    assert e["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    e = await err(on_follower, fetch_body(0, epoch=4))
    assert e["error"] == ErrorCode.FENCED_LEADER_EPOCH


async def test_x7_failover_follower_truncates_divergent_tail_and_refetches_new_epoch(cluster, tmp_path):
    a, b, c = cluster.node(1), cluster.node(2), cluster.node(3)
    await asyncio.to_thread(prepare_log, a.data_dir, [(0, 12)], "a")
    await asyncio.to_thread(prepare_log, b.data_dir, [(0, 10)], "a")
    await asyncio.to_thread(prepare_log, c.data_dir, [(0, 8)], "a")
    await cluster.start(2, 3)
    cluster.controller.publish(dataclasses.replace(a.broker_record(), fenced=True))
    cluster.assign((1, 2, 3), 2, isr=(2, 3), leader_epoch=1)
    lb = b.part()
    assert lb.log.epoch_cache.entries == [(0, 0), (1, 10)]               # written at election (E2)
    await until(lambda: lb.hw == 10, what="new leader's HW to cover the old epoch's tail (E6)")
    assert c.part().leo == 10
    prod = await cluster.client(2)
    e = p0(await prod.request(ApiKey.PRODUCE, produce_body([b"b@10"])))
    assert (e["error"], e["base_offset"]) == (0, 10)
    e = p0(await prod.request(ApiKey.PRODUCE, produce_body([b"b@11"])))
    assert (e["error"], e["base_offset"]) == (0, 11)
    await a.start()
    a.broker_epoch += 1
    cluster.controller.publish(a.broker_record())
    fa = a.part()
    await until(lambda: fa.leo == 12 and fa.log.epoch_cache.entries == [(0, 0), (1, 10)],
                what="old leader to truncate to 10 and refetch epoch 1")
    assert log_bytes(fa.log) == log_bytes(lb.log)
    assert values(log_bytes(fa.log))[9:] == [b"a@9", b"b@10", b"b@11"]
    trunc = [ev for ev in a.kinds("truncation") if ev.extra.get("side") == "end"]
    assert [(ev.before, ev.after) for ev in trunc] == [(12, 10)]
    assert "diverging epoch 0 ending at 10" in trunc[0].reason
    # the rejoiner last, as Kafka keeps it
    await until(lambda: cluster.controller.partitions[(TOPIC, 0)].isr == (2, 3, 1),
                what="old leader to rejoin the ISR")


async def test_x8_follower_with_an_epoch_the_leader_never_saw_truncates_to_the_common_epoch(cluster):
    b, c = cluster.node(2), cluster.node(3)
    await asyncio.to_thread(prepare_log, b.data_dir, [(1, 5, "a"), (2, 1)], "b")
    await asyncio.to_thread(prepare_log, c.data_dir, [(1, 5, "a"), (3, 2)], "c")
    await cluster.start(2, 3)
    cluster.assign((1, 2, 3), 3, isr=(3,), leader_epoch=3)
    fb, lc = b.part(), c.part()
    assert lc.log.epoch_cache.entries == [(1, 0), (3, 5)]
    await until(lambda: fb.log.epoch_cache.entries == [(1, 0), (3, 5)] and fb.leo == 7,
                what="B to drop its epoch-2 offset and fetch C's epoch 3")
    assert log_bytes(fb.log) == log_bytes(lc.log)
    trunc = [ev for ev in b.kinds("truncation") if ev.extra.get("side") == "end"]
    assert [(ev.before, ev.after) for ev in trunc] == [(6, 5)]


async def test_follower_truncates_in_several_rounds_when_it_does_not_know_the_leaders_epoch(cluster):
    f, ld = cluster.node(1), cluster.node(2)
    # Follower: epochs {1:0, 2:3, 4:6}, LEO 9. Leader: {1:0, 3:4}, then leads epoch 5 from 8.
    await asyncio.to_thread(prepare_log, f.data_dir, [(1, 3, "x"), (2, 3), (4, 3)], "f")
    await asyncio.to_thread(prepare_log, ld.data_dir, [(1, 3, "x"), (1, 1), (3, 4)], "l")
    await cluster.start(1, 2)
    cluster.assign((1, 2), 2, isr=(2,), leader_epoch=5)
    ff, ll = f.part(), ld.part()
    await until(lambda: ff.leo == 8 and log_bytes(ff.log) == log_bytes(ll.log), what="follower to converge")
    trunc = [(ev.before, ev.after) for ev in f.kinds("truncation") if ev.extra.get("side") == "end"]
    assert trunc == [(9, 6), (6, 3)]                 # 6: end of its own epoch 2; 3: end of common epoch 1
    assert ff.log.epoch_cache.entries == [(1, 0), (3, 4)]


def list_offsets_body(timestamp: int, *, replica_id: int = -1, epoch: int = -1) -> dict:
    return {"replica_id": replica_id, "topics": [{"topic": TOPIC, "partitions": [
        {"partition": 0, "timestamp": timestamp, "current_leader_epoch": epoch}]}]}


async def test_t4_new_leader_answers_offset_not_available_until_its_hw_reaches_the_epoch_start(cluster):
    b, c = cluster.node(2), cluster.node(3)
    await asyncio.to_thread(prepare_log, b.data_dir, [(0, 10)], "a", hw=8)
    await asyncio.to_thread(prepare_log, c.data_dir, [(0, 10)], "a", hw=8)
    await cluster.start(2, 3)
    rec = cluster.assign((2, 3), 2, isr=(2, 3), leader_epoch=1, to=[2])    # 3 not following yet
    client = await cluster.client(2)
    e = p0(await client.request(ApiKey.LIST_OFFSETS, list_offsets_body(-1)))
    assert e["error"] == ErrorCode.OFFSET_NOT_AVAILABLE
    e = p0(await client.request(ApiKey.LIST_OFFSETS, list_offsets_body(-2)))
    assert (e["error"], e["offset"], e["leader_epoch"]) == (0, 0, 0)
    peer = await cluster.client(2, secret=SECRET)
    e = p0(await peer.request(ApiKey.LIST_OFFSETS, list_offsets_body(-1, replica_id=3)))
    assert (e["error"], e["offset"]) == (0, 10)                             # replicas get the LEO
    e = p0(await client.request(ApiKey.FETCH, fetch_body(9)))                # X9: below the LEO, above HW
    assert (e["error"], e["records"], e["high_watermark"]) == (0, b"", 8)
    cluster.controller.publish(rec, to=[3])
    await until(lambda: b.part().hw == 10, what="HW to reach the epoch start once 3 fetched")
    e = p0(await client.request(ApiKey.LIST_OFFSETS, list_offsets_body(-1, epoch=1)))
    assert (e["error"], e["offset"], e["leader_epoch"]) == (0, 10, 1)
    e = p0(await client.request(ApiKey.LIST_OFFSETS, list_offsets_body(-1, epoch=0)))
    assert e["error"] == ErrorCode.FENCED_LEADER_EPOCH
    e = p0(await (await cluster.client(3)).request(ApiKey.LIST_OFFSETS, list_offsets_body(-1)))
    assert e["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_zombie_leader_never_acks_acks_all_and_loses_its_acks_1_writes(cluster):
    n1, _, n3 = cluster.node(1), cluster.node(2), cluster.node(3)
    await cluster.start(1, 2, 3, topic_configs={"min.insync.replicas": "2"})
    cluster.assign((1, 2, 3), 1)
    prod = await cluster.client(1)
    assert p0(await prod.request(ApiKey.PRODUCE, produce_body([b"committed"])))["error"] == 0
    # Broker 1 is cut off from the controller; 2 takes over at epoch 1 (S11/S12/X13).
    cluster.controller.deaf.add(1)
    cluster.assign((1, 2, 3), 2, isr=(2, 3), leader_epoch=1)
    await until(lambda: n3.rm.fetchers.state((TOPIC, 0)) is not None
                and n3.rm.fetchers.state((TOPIC, 0)).leader_epoch == 1)
    e = p0(await prod.request(ApiKey.PRODUCE, produce_body([b"zombie-all"], timeout_ms=600)))
    assert e["error"] == ErrorCode.REQUEST_TIMED_OUT                       # appended, never acked
    e = p0(await prod.request(ApiKey.PRODUCE, produce_body([b"zombie-one"], acks=1)))
    assert (e["error"], e["base_offset"]) == (0, 2)
    assert n1.part().hw == 1
    new = await cluster.client(2)
    e = p0(await new.request(ApiKey.PRODUCE, produce_body([b"new-leader"])))
    assert (e["error"], e["base_offset"]) == (0, 1)
    # Healed: 1 learns epoch 1, truncates its unreplicated suffix and follows 2.
    cluster.controller.deaf.clear()
    cluster.controller.publish(cluster.controller.partitions[(TOPIC, 0)], to=[1])
    await until(lambda: values(log_bytes(n1.part().log)) == [b"committed", b"new-leader"],
                what="the zombie to truncate and follow the new leader")
    assert n1.part().role == "follower"
    assert not [ev for ev in n1.events if ev.kind == "produce_completed" and ev.after == "NONE"]


async def test_isr_shrinks_on_the_lag_timer_then_the_restarted_follower_rejoins_without_truncating(cluster):
    cfg = {"replica.lag.time.max.ms": "300"}
    n1, n2 = cluster.node(1, config=cfg), cluster.node(2, config=cfg)
    await cluster.start(1, 2, topic_configs={"min.insync.replicas": "1"})
    cluster.assign((1, 2), 1)
    prod = await cluster.client(1)
    assert p0(await prod.request(ApiKey.PRODUCE, produce_body([b"one"])))["error"] == 0
    await until(lambda: n2.part().hw == 1)
    await n2.stop()
    e = p0(await prod.request(ApiKey.PRODUCE, produce_body([b"two"], timeout_ms=20_000)))
    assert e["error"] == 0                                                 # completed after the shrink
    assert cluster.controller.partitions[(TOPIC, 0)].isr == (1,)
    proposed = n1.kinds("isr_proposed")
    assert proposed[0].after == [1] and "not caught up" in proposed[0].reason
    assert n1.kinds("isr_shrink")[0].after == [1]
    assert cluster.controller.alter_requests[0]["isr"] == [1]
    n2.broker_epoch += 1
    await n2.start()
    cluster.controller.publish(n2.broker_record())
    await until(lambda: cluster.controller.partitions[(TOPIC, 0)].isr == (1, 2), what="2 to rejoin")
    assert not [ev for ev in n2.events if ev.kind == "truncation" and ev.extra.get("side") == "end"]
    assert values(log_bytes(n2.part().log)) == [b"one", b"two"]
    assert n1.kinds("isr_expand")


async def test_follower_read_preferred_replica_by_rack_and_follower_serves_to_its_own_hw(cluster):
    cfg = {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}
    for i in (1, 2, 3):
        cluster.node(i, rack=f"r{i}", config=cfg)
    await cluster.start(1, 2, 3)
    cluster.assign((1, 2, 3), 1)
    prod = await cluster.client(1)
    for i in range(3):
        assert p0(await prod.request(ApiKey.PRODUCE, produce_body([f"v{i}".encode()])))["error"] == 0
    await until(lambda: all(cluster.nodes[i].part().hw == 3 for i in (2, 3)), what="followers' HW")
    consumer = await cluster.client(1)
    e = p0(await consumer.request(ApiKey.FETCH, fetch_body(0, rack="r2", max_wait_ms=5000)))
    assert (e["preferred_read_replica"], e["records"], e["high_watermark"]) == (2, b"", 3)
    e = p0(await consumer.request(ApiKey.FETCH, fetch_body(0, rack="r1")))      # leader's own rack
    assert e["preferred_read_replica"] == -1 and values(e["records"])[:1] == [b"v0"]
    e = p0(await consumer.request(ApiKey.FETCH, fetch_body(0, rack="r9")))      # nobody in that rack
    assert e["preferred_read_replica"] == -1
    on2 = await cluster.client(2)
    e = p0(await on2.request(ApiKey.FETCH, fetch_body(0, rack="r2", epoch=0)))
    assert e["error"] == 0 and values(e["records"])[:1] == [b"v0"] and e["high_watermark"] == 3
    e = p0(await on2.request(ApiKey.FETCH, fetch_body(4, rack="r2")))
    assert e["error"] == ErrorCode.OFFSET_OUT_OF_RANGE                        # beyond the follower's LEO
    # A follower read at its HW parks until the follower's HW moves (R9).
    parked = asyncio.ensure_future(on2.request(ApiKey.FETCH, fetch_body(3, rack="r2", max_wait_ms=20_000)))
    await until(lambda: len(cluster.nodes[2].rm.purgatory) == 1)
    assert p0(await prod.request(ApiKey.PRODUCE, produce_body([b"v3"])))["error"] == 0
    e = p0(await parked)
    assert values(e["records"]) == [b"v3"] and e["high_watermark"] == 4


async def test_produce_errors_are_per_partition_and_write_nothing(cluster):
    cluster.node(1)
    cluster.node(2)
    await cluster.start(1, 2, topic_configs={"min.insync.replicas": "2", "max.message.bytes": "300"})
    cluster.assign((1, 2), 1, isr=(1,))
    prod = await cluster.client(1)
    leader = cluster.nodes[1].part()

    async def produce(**kw: Any) -> dict:
        return p0(await prod.request(ApiKey.PRODUCE, produce_body([b"v"], **kw)))

    assert (await produce(acks=-1))["error"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert (await produce(acks=2))["error"] == ErrorCode.INVALID_REQUIRED_ACKS
    assert (await produce(acks=1, topic="nope"))["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await produce(acks=1, partition=7))["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    bad = bytearray(build_batch([b"v"]))
    bad[-1] ^= 0xFF
    e = await produce(acks=1, records=bytes(bad))
    assert e["error"] == ErrorCode.CORRUPT_MESSAGE and "CRC" in e["message"]
    assert (await produce(acks=1, records=build_batch([b"x" * 400])))["error"] == ErrorCode.MESSAGE_TOO_LARGE
    assert leader.leo == 0
    e = await produce(acks=1)                     # acks=1 is never refused for ISR size (P3)
    assert (e["error"], e["base_offset"]) == (0, 0)
    assert leader.hw == 0                         # strict min ISR: HW frozen (P7/H2)
    follower = await cluster.client(2)
    assert (await follower.request(ApiKey.PRODUCE, produce_body([b"v"], acks=1)))["topics"][0][
        "partitions"][0]["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_acks_0_failure_closes_the_connection(cluster):
    cluster.node(1)
    await cluster.start(1)
    cluster.assign((1,), 1)
    c = await cluster.client(1)
    c.send_no_response(ApiKey.PRODUCE, produce_body([b"ok"], acks=0))
    await until(lambda: cluster.nodes[1].part().leo == 1)
    assert not c.closed
    c.send_no_response(ApiKey.PRODUCE, produce_body([b"lost"], acks=0, topic="nope"))
    await until(lambda: c.closed, what="the broker to close the acks=0 connection")


async def test_parked_requests_die_with_their_connection(cluster):
    cluster.node(1)
    cluster.node(2)
    await cluster.start(1, 2)
    cluster.assign((1, 2), 1, to=[1])            # 2 never fetches: acks=all cannot complete
    leader_rm = cluster.nodes[1].rm
    c = await cluster.client(1)
    produce = asyncio.ensure_future(c.request(ApiKey.PRODUCE, produce_body([b"v"], timeout_ms=60_000)))
    fetch = asyncio.ensure_future(c.request(ApiKey.FETCH, fetch_body(0, max_wait_ms=60_000)))
    await until(lambda: cluster.nodes[1].part().core.waiting == 1 and len(leader_rm.purgatory) == 1)
    c.close()
    await until(lambda: cluster.nodes[1].part().core.waiting == 0 and len(leader_rm.purgatory) == 0,
                what="the parked produce and fetch to go with the connection")
    for f in (produce, fetch):
        with pytest.raises(KafkaError):
            await f


async def test_consumer_long_poll_wakes_on_the_hw_move_not_on_the_append(cluster):
    cluster.node(1)
    cluster.node(2)
    await cluster.start(1, 2)
    rec = cluster.assign((1, 2), 1, to=[1])
    consumer = await cluster.client(1)
    parked = asyncio.ensure_future(consumer.request(ApiKey.FETCH, fetch_body(0, max_wait_ms=60_000)))
    await until(lambda: len(cluster.nodes[1].rm.purgatory) == 1)
    prod = await cluster.client(1)
    assert p0(await prod.request(ApiKey.PRODUCE, produce_body([b"v"], acks=1)))["error"] == 0
    assert not parked.done() and len(cluster.nodes[1].rm.purgatory) == 1   # uncommitted: still parked
    cluster.controller.publish(rec, to=[2])                                 # follower fetches: HW moves
    e = p0(await parked)
    assert values(e["records"]) == [b"v"] and e["high_watermark"] == 1


async def test_one_fetcher_per_leader_carries_every_partition_between_the_two_brokers(cluster):
    cluster.node(1)
    cluster.node(2)
    cluster.node(3)
    await cluster.start(1, 2, 3)
    cluster.assign((1, 2), 1, partition=0)
    cluster.assign((1, 2), 1, partition=1)
    cluster.assign((3, 2), 3, partition=2)
    prod1, prod3 = await cluster.client(1), await cluster.client(3)
    for p in (0, 1):
        assert p0(await prod1.request(ApiKey.PRODUCE, produce_body([f"p{p}".encode()], partition=p)))["error"] == 0
    assert p0(await prod3.request(ApiKey.PRODUCE, produce_body([b"p2"], partition=2)))["error"] == 0
    fetchers = cluster.nodes[2].rm.fetchers.fetchers()
    assert sorted(fetchers) == [1, 3] and len(fetchers[1]) == 2 and len(fetchers[3]) == 1
    n2 = cluster.nodes[2]
    await until(lambda: all(n2.part(p).hw == 1 for p in (0, 1, 2)), what="all three followed")
    assert [values(log_bytes(n2.part(p).log)) for p in (0, 1, 2)] == [[b"p0"], [b"p1"], [b"p2"]]
