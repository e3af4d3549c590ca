"""The controller over real TCP on 127.0.0.1: brokers here are protocol
clients (minibroker.net.connection.Connection) speaking the wire contract,
not mocks of our broker."""
from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
import subprocess
import sys
from typing import Any

from minibroker.config import Config
from minibroker.controller.server import ControllerServer
from minibroker.errors import ErrorCode
from minibroker.net.connection import Connection
from minibroker.protocol.api import ApiKey
from minibroker.testing import wait

SECRET = "controller-test-secret"
DEADLINE_S = 20.0
until = functools.partial(wait.until, timeout_s=DEADLINE_S)


def config(tmp_path, **extra: str) -> Config:
    props = {"listeners": "CONTROLLER://127.0.0.1:0", "metadata.log.dir": str(tmp_path / "meta"),
             "node.id": "0", "minibroker.cluster.secret": SECRET,
             "broker.heartbeat.interval.ms": "100", "broker.session.timeout.ms": "800"}
    props.update(extra)
    return Config.load(overrides=props, environ={})


class FakeBroker:
    """A broker-side protocol client: registers, heartbeats, follows the metadata log.

    Like a real broker it follows metadata on its own connection: responses on
    one connection come back in request order, so a parked long-poll would
    hold back heartbeat responses."""

    def __init__(self, port: int, broker_id: int, rack: str | None = None) -> None:
        self.port, self.id, self.rack = port, broker_id, rack
        self.epoch = -1
        self.next_offset = 0
        self.brokers: dict[int, dict] = {}
        self.partitions: dict[tuple[str, int], dict] = {}
        self.conn: Connection | None = None
        self.meta_conn: Connection | None = None
        self.tasks: list[asyncio.Task] = []
        self.fetches = 0

    async def connect(self) -> FakeBroker:
        self.conn = await Connection.open("127.0.0.1", self.port, client_id=f"broker-{self.id}", secret=SECRET)
        self.meta_conn = await Connection.open("127.0.0.1", self.port, client_id=f"broker-{self.id}-metadata",
                                               secret=SECRET)
        return self

    async def call(self, api: ApiKey, body: dict[str, Any], timeout_ms: int = 10_000) -> dict[str, Any]:
        assert self.conn is not None
        return await self.conn.request(api, body, timeout_ms=timeout_ms)

    async def register(self, prev: int = -1, incarnation: str | None = None) -> dict:
        r = await self.call(ApiKey.BROKER_REGISTRATION, {
            "broker_id": self.id, "incarnation_id": incarnation or f"inc-{self.id}-{os.urandom(4).hex()}",
            "rack": self.rack, "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 19000 + self.id}],
            "previous_broker_epoch": prev})
        assert r["error"] == 0, r
        self.epoch = r["broker_epoch"]
        return r

    async def heartbeat(self, **kw: Any) -> dict:
        return await self.call(ApiKey.BROKER_HEARTBEAT, {"broker_id": self.id, "broker_epoch": self.epoch,
                                                         "current_metadata_offset": self.next_offset - 1, **kw})

    def apply(self, resp: dict) -> None:
        if resp.get("snapshot") is not None:
            self.brokers, self.partitions = {}, {}
            for r in resp["snapshot"]:
                self._apply_one(r)
        for r in resp["records"]:
            assert r["offset"] == self.next_offset, (r, self.next_offset)
            self._apply_one(r)
            self.next_offset += 1
        self.next_offset = resp["next_offset"]

    def _apply_one(self, r: dict) -> None:
        if r["type"] == "broker":
            self.brokers[r["broker_id"]] = r
        elif r["type"] == "partition":
            self.partitions[(r["topic"], r["partition"])] = r

    async def fetch(self, max_wait_ms: int = 500) -> dict:
        assert self.meta_conn is not None
        resp = await self.meta_conn.request(ApiKey.METADATA_FETCH, {
            "broker_id": self.id, "from_offset": self.next_offset, "max_wait_ms": max_wait_ms},
            timeout_ms=max_wait_ms + 10_000)
        assert resp["error"] == 0, resp
        self.fetches += 1
        self.apply(resp)
        return resp

    def run(self) -> None:
        async def beat() -> None:
            while True:
                await self.heartbeat()
                await asyncio.sleep(0.05)      # the scripted broker's heartbeat interval, not a synchronisation

        async def follow() -> None:
            while True:
                await self.fetch(2000)
        self.tasks = [asyncio.ensure_future(beat()), asyncio.ensure_future(follow())]

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def close(self) -> None:
        await self.stop()
        for c in (self.conn, self.meta_conn):
            if c is not None:
                c.close()


async def start(tmp_path, **extra: str) -> tuple[ControllerServer, int]:
    server = ControllerServer(config(tmp_path, **extra))
    await server.start()
    return server, server.addresses["CONTROLLER"][1]


async def running_brokers(port: int, *ids: int) -> list[FakeBroker]:
    out = []
    for b in ids:
        fb = await FakeBroker(port, b).connect()
        await fb.register()
        fb.run()
        out.append(fb)
    for fb in out:
        await until(lambda fb=fb: fb.brokers.get(fb.id, {}).get("fenced") is False, f"broker {fb.id} unfenced")
    return out


async def test_register_heartbeat_create_topic_and_follow_metadata_over_tcp(tmp_path):
    server, port = await start(tmp_path)
    b1, b2 = await running_brokers(port, 1, 2)
    try:
        r = await b1.call(ApiKey.CREATE_TOPICS, {"topics": [{"topic": "orders", "num_partitions": 2,
                                                             "replication_factor": 2}]})
        assert r["topics"][0]["error"] == 0
        await until(lambda: ("orders", 1) in b2.partitions, "partition records reach broker 2")
        p0 = b2.partitions[("orders", 0)]
        assert sorted(p0["replicas"]) == [1, 2] and p0["isr"] == p0["replicas"] and p0["reason"] == "created"
        # A fresh follower from offset 0 gets the image as a snapshot.
        snap = await b1.call(ApiKey.METADATA_FETCH, {"broker_id": 1, "from_offset": 0})
        assert snap["snapshot"] and snap["records"] == [] and snap["next_offset"] == b2.next_offset
        # AlterPartition from the leader: the parked long-polls wake with the new partition record.
        leader = p0["leader"]
        follower = 3 - leader
        ap = await b1.call(ApiKey.ALTER_PARTITION, {"broker_id": leader,
                                                    "broker_epoch": (b1 if leader == 1 else b2).epoch,
                                                    "topics": [{"topic": "orders", "partitions": [{
                                                        "partition": 0, "leader_epoch": 0, "partition_epoch": 0,
                                                        "new_isr_with_epochs": [{"broker_id": leader,
                                                                                 "broker_epoch": -1}]}]}]})
        part = ap["topics"][0]["partitions"][0]
        assert part["error"] == 0 and part["isr"] == [leader] and part["partition_epoch"] == 1
        await until(lambda: b2.partitions[("orders", 0)]["partition_epoch"] == 1, "shrink reaches broker 2")
        assert follower not in b2.partitions[("orders", 0)]["isr"]
        # DescribeCluster lists both brokers unfenced.
        d = await b1.call(ApiKey.DESCRIBE_CLUSTER, {})
        assert d["cluster_id"] and [(b["node_id"], b["fenced"]) for b in d["brokers"]] == [(1, False), (2, False)]
    finally:
        await b1.close()
        await b2.close()
        await server.stop()


async def test_metadata_fetch_long_polls_until_a_new_record_is_durable(tmp_path):
    server, port = await start(tmp_path)
    (b1,) = await running_brokers(port, 1)
    watcher = await Connection.open("127.0.0.1", port, secret=SECRET)
    other = await FakeBroker(port, 7).connect()
    try:
        end = (await watcher.request(ApiKey.METADATA_FETCH, {"from_offset": 0}))["next_offset"]
        parked = asyncio.ensure_future(watcher.request(
            ApiKey.METADATA_FETCH, {"from_offset": end, "max_wait_ms": 30_000}, timeout_ms=40_000))
        await until(lambda: server.mlog._record_waiters, "the fetch to park")
        assert not parked.done()
        await other.register()
        resp = await asyncio.wait_for(parked, DEADLINE_S)
        assert [(r["offset"], r["broker_id"]) for r in resp["records"]] == [(end, 7)]
        assert resp["next_offset"] == end + 1
    finally:
        watcher.close()
        await b1.close()
        await other.close()
        await server.stop()


async def test_silent_broker_is_fenced_and_leadership_moves(tmp_path):
    server, port = await start(tmp_path)
    b1, b2 = await running_brokers(port, 1, 2)
    watcher = await Connection.open("127.0.0.1", port)
    try:
        await b1.call(ApiKey.CREATE_TOPICS, {"topics": [{"topic": "t", "assignments": [[2, 1]]}]})
        await until(lambda: ("t", 0) in b1.partitions, "topic reaches broker 1")
        await b2.stop()
        await until(lambda: b1.brokers[2]["fenced"], "broker 2 fenced")
        p = b1.partitions[("t", 0)]
        assert (p["leader"], p["isr"], p["leader_epoch"]) == (1, [1], 1)
        assert re.match(r"broker 2 fenced: no heartbeat for \d+ ms \(broker.session.timeout.ms=800\)", p["reason"])
        ev = await watcher.request(ApiKey.EVENTS, {"from_seq": 0, "max_wait_ms": 0})
        kinds = [e["kind"] for e in ev["events"]]
        assert "fenced" in kinds and "election" in kinds
        # Broker 2 comes back with the same epoch: once caught up (it is) it is unfenced.
        b2.run()
        await until(lambda: b1.brokers[2]["fenced"] is False, "broker 2 unfenced")
    finally:
        watcher.close()
        await b1.close()
        await b2.close()
        await server.stop()


async def test_restart_reloads_metadata_and_keeps_broker_epochs(tmp_path):
    server, port = await start(tmp_path)
    b1, b2 = await running_brokers(port, 1, 2)
    await b1.call(ApiKey.CREATE_TOPICS, {"topics": [{"topic": "t", "num_partitions": 3, "replication_factor": 2,
                                                     "configs": {"min.insync.replicas": "2"}}]})
    await until(lambda: len(b1.partitions) == 3, "topic reaches broker 1")
    before = {k: dict(v) for k, v in b1.partitions.items()}
    end, epochs = b1.next_offset, (b1.epoch, b2.epoch)
    await b1.close()
    await b2.close()
    await server.stop()

    server, port = await start(tmp_path)
    try:
        fresh = await FakeBroker(port, 1).connect()
        await fresh.fetch()
        assert fresh.partitions == before and fresh.next_offset == end
        cont = await fresh.call(ApiKey.METADATA_FETCH, {"broker_id": 1, "from_offset": end, "max_wait_ms": 0})
        assert cont["records"] == [] and cont["snapshot"] is None
        fresh.epoch = epochs[0]
        hb = await fresh.heartbeat()
        assert hb["error"] == 0 and hb["is_fenced"] is False
        r = await fresh.register(prev=epochs[0])
        assert r["broker_epoch"] > max(epochs)
        fresh.epoch = epochs[0]
        assert (await fresh.heartbeat())["error"] == ErrorCode.STALE_BROKER_EPOCH
        dup = await fresh.call(ApiKey.CREATE_TOPICS, {"topics": [{"topic": "t"}]})
        assert dup["topics"][0]["error"] == ErrorCode.TOPIC_ALREADY_EXISTS
        await fresh.close()
    finally:
        await server.stop()


async def test_privileged_apis_need_the_cluster_secret(tmp_path):
    server, port = await start(tmp_path)
    plain = await Connection.open("127.0.0.1", port)
    try:
        for api, body in [(ApiKey.BROKER_REGISTRATION, {"broker_id": 1, "incarnation_id": "x", "rack": None,
                                                        "listeners": []}),
                          (ApiKey.CREATE_TOPICS, {"topics": [{"topic": "t"}]}),
                          (ApiKey.METADATA_FETCH, {"from_offset": 0})]:
            assert (await plain.request(api, body))["error"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        v = await plain.request(ApiKey.API_VERSIONS, {})
        assert (v["role"], v["state"], v["node_id"]) == ("controller", "RUNNING", 0)
    finally:
        plain.close()
        await server.stop()


async def test_bad_requests_get_errors_and_the_controller_keeps_serving(tmp_path):
    server, port = await start(tmp_path)
    (b1,) = await running_brokers(port, 1)
    try:
        r = await b1.call(ApiKey.BROKER_REGISTRATION, {"broker_id": 2, "incarnation_id": "x", "rack": None,
                                                       "listeners": []})
        assert r["error"] == ErrorCode.INVALID_REQUEST
        r = await b1.call(ApiKey.ELECT_LEADERS, {"election_type": 9, "topics": None})
        assert r["error"] == ErrorCode.INVALID_REQUEST
        r = await b1.call(ApiKey.CREATE_TOPICS, {"topics": [{"topic": "t", "replication_factor": 5}]})
        assert r["topics"][0]["error"] == ErrorCode.INVALID_REPLICATION_FACTOR
        assert (await b1.heartbeat())["error"] == 0
    finally:
        await b1.close()
        await server.stop()


def test_run_serves_until_sigterm_and_exits_cleanly(tmp_path):
    env = {**os.environ, "MINIBROKER_LISTENERS": "CONTROLLER://127.0.0.1:0",
           "MINIBROKER_METADATA_LOG_DIR": str(tmp_path / "meta"), "MINIBROKER_NODE_ID": "3",
           "MINIBROKER_CLUSTER_SECRET": SECRET}
    proc = subprocess.Popen([sys.executable, "-c",
                             "from minibroker.config import Config\n"
                             "from minibroker.controller.main import run\n"
                             "run(Config.load())"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        assert proc.stderr is not None
        for line in proc.stderr:
            m = re.search(r"listening on CONTROLLER://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        assert port, "controller never logged its listener"

        async def probe() -> dict:
            c = await Connection.open("127.0.0.1", port)
            try:
                return await c.request(ApiKey.API_VERSIONS, {})
            finally:
                c.close()
        v = asyncio.run(probe())
        assert v["node_id"] == 3 and v["role"] == "controller"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_metadata_log_write_failure_stops_the_controller_and_fails_the_request(tmp_path):
    server, port = await start(tmp_path)
    b1 = await FakeBroker(port, 1).connect()
    try:
        ro = os.open(os.devnull, os.O_RDONLY)
        os.dup2(ro, server.mlog._fd)     # every later write to the log fails with EBADF
        os.close(ro)
        r = await b1.call(ApiKey.BROKER_REGISTRATION, {"broker_id": 1, "incarnation_id": "x", "rack": None,
                                                       "listeners": [{"name": "P", "host": "h", "port": 1}]})
        assert r["error"] == ErrorCode.KAFKA_STORAGE_ERROR
        await asyncio.wait_for(server.stopped.wait(), DEADLINE_S)
        assert server.fatal is not None
    finally:
        await b1.close()
        await server.stop()


async def test_records_applied_before_a_core_failure_are_still_persisted(tmp_path):
    from minibroker.metadata import TopicRecord
    server, port = await start(tmp_path)
    (b1,) = await running_brokers(port, 1)
    core = server.core

    def broken(now_ms, topics, validate_only):
        core._begin(now_ms)
        core._append(TopicRecord("half", "id", 1, {}))
        raise RuntimeError("bug in the middle of a decision")

    server.core.create_topics = broken  # type: ignore[method-assign]
    try:
        r = await b1.call(ApiKey.CREATE_TOPICS, {"topics": [{"topic": "half"}]})
        assert r["error"] == ErrorCode.UNKNOWN_SERVER_ERROR
        assert server.mlog.durable_end == server.mlog.end == core.next_offset
        assert server.mlog.read(core.next_offset - 1, 1)[0]["topic"] == "half"
    finally:
        await b1.close()
        await server.stop()
