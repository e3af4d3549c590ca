"""The Kafka listener's APIs: each Kafka request answered by the broker's own paths.

Owns: translating each served Kafka request (decoded by minibroker.kafka.codec)
into the body the broker's msgpack handlers take, calling those same
handlers (so Produce, Fetch and ListOffsets go through the one replica
manager, purgatory and leader core; CreateTopics and ElectLeaders through
the one controller forward), and translating their answers back into
Kafka's response fields; whole-request failures turned into Kafka's
per-partition error responses; the APIs the msgpack path has no twin for
(OffsetForLeaderEpoch, DescribeConfigs, InitProducerId), answered from the
metadata image and the partition's epoch cache; the group APIs through the
msgpack listener's group handlers (minibroker.coordinator.handlers).

Must not know: sockets or framing (minibroker.kafka.server), any
replication rule (the replica manager and leader cores decide).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from minibroker.broker.partition import NONE
from minibroker.config import Config
from minibroker.coordinator.records import OFFSETS_TOPIC
from minibroker.dynamic_config import ConfigSource, ResourceType
from minibroker.errors import ErrorCode, KafkaError
from minibroker.kafka import codec
from minibroker.kafka.codec import Api, CodecError
from minibroker.kafka.produce_codec import decode_produce, encode_produce_response
from minibroker.kafka.server import ConnectionAbort, KafkaConnection
from minibroker.net.server import RequestContext
from minibroker.protocol.api import ApiKey

log = logging.getLogger("minibroker.kafka")

MsgpackHandler = Callable[[RequestContext, dict], Awaitable[dict | None]]

# Frames above this size are decoded on a worker thread, so one large
# request never holds the event loop (the interpreter switches threads
# every few milliseconds while kafka-python's decoder runs).
DECODE_OFF_LOOP_BYTES = 64 * 1024
# Responses carrying more record bytes than this are encoded off the loop.
ENCODE_OFF_LOOP_BYTES = 1024 * 1024
# A bound on the topic-partitions one request may name (Kafka has none; this
# keeps the per-request Python work of any single request bounded).
MAX_PARTITIONS_PER_REQUEST = 20_000

_SOURCE_DEFAULT = 5          # Kafka's ConfigSource DEFAULT_CONFIG
_RESOURCE_TOPIC = 2
_NO_AUTHORIZED_OPERATIONS = None      # encodes as INT32_MIN: "not requested / not provided"


class Broker(Protocol):
    """What the Kafka APIs need from the broker process (BrokerServer)."""
    node_id: int
    config: Config
    image: Any
    replica_manager: Any

    def msgpack_handler(self, api: ApiKey) -> MsgpackHandler | None: ...
    async def until_serving(self) -> None: ...
    def broker_epoch(self) -> int: ...


@dataclass
class _Request:
    api: Api
    version: int
    correlation_id: int
    client_id: str
    body: Any


class KafkaApis:
    """Invariant: every answer a client gets about partitions comes from the
    same handler (and so the same replica manager state) the msgpack
    listener would have used for the same question."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._routes: dict[Api, Callable[[KafkaConnection, _Request], Awaitable[dict | None]]] = {
            Api.PRODUCE: self._produce,
            Api.FETCH: self._fetch,
            Api.LIST_OFFSETS: self._list_offsets,
            Api.DELETE_RECORDS: self._delete_records,
            Api.METADATA: self._metadata,
            Api.FIND_COORDINATOR: self._find_coordinator,
            Api.JOIN_GROUP: self._join_group,
            Api.SYNC_GROUP: self._sync_group,
            Api.HEARTBEAT: self._heartbeat,
            Api.LEAVE_GROUP: self._leave_group,
            Api.OFFSET_COMMIT: self._offset_commit,
            Api.OFFSET_FETCH: self._offset_fetch,
            Api.LIST_GROUPS: self._list_groups,
            Api.DESCRIBE_GROUPS: self._describe_groups,
            Api.DELETE_GROUPS: self._delete_groups,
            Api.OFFSET_DELETE: self._offset_delete,
            Api.CREATE_TOPICS: self._create_topics,
            Api.DELETE_TOPICS: self._delete_topics,
            Api.INIT_PRODUCER_ID: self._init_producer_id,
            Api.OFFSET_FOR_LEADER_EPOCH: self._offset_for_leader_epoch,
            Api.DESCRIBE_CONFIGS: self._describe_configs,
            Api.ELECT_LEADERS: self._elect_leaders,
            Api.DESCRIBE_CLUSTER: self._describe_cluster,
            Api.CREATE_PARTITIONS: self._create_partitions,
            Api.INCREMENTAL_ALTER_CONFIGS: self._incremental_alter_configs,
            Api.ALTER_CONFIGS: self._alter_configs,
            Api.ALTER_PARTITION_REASSIGNMENTS: self._alter_partition_reassignments,
            Api.DESCRIBE_LOG_DIRS: self._describe_log_dirs,
            Api.LIST_PARTITION_REASSIGNMENTS: self._list_partition_reassignments,
        }

    # ------------------------------------------------------------------ entry

    def advertised(self) -> list[dict[str, int]]:
        """ApiVersions' keys: DeleteTopics only once the broker can forward it."""
        keys = codec.api_versions_keys()
        delete = getattr(ApiKey, "DELETE_TOPICS", None)
        if delete is None or self.broker.msgpack_handler(delete) is None:
            keys = [k for k in keys if k["api_key"] != Api.DELETE_TOPICS]
        return keys

    async def handle(self, conn: KafkaConnection, frame: bytes) -> bytes | None:
        """One request frame in, the framed response (or None) out."""
        try:
            api_key, version, cid = codec.peek_header(frame)
        except CodecError as exc:
            raise ConnectionAbort(str(exc)) from None
        if api_key == Api.API_VERSIONS:
            return self._api_versions(frame, version, cid)
        api = codec.served(api_key, version)
        if api is None:
            # Kafka closes the connection on an API or version it does not serve
            # (clients only send what ApiVersions advertised).
            raise ConnectionAbort(f"unsupported request: API key {api_key} version {version}")
        fast = decode_produce(version, frame) if api == Api.PRODUCE else None
        if fast is not None:
            header, body = fast
        else:
            try:
                if len(frame) > DECODE_OFF_LOOP_BYTES:
                    header, body = await asyncio.to_thread(codec.decode_request, api, version, frame)
                else:
                    header, body = codec.decode_request(api, version, frame)
            except CodecError as exc:
                raise ConnectionAbort(str(exc)) from None
        req = _Request(api, version, cid, header.client_id or "", body)
        await self.broker.until_serving()
        out = await self._routes[api](conn, req)
        if out is None:
            return None
        if api == Api.PRODUCE:
            framed = encode_produce_response(version, cid, out)
            if framed is not None:
                return framed
        size = out.pop("_record_bytes", 0)
        if size > ENCODE_OFF_LOOP_BYTES:
            return await asyncio.to_thread(codec.encode_response, api, version, cid, out)
        return codec.encode_response(api, version, cid, out)

    def _api_versions(self, frame: bytes, version: int, cid: int) -> bytes:
        lo, hi = codec.SERVED[Api.API_VERSIONS]
        if not lo <= version <= hi:
            return codec.encode_response(Api.API_VERSIONS, 0, cid, {
                "error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": self.advertised()})
        try:
            codec.decode_request(Api.API_VERSIONS, version, frame)
        except CodecError:
            return codec.encode_response(Api.API_VERSIONS, 0, cid, {
                "error_code": int(ErrorCode.INVALID_REQUEST), "api_keys": self.advertised()})
        return codec.encode_response(Api.API_VERSIONS, version, cid, {
            "error_code": 0, "api_keys": self.advertised(), "throttle_time_ms": 0})

    def _ctx(self, conn: KafkaConnection, req: _Request, api: ApiKey) -> RequestContext:
        return RequestContext(conn, api, 0, req.correlation_id, req.client_id)  # type: ignore[arg-type]

    async def _call(self, conn: KafkaConnection, req: _Request, api: ApiKey, body: dict) -> dict | None:
        fn = self.broker.msgpack_handler(api)
        if fn is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"{api.name} is not served by this broker")
        resp = await fn(self._ctx(conn, req, api), body)
        if resp is not None and resp.get("error", 0) and "topics" not in resp and "results" not in resp:
            raise KafkaError(resp["error"], resp.get("message", ""))
        return resp

    @staticmethod
    def _check_size(n: int) -> None:
        if n > MAX_PARTITIONS_PER_REQUEST:
            raise ConnectionAbort(f"request names {n} partitions, above the bound of {MAX_PARTITIONS_PER_REQUEST}")

    @classmethod
    def _topic_indexes(cls, topics: Any) -> list[dict] | None:
        """A nullable list of (name, partition_indexes) as the msgpack side's [{topic, partitions}], size-checked."""
        if topics is None:
            return None
        return cls._sized([{"topic": t.name, "partitions": list(t.partition_indexes)} for t in topics])

    @classmethod
    def _topic_partitions(cls, topics: Any) -> list[dict] | None:
        """The same for a nullable list of (topic, partitions), DescribeLogDirs' field names."""
        if topics is None:
            return None
        return cls._sized([{"topic": t.topic, "partitions": list(t.partitions)} for t in topics])

    @classmethod
    def _sized(cls, topics: list[dict]) -> list[dict]:
        cls._check_size(sum(len(t["partitions"]) for t in topics))
        return topics

    # ------------------------------------------------------------------ Produce

    async def _produce(self, conn: KafkaConnection, req: _Request) -> dict | None:
        r = req.body
        refused: dict[tuple[str, int], str] = {}
        topics = []
        for t in r.topic_data:
            parts = []
            for p in t.partition_data:
                problem = _single_batch_problem(p.records, req.version)
                if problem:
                    refused[(t.name, p.index)] = problem
                else:
                    parts.append({"partition": p.index, "records": p.records})
            topics.append({"topic": t.name, "partitions": parts})
        self._check_size(sum(len(t["partitions"]) for t in topics) + len(refused))
        body = {"acks": r.acks, "timeout_ms": r.timeout_ms, "topics": [t for t in topics if t["partitions"]]}
        if refused and r.acks == 0:
            raise ConnectionAbort("acks=0 produce with an invalid record set: " + next(iter(refused.values())))
        try:
            resp = await self._call(conn, req, ApiKey.PRODUCE, body) if body["topics"] else {"topics": []}
        except KafkaError as exc:
            if r.acks == 0:
                raise ConnectionAbort(f"acks=0 produce failed: {exc}") from None
            resp = {"topics": [{"topic": t["topic"], "partitions": [
                {"partition": p["partition"], "error": int(exc.code), "base_offset": -1, "log_start_offset": -1,
                 "message": exc.message} for p in t["partitions"]]} for t in body["topics"]]}
        if resp is None:
            return None
        answered = {(t["topic"], p["partition"]): p for t in resp["topics"] for p in t["partitions"]}
        return {"throttle_time_ms": 0, "responses": [
            {"name": t.name, "partition_responses": [
                _produce_partition(p.index, answered.get((t.name, p.index)), refused.get((t.name, p.index)))
                for p in t.partition_data]}
            for t in r.topic_data]}

    # ------------------------------------------------------------------ Fetch

    async def _fetch(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        v = req.version
        replica_id = r.replica_id if v <= 14 else -1
        topics = [{"topic": t.topic, "partitions": [
            {"partition": p.partition, "fetch_offset": p.fetch_offset,
             "current_leader_epoch": p.current_leader_epoch if v >= 9 else -1,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": p.partition_max_bytes}
            for p in t.partitions]} for t in r.topics]
        self._check_size(sum(len(t["partitions"]) for t in topics))
        top_error = 0
        if replica_id >= 0:
            # F: a Kafka listener is a client listener; replicas fetch over the
            # authenticated inter-broker listener.
            top_error = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        elif v >= 7 and r.session_id != 0:
            top_error = int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)   # we never hand out fetch sessions
        if top_error:
            return {"throttle_time_ms": 0, "error_code": top_error, "session_id": 0, "responses": [
                {"topic": t["topic"], "partitions": [self._fetch_partition_error(p["partition"], top_error)
                                                     for p in t["partitions"]]} for t in topics]}
        body = {"replica_id": -1, "broker_epoch": -1, "max_wait_ms": r.max_wait_ms, "min_bytes": r.min_bytes,
                "max_bytes": r.max_bytes, "rack_id": (r.rack_id or "") if v >= 11 else "", "topics": topics}
        try:
            resp = await self._call(conn, req, ApiKey.FETCH, body)
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
                {"topic": t["topic"], "partitions": [self._fetch_partition_error(p["partition"], int(exc.code))
                                                     for p in t["partitions"]]} for t in topics]}
        assert resp is not None
        read_committed = r.isolation_level == 1
        size = 0
        out_topics = []
        for t in resp["topics"]:
            parts = []
            for p in t["partitions"]:
                records = p["records"] or b""
                size += len(records)
                entry: dict[str, Any] = {
                    "partition_index": p["partition"], "error_code": p["error"],
                    "high_watermark": p["high_watermark"], "last_stable_offset": p["last_stable_offset"],
                    "log_start_offset": p["log_start_offset"],
                    "aborted_transactions": [] if read_committed else None,
                    "preferred_read_replica": p["preferred_read_replica"],
                    # never null: librdkafka rejects a partition whose records are null
                    "records": bytes(records) if not isinstance(records, bytes) else records,
                }
                if p.get("diverging_epoch") is not None:
                    entry["diverging_epoch"] = p["diverging_epoch"]
                if p.get("current_leader") is not None:
                    entry["current_leader"] = p["current_leader"]
                parts.append(entry)
            out_topics.append({"topic": t["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": out_topics,
                "_record_bytes": size}

    @staticmethod
    def _fetch_partition_error(partition: int, code: int) -> dict:
        return {"partition_index": partition, "error_code": code, "high_watermark": -1,
                "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                "preferred_read_replica": -1, "records": b""}

    # ------------------------------------------------------------------ ListOffsets

    async def _list_offsets(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        v = req.version
        topics = [{"topic": t.name, "partitions": [
            {"partition": p.partition_index, "timestamp": p.timestamp,
             "current_leader_epoch": p.current_leader_epoch if v >= 4 else -1} for p in t.partitions]}
            for t in r.topics]
        self._check_size(sum(len(t["partitions"]) for t in topics))
        try:
            if r.replica_id >= 0:
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                 "ListOffsets as a replica is not served on a Kafka listener")
            resp = await self._call(conn, req, ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": topics})
            assert resp is not None
        except KafkaError as exc:
            resp = {"topics": [{"topic": t["topic"], "partitions": [
                {"partition": p["partition"], "error": int(exc.code), "offset": -1, "timestamp": -1,
                 "leader_epoch": -1} for p in t["partitions"]]} for t in topics]}
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["topic"], "partitions": [
                {"partition_index": p["partition"], "error_code": p["error"], "timestamp": p["timestamp"],
                 "offset": p["offset"], "leader_epoch": p["leader_epoch"]} for p in t["partitions"]]}
            for t in resp["topics"]]}

    async def _delete_records(self, conn: KafkaConnection, req: _Request) -> dict:
        """Sent by the admin client to each partition's leader (kafka-delete-records, AdminClient.deleteRecords)."""
        r = req.body
        topics = [{"topic": t.name, "partitions": [{"partition": p.partition_index, "offset": p.offset}
                                                   for p in t.partitions]} for t in r.topics]
        self._check_size(sum(len(t["partitions"]) for t in topics))
        try:
            resp = await self._call(conn, req, ApiKey.DELETE_RECORDS, {"topics": topics, "timeout_ms": r.timeout_ms})
            assert resp is not None
        except KafkaError as exc:
            resp = {"topics": [{"topic": t["topic"], "partitions": [
                {"partition": p["partition"], "low_watermark": -1, "error": int(exc.code)} for p in t["partitions"]]}
                for t in topics]}
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["topic"], "partitions": [
                {"partition_index": p["partition"], "low_watermark": p["low_watermark"], "error_code": p["error"]}
                for p in t["partitions"]]} for t in resp["topics"]]}

    # ------------------------------------------------------------------ Metadata

    async def _metadata(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        names: list[str] | None
        if r.topics is None or (req.version == 0 and not r.topics):
            names = None
        else:
            names = [t.name for t in r.topics if t.name is not None]
            self._check_size(len(names))
        resp = await self._call(conn, req, ApiKey.METADATA, {"topics": names})
        assert resp is not None
        auto = req.version < 4 or bool(r.allow_auto_topic_creation)
        if names and auto and self.broker.config.get_bool("auto.create.topics.enable"):
            missing = [t["topic"] for t in resp["topics"] if t["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            if missing:
                failed = await self._auto_create(conn, req, missing)
                resp = await self._call(conn, req, ApiKey.METADATA, {"topics": names})
                assert resp is not None
                for t in resp["topics"]:
                    if t["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and t["topic"] in failed:
                        t["error"] = failed[t["topic"]]     # e.g. INVALID_TOPIC_EXCEPTION, as Kafka answers
        return self._kafka_metadata(resp)

    async def _auto_create(self, conn: KafkaConnection, req: _Request, topics: list[str]) -> dict[str, int]:
        """auto.create.topics.enable: unknown topics a Metadata request names are
        created with num.partitions and default.replication.factor, through the
        same CreateTopics path (Kafka answers LEADER_NOT_AVAILABLE and creates in
        the background; here the answer waits for the creation, up to 5 s).
        Returns the error of each topic that could not be created."""
        body = {"topics": [{"topic": t, "num_partitions": self.broker.config.get_int("num.partitions"),
                            "replication_factor": self.broker.config.get_int("default.replication.factor")}
                           for t in topics], "timeout_ms": 5000, "validate_only": False}
        try:
            resp = await self._call(conn, req, ApiKey.CREATE_TOPICS, body)
        except KafkaError as exc:
            log.info("auto-creating %s failed: %s", ", ".join(topics), exc)
            return {}
        failed: dict[str, int] = {}
        for t in (resp or {}).get("topics", []):
            if t.get("error", 0) and t["error"] != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.info("auto-creating topic %s failed: %s", t["topic"], t.get("message", t["error"]))
                if t["error"] == ErrorCode.INVALID_TOPIC_EXCEPTION:
                    failed[t["topic"]] = int(t["error"])
        return failed

    def _kafka_metadata(self, resp: dict) -> dict:
        topics = []
        for t in resp["topics"]:
            topics.append({
                "error_code": t["error"], "name": t["topic"],
                "topic_id": codec.topic_uuid(t.get("topic_id") or ""),
                "is_internal": t["topic"] == OFFSETS_TOPIC,
                "partitions": [{"error_code": p["error"], "partition_index": p["partition"],
                                "leader_id": p["leader"], "leader_epoch": p["leader_epoch"],
                                "replica_nodes": p["replicas"], "isr_nodes": p["isr"],
                                "offline_replicas": p["offline_replicas"]} for p in t["partitions"]],
                "authorized_operations": _NO_AUTHORIZED_OPERATIONS,
            })
        return {"throttle_time_ms": 0,
                "brokers": [{"node_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                            for b in resp["brokers"]],
                "cluster_id": resp["cluster_id"] or None,
                # As Kafka in KRaft mode: the controller is not reachable by clients,
                # so admin requests that go "to the controller" go to a broker (this one).
                "controller_id": self.broker.node_id,
                "topics": topics, "authorized_operations": _NO_AUTHORIZED_OPERATIONS}

    async def _describe_cluster(self, conn: KafkaConnection, req: _Request) -> dict:
        if req.version >= 1 and req.body.endpoint_type not in (1,):
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": "only broker endpoints (endpoint_type 1) are served", "endpoint_type": 1,
                    "cluster_id": "", "controller_id": -1, "brokers": []}
        resp = await self._call(conn, req, ApiKey.METADATA, {"topics": []})
        assert resp is not None
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
                "cluster_id": resp["cluster_id"], "controller_id": self.broker.node_id,
                "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                            for b in resp["brokers"]],
                "authorized_operations": _NO_AUTHORIZED_OPERATIONS}

    # ------------------------------------------------------------------ groups and producers

    async def _group_call(self, conn: KafkaConnection, req: _Request, api: ApiKey, body: dict) -> dict:
        """The msgpack listener's group handler (minibroker.coordinator.handlers), body errors kept."""
        fn = self.broker.msgpack_handler(api)
        if fn is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{api.name} is not served by this broker")
        resp = await fn(self._ctx(conn, req, api), body)
        assert resp is not None
        return resp

    async def _find_coordinator(self, conn: KafkaConnection, req: _Request) -> dict:
        """v0-3: one key; v4+ (KIP-699): a batch of coordinator keys, each answered."""
        r = req.body
        keys = list(r.coordinator_keys or []) if req.version >= 4 else [r.key]
        key_type = r.key_type if req.version >= 1 else 0
        self._check_size(len(keys))
        answers = []
        for key in keys:
            try:
                a = await self._group_call(conn, req, ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type})
            except KafkaError as exc:
                a = {"error": int(exc.code), "message": exc.message, "node_id": -1, "host": "", "port": -1}
            answers.append({"key": key, "node_id": a["node_id"], "host": a["host"], "port": a["port"],
                            "error_code": a["error"], "error_message": a["message"] or None})
        if req.version >= 4:
            return {"throttle_time_ms": 0, "coordinators": answers}
        a = answers[0]
        return {"throttle_time_ms": 0, "error_code": a["error_code"], "error_message": a["error_message"],
                "node_id": a["node_id"], "host": a["host"], "port": a["port"]}

    async def _join_group(self, conn: KafkaConnection, req: _Request) -> dict:
        r, v = req.body, req.version
        body = {"group_id": r.group_id, "member_id": r.member_id or "",
                "group_instance_id": r.group_instance_id if v >= 5 else None,
                "session_timeout_ms": r.session_timeout_ms,
                "rebalance_timeout_ms": r.rebalance_timeout_ms if v >= 1 else -1,   # v0: the session timeout
                "protocol_type": r.protocol_type, "protocols": [{"name": p.name, "metadata": p.metadata or b""}
                                                                for p in r.protocols],
                # KIP-394: v4+ clients are asked to rejoin with the member id they are given.
                "require_known_member_id": v >= 4,
                # KIP-814: v9+ a static leader rejoining a Stable group is told to skip the assignment.
                "supports_skip_assignment": v >= 9}
        try:
            a = await self._group_call(conn, req, ApiKey.JOIN_GROUP, body)
        except KafkaError as exc:
            a = {"error": int(exc.code), "generation_id": -1, "protocol_type": None, "protocol_name": None,
                 "leader": "", "member_id": body["member_id"], "members": []}
        nullable = v >= 7
        return {"throttle_time_ms": 0, "error_code": a["error"], "generation_id": a["generation_id"],
                "protocol_type": a["protocol_type"] if nullable else (a["protocol_type"] or ""),
                "protocol_name": a["protocol_name"] if nullable else (a["protocol_name"] or ""),
                "leader": a["leader"], "skip_assignment": bool(a.get("skip_assignment")), "member_id": a["member_id"],
                "members": [{"member_id": m["member_id"], "group_instance_id": m["group_instance_id"],
                             "metadata": m["metadata"]} for m in a["members"]]}

    async def _sync_group(self, conn: KafkaConnection, req: _Request) -> dict:
        r, v = req.body, req.version
        body = {"group_id": r.group_id, "generation_id": r.generation_id, "member_id": r.member_id,
                "group_instance_id": r.group_instance_id if v >= 3 else None,
                "protocol_type": r.protocol_type if v >= 5 else None,
                "protocol_name": r.protocol_name if v >= 5 else None,
                "assignments": [{"member_id": a.member_id, "assignment": a.assignment or b""}
                                for a in r.assignments or []]}
        try:
            a = await self._group_call(conn, req, ApiKey.SYNC_GROUP, body)
        except KafkaError as exc:
            a = {"error": int(exc.code), "protocol_type": None, "protocol_name": None, "assignment": b""}
        return {"throttle_time_ms": 0, "error_code": a["error"], "protocol_type": a["protocol_type"],
                "protocol_name": a["protocol_name"], "assignment": a["assignment"]}

    async def _heartbeat(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        try:
            a = await self._group_call(conn, req, ApiKey.HEARTBEAT, {
                "group_id": r.group_id, "generation_id": r.generation_id, "member_id": r.member_id,
                "group_instance_id": r.group_instance_id if req.version >= 3 else None})
        except KafkaError as exc:
            a = {"error": int(exc.code)}
        return {"throttle_time_ms": 0, "error_code": a["error"]}

    async def _leave_group(self, conn: KafkaConnection, req: _Request) -> dict:
        r, v = req.body, req.version
        members = [m.member_id for m in r.members or []] if v >= 3 else [r.member_id]
        instances = [m.group_instance_id for m in r.members or []] if v >= 3 else [None]
        self._check_size(len(members))
        try:
            a = await self._group_call(conn, req, ApiKey.LEAVE_GROUP, {"group_id": r.group_id, "members": members,
                                                                      "group_instance_ids": instances})
        except KafkaError as exc:
            a = {"error": int(exc.code), "members": []}
        errors = a["members"]
        top = a["error"]
        if v < 3 and not top and errors:
            top = errors[0]["error"]          # one member: its error is the request's
        return {"throttle_time_ms": 0, "error_code": top, "members": [
            {"member_id": e["member_id"], "group_instance_id": i, "error_code": e["error"]}
            for e, i in zip(errors, instances, strict=False)]}

    async def _offset_commit(self, conn: KafkaConnection, req: _Request) -> dict:
        r, v = req.body, req.version
        topics = [{"topic": t.name, "partitions": [
            {"partition": p.partition_index, "offset": p.committed_offset,
             "leader_epoch": p.committed_leader_epoch if v >= 6 else -1, "metadata": p.committed_metadata or ""}
            for p in t.partitions]} for t in r.topics]
        self._check_size(sum(len(t["partitions"]) for t in topics))
        body = {"group_id": r.group_id, "generation_id": r.generation_id_or_member_epoch,
                "member_id": r.member_id or "", "topics": topics,
                "group_instance_id": r.group_instance_id if v >= 7 else None}
        try:
            a = await self._group_call(conn, req, ApiKey.OFFSET_COMMIT, body)
        except KafkaError as exc:
            a = {"topics": [{"topic": t["topic"], "partitions": [{"partition": p["partition"], "error": int(exc.code)}
                                                                  for p in t["partitions"]]} for t in topics]}
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["topic"], "partitions": [{"partition_index": p["partition"], "error_code": p["error"]}
                                                for p in t["partitions"]]} for t in a["topics"]]}

    async def _offset_fetch(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        topics = self._topic_indexes(r.topics)
        try:
            a = await self._group_call(conn, req, ApiKey.OFFSET_FETCH, {"group_id": r.group_id, "topics": topics})
        except KafkaError as exc:
            a = {"error": int(exc.code), "topics": []}
        if a["error"] and req.version < 2:
            # v0-1 have no top-level error: each partition carries it.
            a["topics"] = [{"topic": t["topic"], "partitions": [
                {"partition": p, "offset": -1, "leader_epoch": -1, "metadata": "", "error": a["error"]}
                for p in t["partitions"]]} for t in topics or []]
        return {"throttle_time_ms": 0, "error_code": a["error"], "topics": [
            {"name": t["topic"], "partitions": [
                {"partition_index": p["partition"], "committed_offset": p["offset"],
                 "committed_leader_epoch": p["leader_epoch"], "metadata": p["metadata"], "error_code": p["error"]}
                for p in t["partitions"]]} for t in a["topics"]]}

    async def _list_groups(self, conn: KafkaConnection, req: _Request) -> dict:
        states = list(req.body.states_filter or []) if req.version >= 4 else []
        try:
            a = await self._group_call(conn, req, ApiKey.LIST_GROUPS, {"states": states})
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": int(exc.code), "groups": []}
        return {"throttle_time_ms": 0, "error_code": 0, "groups": [
            {"group_id": g["group_id"], "protocol_type": g["protocol_type"], "group_state": g["state"]}
            for g in a["groups"]]}

    async def _describe_groups(self, conn: KafkaConnection, req: _Request) -> dict:
        names = list(req.body.groups or [])
        self._check_size(len(names))
        try:
            a = await self._group_call(conn, req, ApiKey.DESCRIBE_GROUPS, {"groups": names})
            groups = a["groups"]
        except KafkaError as exc:
            groups = [{"group_id": n, "error": int(exc.code), "state": "", "protocol_type": "", "protocol": "",
                       "members": []} for n in names]
        return {"throttle_time_ms": 0, "groups": [
            {"error_code": g["error"], "group_id": g["group_id"], "group_state": g["state"],
             "protocol_type": g["protocol_type"], "protocol_data": g["protocol"],
             "members": [{"member_id": m["member_id"], "group_instance_id": m["group_instance_id"],
                          "client_id": m["client_id"], "client_host": m["client_host"],
                          "member_metadata": m["metadata"], "member_assignment": m["assignment"]}
                         for m in g["members"]],
             "authorized_operations": _NO_AUTHORIZED_OPERATIONS} for g in groups]}

    async def _delete_groups(self, conn: KafkaConnection, req: _Request) -> dict:
        names = list(req.body.groups_names or [])
        self._check_size(len(names))
        try:
            a = await self._group_call(conn, req, ApiKey.DELETE_GROUPS, {"groups": names})
            results = a["results"]
        except KafkaError as exc:
            results = [{"group_id": n, "error": int(exc.code)} for n in names]
        return {"throttle_time_ms": 0, "results": [{"group_id": x["group_id"], "error_code": x["error"]}
                                                   for x in results]}

    async def _offset_delete(self, conn: KafkaConnection, req: _Request) -> dict:
        """KIP-496 (kafka-consumer-groups --delete-offsets, the admin clients' deleteConsumerGroupOffsets)."""
        r = req.body
        topics = self._sized([{"topic": t.name, "partitions": [p.partition_index for p in t.partitions]}
                              for t in r.topics])
        try:
            a = await self._group_call(conn, req, ApiKey.OFFSET_DELETE, {"group_id": r.group_id, "topics": topics})
        except KafkaError as exc:
            a = {"error": int(exc.code), "topics": []}
        return {"error_code": a["error"], "throttle_time_ms": 0, "topics": [
            {"name": t["topic"], "partitions": [{"partition_index": p["partition"], "error_code": p["error"]}
                                                for p in t["partitions"]]} for t in a["topics"]]}

    async def _init_producer_id(self, conn: KafkaConnection, req: _Request) -> dict:
        """The broker's InitProducerId handler (ids unique cluster-wide, see
        minibroker.broker.producer_ids): as Kafka for a null transactional
        id, a new producer id at epoch 0 even when the client sends its old
        one (KIP-360 v3+); a transactional id is refused."""
        r = req.body
        try:
            resp = await self._call(conn, req, ApiKey.INIT_PRODUCER_ID, {"transactional_id": r.transactional_id})
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": int(exc.code), "producer_id": -1, "producer_epoch": -1}
        assert resp is not None
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": resp["producer_id"],
                "producer_epoch": resp["producer_epoch"]}

    # ------------------------------------------------------------------ OffsetForLeaderEpoch

    async def _offset_for_leader_epoch(self, conn: KafkaConnection, req: _Request) -> dict:
        """KIP-320: the end offset of the largest epoch <= the one asked for
        (Kafka's endOffsetFor, E3), from the leader only; epochs checked first (F3)."""
        r = req.body
        refuse = req.version >= 3 and r.replica_id >= 0
        self._check_size(sum(len(t.partitions) for t in r.topics))
        rm = self.broker.replica_manager
        image = self.broker.image
        out = []
        for t in r.topics:
            parts = []
            for p in t.partitions:
                code, epoch, end = ErrorCode.NONE, -1, -1
                part = rm.partition(t.topic, p.partition)
                if refuse:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif part is None or part.role == NONE:
                    code = (ErrorCode.NOT_LEADER_OR_FOLLOWER if (t.topic, p.partition) in image.partitions
                            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    code = part.check_leader_epoch(p.current_leader_epoch)
                    if code == ErrorCode.NONE and part.core is None:
                        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    if code == ErrorCode.NONE:
                        epoch, end = part.log.end_offset_for_epoch(p.leader_epoch)
                parts.append({"error_code": int(code), "partition": p.partition, "leader_epoch": epoch,
                              "end_offset": end})
            out.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": out}

    # ------------------------------------------------------------------ admin

    async def _create_topics(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        topics = []
        for t in r.topics:
            entry: dict[str, Any] = {"topic": t.name, "num_partitions": t.num_partitions,
                                     "replication_factor": t.replication_factor}
            if t.assignments:
                entry["assignments"] = [a.broker_ids for a in sorted(t.assignments, key=lambda a: a.partition_index)]
            if t.configs:
                entry["configs"] = {c.name: c.value for c in t.configs if c.value is not None}
            topics.append(entry)
        body = {"topics": topics, "timeout_ms": r.timeout_ms, "validate_only": bool(r.validate_only)}
        try:
            resp = await self._call(conn, req, ApiKey.CREATE_TOPICS, body)
            assert resp is not None
            results = resp["topics"]
        except KafkaError as exc:
            results = [{"topic": t["topic"], "error": int(exc.code), "message": exc.message} for t in topics]
        configs: dict[str, list[dict]] = {}
        created = [res["topic"] for res in results if not res.get("error", 0)]
        if created and req.version >= 5:
            try:
                described = await self._call(conn, req, ApiKey.DESCRIBE_CONFIGS, {"resources": [
                    {"resource_type": _RESOURCE_TOPIC, "resource_name": n, "names": None} for n in created]})
                for d in (described or {}).get("results", []):
                    configs[d["resource_name"]] = [
                        {k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                        for e in (_kafka_config_entry(c, False) for c in d["configs"])]
            except KafkaError as exc:
                log.info("describing created topics failed: %s", exc)
        out = []
        for res in results:
            name = res["topic"]
            t = self.broker.image.topics.get(name) if not res.get("error", 0) else None
            parts = self.broker.image.partitions_of(name) if t is not None else []
            out.append({
                "name": name, "error_code": res.get("error", 0), "error_message": res.get("message") or None,
                "num_partitions": t.num_partitions if t is not None else -1,
                "replication_factor": len(parts[0].replicas) if parts else -1,
                "configs": configs.get(name) if t is not None else None,
            })
        return {"throttle_time_ms": 0, "topics": out}

    async def _delete_topics(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        names = list(r.topic_names or [])
        api = getattr(ApiKey, "DELETE_TOPICS", None)
        try:
            if api is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "DeleteTopics is not served by this broker yet")
            resp = await self._call(conn, req, api, {"topics": names, "timeout_ms": r.timeout_ms})
            assert resp is not None
            results = resp["topics"]
        except KafkaError as exc:
            results = [{"topic": n, "error": int(exc.code), "message": exc.message} for n in names]
        return {"throttle_time_ms": 0, "responses": [
            {"name": res["topic"], "error_code": res.get("error", 0), "error_message": res.get("message") or None}
            for res in results]}

    async def _create_partitions(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        topics = [{"topic": t.name, "count": t.count,
                   "assignments": None if t.assignments is None else [a.broker_ids for a in t.assignments]}
                  for t in r.topics]
        body = {"topics": topics, "timeout_ms": r.timeout_ms, "validate_only": bool(r.validate_only)}
        try:
            resp = await self._call(conn, req, ApiKey.CREATE_PARTITIONS, body)
            assert resp is not None
            results = resp["results"]
        except KafkaError as exc:
            results = [{"topic": t["topic"], "error": int(exc.code), "message": exc.message} for t in topics]
        return {"throttle_time_ms": 0, "results": [
            {"name": res["topic"], "error_code": res.get("error", 0), "error_message": res.get("message") or None}
            for res in results]}

    async def _incremental_alter_configs(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        resources = [{"resource_type": res.resource_type, "resource_name": res.resource_name,
                      "configs": [{"name": c.name, "op": c.config_operation, "value": c.value} for c in res.configs]}
                     for res in r.resources]
        try:
            resp = await self._call(conn, req, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                                    {"resources": resources, "validate_only": bool(r.validate_only)})
            assert resp is not None
            results = resp["results"]
        except KafkaError as exc:
            results = [{"resource_type": res["resource_type"], "resource_name": res["resource_name"],
                        "error": int(exc.code), "message": exc.message} for res in resources]
        return {"throttle_time_ms": 0, "responses": [
            {"error_code": res["error"], "error_message": res.get("message") or None,
             "resource_type": res["resource_type"], "resource_name": res["resource_name"]} for res in results]}

    async def _alter_configs(self, conn: KafkaConnection, req: _Request) -> dict:
        """The legacy AlterConfigs (33): each resource's dynamic configs become exactly the given set.
        Served as IncrementalAlterConfigs: SET for each given config, DELETE for each dynamic config
        of the resource (as DescribeConfigs reports it just before) that the request leaves out."""
        r = req.body
        self._check_size(sum(len(res.configs) for res in r.resources))
        out = []
        for res in r.resources:
            rtype, name = res.resource_type, res.resource_name
            nulls = [c.name for c in res.configs if c.value is None]
            try:
                if nulls:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for: {', '.join(nulls)}")
                described = await self._call(conn, req, ApiKey.DESCRIBE_CONFIGS, {"resources": [
                    {"resource_type": rtype, "resource_name": name, "names": None}]})
                assert described is not None
                current = described["results"][0]
                if current["error"]:
                    raise KafkaError(ErrorCode(current["error"]), current.get("message") or "")
                given = {c.name: c.value for c in res.configs}
                ops = [{"name": k, "op": 0, "value": v} for k, v in given.items()]
                ops += [{"name": c["name"], "op": 1, "value": None} for c in current["configs"]
                        if c["source"] == _own_dynamic_source(rtype, name) and c["name"] not in given]
                resp = await self._call(conn, req, ApiKey.INCREMENTAL_ALTER_CONFIGS, {
                    "resources": [{"resource_type": rtype, "resource_name": name, "configs": ops}],
                    "validate_only": bool(r.validate_only)})
                assert resp is not None
                code, message = resp["results"][0]["error"], resp["results"][0].get("message")
            except KafkaError as exc:
                code, message = int(exc.code), exc.message
            out.append({"error_code": code, "error_message": message or None, "resource_type": rtype,
                        "resource_name": name})
        return {"throttle_time_ms": 0, "responses": out}

    async def _elect_leaders(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        tps = None if r.topic_partitions is None else [
            {"topic": t.topic, "partitions": list(t.partitions)} for t in r.topic_partitions]
        body = {"election_type": r.election_type if req.version >= 1 else 0, "topics": tps,
                "timeout_ms": r.timeout_ms}
        try:
            resp = await self._call(conn, req, ApiKey.ELECT_LEADERS, body)
            assert resp is not None
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": int(exc.code), "replica_election_results": []}
        return {"throttle_time_ms": 0, "error_code": resp.get("error", 0), "replica_election_results": [
            {"topic": t["topic"], "partition_result": [
                {"partition_id": p["partition"], "error_code": p["error"], "error_message": p.get("message") or None}
                for p in t["partitions"]]} for t in resp.get("results", [])]}

    async def _alter_partition_reassignments(self, conn: KafkaConnection, req: _Request) -> dict:
        """KIP-455 (kafka-reassign-partitions, the admin clients' alterPartitionReassignments); v1's
        allow_replication_factor_change (KIP-860) is checked by the controller."""
        r = req.body
        topics = self._sized([{"topic": t.name, "partitions": [
            {"partition": p.partition_index, "replicas": None if p.replicas is None else list(p.replicas)}
            for p in t.partitions]} for t in r.topics])
        allow = bool(r.allow_replication_factor_change) if req.version >= 1 else True
        out = {"throttle_time_ms": 0, "allow_replication_factor_change": allow}
        try:
            resp = await self._call(conn, req, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                                    {"topics": topics, "timeout_ms": r.timeout_ms,
                                     "allow_replication_factor_change": allow})
            assert resp is not None
        except KafkaError as exc:
            return {**out, "error_code": int(exc.code), "error_message": exc.message or None, "responses": []}
        return {**out, "error_code": resp.get("error", 0), "error_message": resp.get("message") or None,
                "responses": [{"name": t["topic"], "partitions": [
                    {"partition_index": p["partition"], "error_code": p["error"],
                     "error_message": p.get("message") or None} for p in t["partitions"]]} for t in resp["topics"]]}

    async def _describe_log_dirs(self, conn: KafkaConnection, req: _Request) -> dict:
        """kafka-log-dirs and the admin clients' describeLogDirs: this broker's one log directory (v4's
        volume totals included)."""
        topics = self._topic_partitions(req.body.topics)
        try:
            resp = await self._call(conn, req, ApiKey.DESCRIBE_LOG_DIRS, {"topics": topics})
            assert resp is not None
        except KafkaError as exc:         # v3+ carry it; before, an empty answer (Kafka: no dir described)
            return {"throttle_time_ms": 0, "error_code": int(exc.code), "results": []}
        return {"throttle_time_ms": 0, "error_code": 0, "results": [
            {"error_code": d["error"], "log_dir": d["log_dir"], "total_bytes": d["total_bytes"],
             "usable_bytes": d["usable_bytes"], "topics": [{"name": t["topic"], "partitions": [
                 {"partition_index": p["partition"], "partition_size": p["size"], "offset_lag": p["offset_lag"],
                  "is_future_key": p["is_future"]} for p in t["partitions"]]} for t in d["topics"]]}
            for d in resp["results"]]}

    async def _list_partition_reassignments(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        topics = self._topic_indexes(r.topics)
        try:
            resp = await self._call(conn, req, ApiKey.LIST_PARTITION_REASSIGNMENTS,
                                    {"topics": topics, "timeout_ms": r.timeout_ms})
            assert resp is not None
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": int(exc.code), "error_message": exc.message or None,
                    "topics": []}
        return {"throttle_time_ms": 0, "error_code": resp.get("error", 0), "error_message": resp.get("message") or None,
                "topics": [{"name": t["topic"], "partitions": [
                    {"partition_index": p["partition"], "replicas": p["replicas"],
                     "adding_replicas": p["adding_replicas"], "removing_replicas": p["removing_replicas"]}
                    for p in t["partitions"]]} for t in resp["topics"]]}

    async def _describe_configs(self, conn: KafkaConnection, req: _Request) -> dict:
        r = req.body
        body = {"resources": [{"resource_type": res.resource_type, "resource_name": res.resource_name,
                               "names": None if res.configuration_keys is None else list(res.configuration_keys)}
                              for res in r.resources]}
        synonyms = bool(r.include_synonyms)
        try:
            resp = await self._call(conn, req, ApiKey.DESCRIBE_CONFIGS, body)
            assert resp is not None
            results = resp["results"]
        except KafkaError as exc:
            results = [{**res, "error": int(exc.code), "message": exc.message, "configs": []}
                       for res in body["resources"]]
        return {"throttle_time_ms": 0, "results": [
            {"error_code": res["error"], "error_message": res.get("message") or None,
             "resource_type": res["resource_type"], "resource_name": res["resource_name"],
             "configs": [_kafka_config_entry(c, synonyms) for c in res["configs"]]} for res in results]}


def _own_dynamic_source(resource_type: int, resource_name: str) -> int | None:
    """The DescribeConfigs source of a resource's own dynamic configs, what a legacy AlterConfigs of it
    replaces: a topic's, one broker's, or the cluster default's (the broker resource named "")."""
    if resource_type == ResourceType.TOPIC:
        return int(ConfigSource.DYNAMIC_TOPIC_CONFIG)
    if resource_type == ResourceType.BROKER:
        return int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if resource_name == ""
                   else ConfigSource.DYNAMIC_BROKER_CONFIG)
    return None


def _single_batch_problem(records: bytes | None, version: int) -> str | None:
    """Kafka's ProduceRequest.validateRecords for v3+ (an INVALID_RECORD partition):
    exactly one magic-2 batch per partition. Reads two header fields, not the records."""
    if not records or len(records) < 17:
        return f"Produce requests with version {version} must have at least one record batch per partition"
    if records[16] != 2:
        return f"Produce requests with version {version} are only allowed to contain record batches with magic v2"
    if int.from_bytes(records[8:12], "big", signed=True) + 12 < len(records):      # more after the first batch
        return (f"Produce requests with version {version} are only allowed to contain exactly one record batch "
                f"per partition")
    return None


def _produce_partition(index: int, answer: dict | None, refused: str | None) -> dict:
    if answer is None:
        return {"index": index, "error_code": int(ErrorCode.INVALID_RECORD), "base_offset": -1,
                "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [],
                "error_message": refused}
    return {"index": index, "error_code": answer["error"], "base_offset": answer["base_offset"],
            "log_append_time_ms": answer.get("log_append_time_ms", -1), "log_start_offset": answer["log_start_offset"],
            "record_errors": [{"batch_index": i, "batch_index_error_message": why}
                              for i, why in answer.get("record_errors", ())],
            "error_message": answer.get("message") or None}


def _kafka_config_entry(c: dict, synonyms: bool) -> dict:
    """One DescribeConfigs entry of the minibroker listener's answer, in Kafka's fields."""
    return {"name": c["name"], "value": None if c.get("is_sensitive") else c["value"],
            "read_only": c.get("read_only", False), "config_source": c["source"],
            "is_default": c["source"] == _SOURCE_DEFAULT, "is_sensitive": c.get("is_sensitive", False),
            "synonyms": c.get("synonyms", []) if synonyms else [], "config_type": 0, "documentation": None}
