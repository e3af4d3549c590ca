"""The broker's controller channel against a tiny controller-protocol peer
served by the real request server (minibroker.net.server) over TCP."""
import asyncio

import pytest

from minibroker.broker.controller_channel import (
    AlterPartitionItem, AlterPartitionManager, AlterPartitionQueue, BrokerLifecycle, BrokerState,
    ControllerChannel, ControllerLink, HeartbeatOutcome,
)
from minibroker.broker.metadata_image import MetadataImage
from minibroker.config import DEFAULTS, Config
from minibroker.errors import ErrorCode, KafkaError
from minibroker.metadata import BrokerRecord, Endpoint, PartitionRecord, TopicRecord, to_wire
from minibroker.net.server import Dispatcher, HandlerSpec, serve
from minibroker.protocol.api import ApiKey
from minibroker.testing.wait import until

SECRET = "test-secret-0123456789"


class FakeController:
    """Speaks the controller's side of the protocol, just enough for the channel."""

    def __init__(self) -> None:
        self.log: list[dict] = []
        self.next_epoch = 100
        self.registrations: list[dict] = []
        self.heartbeats: list[dict] = []
        self.alter_requests: list[dict] = []
        self.alter_gate: asyncio.Event | None = None
        self.alter_top_error: list[int] = []       # top-level errors to answer, one per request
        self.heartbeat_error: list[int] = []
        self.fenced = True
        self.should_shut_down = False
        self.epochs: dict[int, int] = {}
        self.changed = asyncio.Event()
        self.server = None
        self.port = 0

    def append(self, rec) -> None:
        self.log.append(to_wire(rec, len(self.log)))
        self.changed.set()
        self.changed = asyncio.Event()

    async def start(self, port: int = 0) -> None:
        d = Dispatcher({
            ApiKey.BROKER_REGISTRATION: HandlerSpec(self.register, privileged=True),
            ApiKey.BROKER_HEARTBEAT: HandlerSpec(self.heartbeat, privileged=True),
            ApiKey.METADATA_FETCH: HandlerSpec(self.metadata_fetch, privileged=True),
            ApiKey.ALTER_PARTITION: HandlerSpec(self.alter_partition, privileged=True),
            ApiKey.DESCRIBE_CLUSTER: HandlerSpec(self.describe_cluster),
        }, secret=SECRET, role="controller")
        self.server = await serve(d, "127.0.0.1", port, "CONTROLLER")
        self.port = self.server.sockets[0].getsockname()[1]
        self.dispatcher = d

    async def stop(self) -> None:
        self.server.close()
        for c in list(self.dispatcher.connections):
            c.transport.abort()
        await self.server.wait_closed()

    async def register(self, ctx, body):
        self.registrations.append(body)
        self.next_epoch += 1
        self.epochs[body["broker_id"]] = self.next_epoch
        self.append(BrokerRecord(body["broker_id"], self.next_epoch, body["rack"],
                                 tuple(Endpoint(**e) for e in body["listeners"]), fenced=True))
        self.registered_at = len(self.log) - 1
        return {"error": 0, "broker_epoch": self.next_epoch}

    async def heartbeat(self, ctx, body):
        self.heartbeats.append(body)
        if self.heartbeat_error:
            return {"error": self.heartbeat_error.pop(0), "message": "scripted"}
        if self.epochs.get(body["broker_id"]) != body["broker_epoch"]:
            return {"error": int(ErrorCode.STALE_BROKER_EPOCH)}
        caught_up = body["current_metadata_offset"] >= self.registered_at
        if caught_up and not body["want_fence"]:
            self.fenced = False
        return {"error": 0, "is_caught_up": caught_up, "is_fenced": self.fenced,
                "should_shut_down": self.should_shut_down and body["want_shut_down"]}

    async def metadata_fetch(self, ctx, body):
        start = body["from_offset"]
        if start >= len(self.log) and body["max_wait_ms"] > 0:
            try:
                await asyncio.wait_for(self.changed.wait(), body["max_wait_ms"] / 1000)
            except TimeoutError:
                pass
        snapshot = None
        if start == 0:
            snapshot, recs = list(self.log), []
        else:
            recs = self.log[start:]
        return {"error": 0, "records": recs, "next_offset": len(self.log), "snapshot": snapshot}

    async def alter_partition(self, ctx, body):
        self.alter_requests.append(body)
        if self.alter_gate is not None:
            await self.alter_gate.wait()
        if self.alter_top_error:
            return {"error": self.alter_top_error.pop(0), "message": "scripted"}
        return {"error": 0, "topics": [
            {"topic": t["topic"], "partitions": [
                {"partition": p["partition"], "error": 0, "leader_id": body["broker_id"],
                 "leader_epoch": p["leader_epoch"], "isr": [e["broker_id"] for e in p["new_isr_with_epochs"]],
                 "partition_epoch": p["partition_epoch"] + 1, "leader_recovery_state": 0}
                for p in t["partitions"]]}
            for t in body["topics"]]}

    async def describe_cluster(self, ctx, body):
        return {"error": 0, "cluster_id": "fake-cluster", "controller_id": 3000, "brokers": []}


@pytest.fixture
async def controller():
    c = FakeController()
    await c.start()
    yield c
    await c.stop()


def config(port, **kw):
    return Config({**DEFAULTS, "node.id": "1", "controller.quorum.bootstrap.servers": f"127.0.0.1:{port}",
                   "minibroker.cluster.secret": SECRET, "broker.heartbeat.interval.ms": "50",
                   "minibroker.metadata.fetch.max.wait.ms": "200", **kw})


def isr(*ids):
    return [{"broker_id": i, "broker_epoch": 5} for i in ids]


# -- AlterPartitionQueue (pure) ----------------------------------------------

def item(p, topic="t"):
    return AlterPartitionItem(topic, p, 3, 7, isr(1, 2))


def test_queue_sends_everything_queued_in_one_request_and_nothing_while_in_flight():
    q = AlterPartitionQueue()
    assert q.submit(item(0)) and q.submit(item(1)) and q.submit(item(0, "u"))
    body = q.maybe_build_request(1, 42)
    assert body["broker_epoch"] == 42
    assert {(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]} == \
        {("t", 0), ("t", 1), ("u", 0)}
    assert q.submit(item(2))
    assert q.maybe_build_request(1, 42) is None


def test_queue_refuses_a_second_change_for_a_queued_or_in_flight_partition():
    q = AlterPartitionQueue()
    assert q.submit(item(0))
    assert not q.submit(item(0))
    q.maybe_build_request(1, 1)
    assert not q.submit(item(0))


def test_queue_keeps_proposals_after_a_failure_and_resends_them_with_new_ones():
    q = AlterPartitionQueue()
    q.submit(item(0))
    q.maybe_build_request(1, 1)
    q.submit(item(1))
    q.on_failure()
    body = q.maybe_build_request(1, 2)
    assert sorted(p["partition"] for t in body["topics"] for p in t["partitions"]) == [0, 1]


def test_queue_answers_partitions_missing_from_the_response_with_unknown_server_error():
    q = AlterPartitionQueue()
    q.submit(item(0))
    q.submit(item(1))
    q.maybe_build_request(1, 1)
    q.submit(item(2))
    out = dict(q.on_response({"error": 0, "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "error": 0, "isr": [1, 2]}, {"partition": 9, "error": 0}]}]}))
    assert out[("t", 0)]["error"] == 0
    assert out[("t", 1)]["error"] == ErrorCode.UNKNOWN_SERVER_ERROR
    assert ("t", 9) not in out and len(q) == 1


# -- AlterPartitionManager over TCP ------------------------------------------

async def _manager(controller, epoch=7):
    link = ControllerLink([("127.0.0.1", controller.port)], SECRET, "test", 1 << 20)
    return AlterPartitionManager(link, 1, lambda: epoch, retry_ms=20)


async def test_alter_partition_keeps_one_request_in_flight_and_batches_the_rest(controller):
    mgr = await _manager(controller)
    controller.alter_gate = asyncio.Event()
    first = asyncio.ensure_future(mgr.submit("t", 0, 3, 7, isr(1, 2)))
    await until(lambda: len(controller.alter_requests) == 1)
    rest = [asyncio.ensure_future(mgr.submit("t", p, 3, 7, isr(1))) for p in (1, 2, 3)]
    await asyncio.sleep(0)
    assert len(controller.alter_requests) == 1
    controller.alter_gate.set()
    results = await asyncio.gather(first, *rest)
    assert len(controller.alter_requests) == 2
    second = controller.alter_requests[1]
    assert sorted(p["partition"] for t in second["topics"] for p in t["partitions"]) == [1, 2, 3]
    assert [r["partition"] for r in results] == [0, 1, 2, 3]
    assert results[0]["isr"] == [1, 2] and results[0]["partition_epoch"] == 8
    assert second["broker_id"] == 1 and second["broker_epoch"] == 7
    await mgr.close()
    mgr.link.close()


async def test_alter_partition_second_submit_for_an_in_flight_partition_is_not_attempted(controller):
    mgr = await _manager(controller)
    controller.alter_gate = asyncio.Event()
    first = asyncio.ensure_future(mgr.submit("t", 0, 3, 7, isr(1, 2)))
    await until(lambda: len(controller.alter_requests) == 1)
    with pytest.raises(KafkaError) as e:
        await mgr.submit("t", 0, 3, 7, isr(1))
    assert e.value.code == ErrorCode.OPERATION_NOT_ATTEMPTED
    controller.alter_gate.set()
    assert (await first)["error"] == 0
    await mgr.close()
    mgr.link.close()


async def test_alter_partition_top_level_error_resends_the_same_proposal(controller):
    mgr = await _manager(controller)
    controller.alter_top_error = [int(ErrorCode.NOT_CONTROLLER), int(ErrorCode.STALE_BROKER_EPOCH)]
    r = await mgr.submit("t", 0, 3, 7, isr(1, 2))
    assert r["error"] == 0 and r["isr"] == [1, 2]
    assert len(controller.alter_requests) == 3
    assert controller.alter_requests[0]["topics"] == controller.alter_requests[2]["topics"]
    await mgr.close()
    mgr.link.close()


async def test_alter_partition_fatal_top_level_error_is_raised_to_the_submitter(controller):
    mgr = await _manager(controller)
    controller.alter_top_error = [int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
    with pytest.raises(KafkaError) as e:
        await mgr.submit("t", 0, 3, 7, isr(1, 2))
    assert e.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert (await mgr.submit("t", 0, 3, 7, isr(1, 2)))["error"] == 0
    await mgr.close()
    mgr.link.close()


async def test_alter_partition_survives_a_controller_restart(controller):
    mgr = await _manager(controller)
    assert (await mgr.submit("t", 0, 3, 7, isr(1)))["error"] == 0
    port = controller.port
    await controller.stop()
    pending = asyncio.ensure_future(mgr.submit("t", 1, 3, 7, isr(1)))
    await asyncio.sleep(0.05)                     # absence check: the submit keeps retrying (backoff), not done
    assert not pending.done()
    await controller.start(port)
    assert (await pending)["partition"] == 1
    await mgr.close()
    mgr.link.close()


async def test_alter_partition_close_fails_waiting_submitters(controller):
    mgr = await _manager(controller)
    controller.alter_gate = asyncio.Event()
    pending = asyncio.ensure_future(mgr.submit("t", 0, 3, 7, isr(1)))
    await until(lambda: len(controller.alter_requests) == 1)
    await mgr.close()
    with pytest.raises(KafkaError) as e:
        await pending
    assert e.value.code == ErrorCode.NETWORK_EXCEPTION
    controller.alter_gate.set()
    mgr.link.close()


# -- BrokerLifecycle (pure) --------------------------------------------------

def lifecycle(**kw):
    return BrokerLifecycle(node_id=1, rack="r1", listeners=[{"name": "PLAINTEXT", "host": "h", "port": 1}], **kw)


def test_lifecycle_goes_starting_recovery_running_only_when_caught_up_ready_and_unfenced():
    lc = lifecycle()
    assert lc.registration_request()["previous_broker_epoch"] == -1
    lc.on_registration_response({"error": 0, "broker_epoch": 9}, 0)
    assert lc.heartbeat_request(5) == {"broker_id": 1, "broker_epoch": 9, "current_metadata_offset": 5,
                                       "want_fence": True, "want_shut_down": False}
    lc.on_heartbeat_response({"error": 0, "is_caught_up": False, "is_fenced": True}, 1)
    assert lc.state is BrokerState.STARTING
    lc.on_heartbeat_response({"error": 0, "is_caught_up": True, "is_fenced": True}, 2)
    assert lc.state is BrokerState.RECOVERY
    lc.on_heartbeat_response({"error": 0, "is_caught_up": True, "is_fenced": False}, 3)
    assert lc.state is BrokerState.RECOVERY           # not ready to unfence yet
    events = lc.set_ready_to_unfence(4)
    assert lc.state is BrokerState.RUNNING and events[0].after == "RUNNING"
    assert lc.heartbeat_request(6)["want_fence"] is False


def test_lifecycle_stale_broker_epoch_asks_for_a_new_registration_with_the_previous_epoch():
    lc = lifecycle(previous_broker_epoch=-1)
    lc.on_registration_response({"error": 0, "broker_epoch": 9}, 0)
    outcome, _ = lc.on_heartbeat_response({"error": int(ErrorCode.STALE_BROKER_EPOCH)}, 1)
    assert outcome is HeartbeatOutcome.REGISTER and lc.needs_registration
    assert lc.registration_request()["previous_broker_epoch"] == 9
    lc.on_registration_response({"error": 0, "broker_epoch": 12}, 2)
    assert lc.broker_epoch == 12 and lc.registrations == 2


def test_lifecycle_controlled_shutdown_waits_for_should_shut_down():
    lc = lifecycle()
    lc.on_registration_response({"error": 0, "broker_epoch": 9}, 0)
    lc.begin_controlled_shutdown(1, "SIGTERM")
    assert lc.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN
    assert lc.heartbeat_request(3)["want_shut_down"] is True
    lc.on_heartbeat_response({"error": 0, "is_caught_up": True, "is_fenced": False, "should_shut_down": False}, 2)
    assert lc.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN
    lc.on_heartbeat_response({"error": 0, "is_caught_up": True, "is_fenced": True, "should_shut_down": True}, 3)
    assert lc.state is BrokerState.SHUTTING_DOWN


def test_lifecycle_controlled_shutdown_before_registration_shuts_down_at_once():
    lc = lifecycle()
    lc.begin_controlled_shutdown(1, "SIGTERM")
    assert lc.state is BrokerState.SHUTTING_DOWN


def test_lifecycle_registration_refusal_raises_with_the_code():
    lc = lifecycle()
    with pytest.raises(KafkaError) as e:
        lc.on_registration_response({"error": int(ErrorCode.INVALID_REQUEST), "message": "dup"}, 0)
    assert e.value.code == ErrorCode.INVALID_REQUEST and lc.broker_epoch == -1


# -- ControllerChannel against the fake controller ---------------------------

async def _channel(controller, **kw):
    image = MetadataImage()
    deltas, events = [], []
    lc = lifecycle()
    ch = ControllerChannel(config=config(controller.port, **kw), node_id=1, image=image, lifecycle=lc,
                           on_delta=deltas.append, events=events.append)
    ch.start()
    return ch, lc, image, deltas, events


async def test_channel_registers_catches_up_and_runs_once_ready_and_unfenced(controller):
    controller.append(TopicRecord("t", "tid", 1))
    controller.append(PartitionRecord("t", 0, (1,), (1,), 1, 0, 0))
    ch, lc, image, deltas, events = await _channel(controller)
    await until(lambda: lc.state is BrokerState.RECOVERY)
    assert controller.registrations[0]["incarnation_id"] == lc.incarnation_id
    assert image.brokers[1].broker_epoch == lc.broker_epoch
    assert image.partitions[("t", 0)].leader == 1 and deltas and deltas[0].snapshot
    assert controller.heartbeats[-1]["want_fence"] is True
    ch.set_ready_to_unfence()
    await until(lambda: lc.state is BrokerState.RUNNING)
    assert [e.kind for e in events if e.kind == "broker_registered"] == ["broker_registered"]
    controller.append(PartitionRecord("t", 0, (1,), (1,), 1, 1, 1, reason="test"))
    await until(lambda: image.partitions[("t", 0)].leader_epoch == 1)
    assert deltas[-1].partitions[0].reason == "test"
    await ch.close()


async def test_channel_registers_again_when_the_controller_refuses_its_broker_epoch(controller):
    ch, lc, image, deltas, events = await _channel(controller)
    await until(lambda: lc.state is BrokerState.RECOVERY)
    first = lc.broker_epoch
    controller.epochs[1] = -5           # the controller forgot this incarnation
    await until(lambda: len(controller.registrations) == 2)
    await until(lambda: lc.broker_epoch != first and lc.broker_epoch == controller.epochs[1])
    assert controller.registrations[1]["previous_broker_epoch"] == first
    assert controller.registrations[1]["incarnation_id"] == controller.registrations[0]["incarnation_id"]
    await ch.close()


async def test_channel_reconnects_after_the_controller_restarts(controller):
    ch, lc, image, deltas, events = await _channel(controller)
    ch.set_ready_to_unfence()
    await until(lambda: lc.state is BrokerState.RUNNING)
    port = controller.port
    await controller.stop()
    beats = len(controller.heartbeats)
    await asyncio.sleep(0.1)     # the controller stays down a while: the outage is the behaviour under test
    await controller.start(port)
    controller.append(TopicRecord("after", "a", 1))
    await until(lambda: "after" in image.topics)
    await until(lambda: len(controller.heartbeats) > beats + 2)
    assert lc.state is BrokerState.RUNNING
    await ch.close()


async def test_channel_controlled_shutdown_heartbeats_want_shut_down_until_told(controller):
    ch, lc, image, deltas, events = await _channel(controller)
    ch.set_ready_to_unfence()
    await until(lambda: lc.state is BrokerState.RUNNING)
    ch.begin_controlled_shutdown("SIGTERM")
    await until(lambda: controller.heartbeats[-1]["want_shut_down"])
    assert lc.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN
    controller.should_shut_down = True
    assert await ch.wait_for(lambda: lc.state is BrokerState.SHUTTING_DOWN, 10_000)
    await ch.close()


async def test_channel_forwards_requests_and_learns_the_cluster_id(controller):
    ch, lc, image, deltas, events = await _channel(controller)
    resp = await ch.forward(ApiKey.DESCRIBE_CLUSTER, {}, 5000)
    assert resp["cluster_id"] == "fake-cluster" and "id" not in resp
    await until(lambda: image.cluster_id == "fake-cluster")
    assert image.controller_id == 3000
    await ch.close()


# -- InterBrokerConnections (peers.py) ---------------------------------------

from minibroker.broker.peers import InterBrokerConnections  # noqa: E402


def _peer_image(port, listener="INTERNAL", epoch=1):
    image = MetadataImage()
    image.apply([(0, BrokerRecord(2, epoch, None, (Endpoint(listener, "127.0.0.1", port),
                                                   Endpoint("EXTERNAL", "127.0.0.1", 1))))], None, 1)
    return image


async def test_peers_open_one_authenticated_connection_per_broker_and_reuse_it(controller):
    image = _peer_image(controller.port)
    peers = InterBrokerConnections(node_id=1, image=image, listener="INTERNAL", secret=SECRET, max_frame_bytes=1 << 20)
    a, b = await asyncio.gather(peers.get(2), peers.get(2))
    assert a is b
    resp = await a.request(ApiKey.ALTER_PARTITION, {"broker_id": 1, "broker_epoch": 1, "topics": []})
    assert resp["error"] == 0                        # privileged: the connection is authenticated
    assert await peers.get(2) is a
    peers.close()


async def test_peers_reopen_a_closed_connection_and_follow_a_moved_endpoint(controller):
    image = _peer_image(controller.port)
    peers = InterBrokerConnections(node_id=1, image=image, listener="INTERNAL", secret=SECRET, max_frame_bytes=1 << 20)
    first = await peers.get(2)
    first.close()
    second = await peers.get(2)
    assert second is not first and not second.closed
    other = FakeController()
    await other.start()
    image.apply([(1, BrokerRecord(2, 5, None, (Endpoint("INTERNAL", "127.0.0.1", other.port),)))], None, 2)
    third = await peers.get(2)
    assert third.port == other.port and second.closed
    peers.close()
    await other.stop()


async def test_peers_current_is_the_open_connection_while_the_image_still_advertises_its_endpoint(controller):
    """`current` is get's steady state without a coroutine: the open connection, None once it closed or the
    broker re-registered elsewhere (then get reopens), and the same again for an unrelated change to the record."""
    image = _peer_image(controller.port)
    peers = InterBrokerConnections(node_id=1, image=image, listener="INTERNAL", secret=SECRET, max_frame_bytes=1 << 20)
    assert peers.current(2) is None                  # nothing opened yet
    conn = await peers.get(2)
    assert peers.current(2) is conn and peers.current(2) is conn
    image.apply([(1, BrokerRecord(2, 7, "rack-a", (Endpoint("INTERNAL", "127.0.0.1", controller.port),)))], None, 2)
    assert peers.current(2) is conn                  # a new record, the same endpoint
    image.apply([(2, BrokerRecord(2, 8, None, (Endpoint("INTERNAL", "127.0.0.1", controller.port + 1),)))], None, 3)
    assert peers.current(2) is None                  # moved: get reopens
    image.apply([(3, BrokerRecord(2, 9, None, (Endpoint("INTERNAL", "127.0.0.1", controller.port),)))], None, 4)
    assert peers.current(2) is conn
    conn.close()
    assert peers.current(2) is None
    reopened = await peers.get(2)
    assert reopened is not conn and peers.current(2) is reopened
    peers.drop(2)
    assert peers.current(2) is None
    peers.close()


async def test_peers_without_an_endpoint_on_the_listener_is_broker_not_available(controller):
    image = _peer_image(controller.port, listener="OTHER")
    peers = InterBrokerConnections(node_id=1, image=image, listener="INTERNAL", secret=SECRET, max_frame_bytes=1 << 20)
    with pytest.raises(KafkaError) as e:
        await peers.get(2)
    assert e.value.code == ErrorCode.BROKER_NOT_AVAILABLE
    with pytest.raises(KafkaError) as e:
        await peers.get(9)
    assert e.value.code == ErrorCode.BROKER_NOT_AVAILABLE
    peers.close()


async def test_peers_with_a_wrong_secret_fail_with_sasl_authentication_failed(controller):
    image = _peer_image(controller.port)
    peers = InterBrokerConnections(node_id=1, image=image, listener="INTERNAL", secret="wrong", max_frame_bytes=1 << 20)
    with pytest.raises(KafkaError) as e:
        await peers.get(2)
    assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    peers.close()
