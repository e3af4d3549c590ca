"""Kafka's wire protocol, generated from Kafka's own message definitions.

A thin wrapper over kafka-python's `kafka.protocol` (pinned in pyproject.toml):
that package ships Kafka 4.3's JSON message specs and generates one
encoder/decoder per (message, version), flexible versions and tagged fields
included. Nothing else in minibroker imports kafka-python's protocol classes,
so swapping the codec stays local to this module.

Owns: the API keys minibroker serves on a Kafka listener and the version
ranges it serves and advertises (`SERVED`, `ADVERTISED`, enforced here:
kafka-python resets every schema's minimum to 0), reading a request header,
decoding request bodies, and encoding response bodies (with the response
header, framed) from plain dicts.

Must not know: what any API means (minibroker.kafka.handlers), sockets
(minibroker.kafka.server).
"""
from __future__ import annotations

import base64
import enum
import struct
import uuid
from typing import Any, NamedTuple

import warnings

with warnings.catch_warnings():
    # kafka-python 3.0.12 loads its JSON with importlib.resources' legacy API (one warning per file).
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol import admin as _admin  # type: ignore[import-untyped]
    from kafka.protocol import consumer as _consumer
    from kafka.protocol import metadata as _metadata
    from kafka.protocol import producer as _producer


class Api(enum.IntEnum):
    """Kafka API keys served (or answered) on a Kafka listener."""
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60


# (request class, response class) per API, from the 4.3 JSON.
_CLASSES: dict[Api, tuple[Any, Any]] = {
    Api.PRODUCE: (_producer.ProduceRequest, _producer.ProduceResponse),
    Api.FETCH: (_consumer.FetchRequest, _consumer.FetchResponse),
    Api.LIST_OFFSETS: (_consumer.ListOffsetsRequest, _consumer.ListOffsetsResponse),
    Api.METADATA: (_metadata.MetadataRequest, _metadata.MetadataResponse),
    Api.FIND_COORDINATOR: (_metadata.FindCoordinatorRequest, _metadata.FindCoordinatorResponse),
    Api.OFFSET_COMMIT: (_consumer.OffsetCommitRequest, _consumer.OffsetCommitResponse),
    Api.OFFSET_FETCH: (_consumer.OffsetFetchRequest, _consumer.OffsetFetchResponse),
    Api.JOIN_GROUP: (_consumer.JoinGroupRequest, _consumer.JoinGroupResponse),
    Api.HEARTBEAT: (_consumer.HeartbeatRequest, _consumer.HeartbeatResponse),
    Api.LEAVE_GROUP: (_consumer.LeaveGroupRequest, _consumer.LeaveGroupResponse),
    Api.SYNC_GROUP: (_consumer.SyncGroupRequest, _consumer.SyncGroupResponse),
    Api.DESCRIBE_GROUPS: (_admin.DescribeGroupsRequest, _admin.DescribeGroupsResponse),
    Api.LIST_GROUPS: (_admin.ListGroupsRequest, _admin.ListGroupsResponse),
    Api.DELETE_GROUPS: (_admin.DeleteGroupsRequest, _admin.DeleteGroupsResponse),
    Api.OFFSET_DELETE: (_consumer.OffsetDeleteRequest, _consumer.OffsetDeleteResponse),
    Api.API_VERSIONS: (_metadata.ApiVersionsRequest, _metadata.ApiVersionsResponse),
    Api.CREATE_TOPICS: (_admin.CreateTopicsRequest, _admin.CreateTopicsResponse),
    Api.DELETE_TOPICS: (_admin.DeleteTopicsRequest, _admin.DeleteTopicsResponse),
    Api.DELETE_RECORDS: (_admin.DeleteRecordsRequest, _admin.DeleteRecordsResponse),
    Api.INIT_PRODUCER_ID: (_producer.InitProducerIdRequest, _producer.InitProducerIdResponse),
    Api.OFFSET_FOR_LEADER_EPOCH: (_consumer.OffsetForLeaderEpochRequest, _consumer.OffsetForLeaderEpochResponse),
    Api.DESCRIBE_CONFIGS: (_admin.DescribeConfigsRequest, _admin.DescribeConfigsResponse),
    Api.ALTER_CONFIGS: (_admin.AlterConfigsRequest, _admin.AlterConfigsResponse),
    Api.DESCRIBE_LOG_DIRS: (_admin.DescribeLogDirsRequest, _admin.DescribeLogDirsResponse),
    Api.ELECT_LEADERS: (_admin.ElectLeadersRequest, _admin.ElectLeadersResponse),
    Api.CREATE_PARTITIONS: (_admin.CreatePartitionsRequest, _admin.CreatePartitionsResponse),
    Api.INCREMENTAL_ALTER_CONFIGS: (_admin.IncrementalAlterConfigsRequest, _admin.IncrementalAlterConfigsResponse),
    Api.DESCRIBE_CLUSTER: (_admin.DescribeClusterRequest, _admin.DescribeClusterResponse),
    Api.ALTER_PARTITION_REASSIGNMENTS: (_admin.AlterPartitionReassignmentsRequest,
                                        _admin.AlterPartitionReassignmentsResponse),
    Api.LIST_PARTITION_REASSIGNMENTS: (_admin.ListPartitionReassignmentsRequest,
                                       _admin.ListPartitionReassignmentsResponse),
}

# The versions minibroker decodes and answers. Floors are Kafka 4.x's
# (KIP-896); ceilings stop below the first version whose semantics we lack
# (Fetch 13+ / Produce 13 / DeleteTopics 6 address topics by id; Metadata 13
# and ListOffsets 8+ add fields we do not fill; CreateTopics 6+ and
# DescribeConfigs are capped where the clients in docs/kafka-compat.md stop;
# OffsetCommit 9+ / OffsetFetch 8+ carry KIP-848 member epochs and batched
# groups, ListGroups 5 group types, DescribeGroups 6 error messages we do not
# fill; group APIs' floors are Kafka 4.1's: OffsetCommit 2, OffsetFetch 1, JoinGroup 0 (put back for
# librdkafka < 2.11, whose balanced consumer needs JoinGroup v0 in range, KAFKA-19444)).
SERVED: dict[Api, tuple[int, int]] = {
    Api.PRODUCE: (3, 9),
    Api.FETCH: (4, 12),
    Api.LIST_OFFSETS: (1, 7),
    Api.METADATA: (0, 12),
    Api.OFFSET_COMMIT: (2, 8),
    Api.OFFSET_FETCH: (1, 7),
    Api.FIND_COORDINATOR: (0, 6),
    Api.JOIN_GROUP: (0, 9),
    Api.HEARTBEAT: (0, 4),
    Api.LEAVE_GROUP: (0, 5),
    Api.SYNC_GROUP: (0, 5),
    Api.DESCRIBE_GROUPS: (0, 5),
    Api.LIST_GROUPS: (0, 4),
    Api.DELETE_GROUPS: (0, 2),
    Api.OFFSET_DELETE: (0, 0),
    Api.API_VERSIONS: (0, 4),
    Api.CREATE_TOPICS: (2, 5),
    Api.DELETE_TOPICS: (1, 5),
    Api.DELETE_RECORDS: (0, 2),
    Api.INIT_PRODUCER_ID: (0, 4),
    Api.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    Api.DESCRIBE_CONFIGS: (1, 4),
    Api.ALTER_CONFIGS: (0, 2),
    Api.DESCRIBE_LOG_DIRS: (1, 4),
    Api.ELECT_LEADERS: (0, 2),
    Api.DESCRIBE_CLUSTER: (0, 1),
    Api.CREATE_PARTITIONS: (0, 3),
    Api.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    Api.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    Api.LIST_PARTITION_REASSIGNMENTS: (0, 0),
}

# What ApiVersions says. As Kafka 4.x, Produce is advertised from v0 (KAFKA-18659:
# librdkafka < 2.11.1 enables gzip/snappy/lz4 only when Produce's range holds v0)
# but v0-2 are refused when sent.
ADVERTISED: dict[Api, tuple[int, int]] = {**SERVED, Api.PRODUCE: (0, SERVED[Api.PRODUCE][1])}

_HEADER = struct.Struct(">hhi")   # api key, api version, correlation id
_I16 = struct.Struct(">h")


class CodecError(ValueError):
    """A request that cannot be decoded (the connection is closed, as Kafka does)."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the first 8 bytes of every request."""
    if len(frame) < _HEADER.size:
        raise CodecError(f"request of {len(frame)} bytes is shorter than a request header")
    return _HEADER.unpack_from(frame, 0)


def served(api_key: int, version: int) -> Api | None:
    """The Api if minibroker serves this key at this version, else None."""
    try:
        api = Api(api_key)
    except ValueError:
        return None
    lo, hi = SERVED[api]
    return api if lo <= version <= hi else None


def is_flexible(api: Api, version: int) -> bool:
    return bool(_CLASSES[api][0].flexible_version_q(version))


def decode_request(api: Api, version: int, frame: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """Decode a whole request (header and body) of a served version. The body
    is kafka-python's generated data object: fields by their snake_case JSON names."""
    cls = _CLASSES[api][0]
    try:
        req = cls.decode(frame, version=version, header=True)
    except Exception as exc:  # the generated decoders raise struct/Index/Value/UnicodeErrors
        raise CodecError(f"cannot decode {api.name} v{version}: {exc.__class__.__name__}: {exc}") from None
    h = req.header
    return RequestHeader(h.request_api_key, h.request_api_version, h.correlation_id, h.client_id), req


def _build(data_class: Any, struct_field: Any, version: int, values: dict[str, Any]) -> Any:
    fields = struct_field.fields
    kw: dict[str, Any] = {}
    for name, value in values.items():
        f = fields[name]
        if not f.for_version_q(version):
            continue
        if value is not None:
            if f.is_struct_array():
                value = [_build(f.data_class, f, version, v) for v in value]
            elif f.is_struct():
                value = _build(f.data_class, f, version, value)
        kw[name] = value
    return data_class(version=version, **kw)


def encode_response(api: Api, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    """The framed response (length, header, body) for `body`, a dict by field
    name (nested dicts and lists of dicts for structs). Fields the version does
    not have are ignored; missing ones take the schema's default."""
    cls = _CLASSES[api][1]
    msg = _build(cls[None], cls._struct, version, body)
    msg.with_header(correlation_id=correlation_id)
    return bytes(msg.encode(header=True, framed=True))


def encode_api_versions_error(correlation_id: int, error_code: int) -> bytes:
    """KIP-511: an ApiVersions request of a version we do not serve is answered
    with a v0 body carrying the error and our ranges; the client retries."""
    return encode_response(Api.API_VERSIONS, 0, correlation_id,
                           {"error_code": error_code, "api_keys": api_versions_keys()})


def api_versions_keys() -> list[dict[str, int]]:
    return [{"api_key": int(a), "min_version": lo, "max_version": hi}
            for a, (lo, hi) in sorted(ADVERTISED.items())]


def topic_uuid(topic_id: str) -> uuid.UUID:
    """minibroker's topic id (Kafka's base64url Uuid text) as a UUID."""
    raw = topic_id.encode()
    try:
        b = base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))
        return uuid.UUID(bytes=b) if len(b) == 16 else uuid.UUID(int=0)
    except (ValueError, TypeError):
        return uuid.UUID(int=0)
