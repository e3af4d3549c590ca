"""The wire contract: API keys (Kafka's numbers where Kafka has the API) and
the request/response field specs every process validates against.

Every request map carries the header fields `api`, `v`, `id`, `client`
plus the body fields of its API at the top level. Every response carries
`id` (echoed) and the body fields; a request that fails as a whole is
answered with `{"id", "error", "message"}` (an `ErrorCode` number).
Record batches travel as msgpack bin: opaque bytes in Kafka's RecordBatch v2 format (see minibroker.records).

Conventions: -1 means "none/unknown" for ids, epochs and offsets; errors are
`ErrorCode` ints; optional fields default as shown by `Opt`.
"""
from __future__ import annotations

import enum
from typing import Any

from minibroker.protocol.schema import MapOf, Nullable, Opt


class ApiKey(enum.IntEnum):
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
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    DESCRIBE_CONFIGS = 32
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    # minibroker's own APIs (no Kafka equivalent on the wire)
    METADATA_FETCH = 1000      # brokers follow the controller's metadata log (KRaft: Fetch on __cluster_metadata)
    REPLICA_STATUS = 1001      # per-replica LEO/HW/lag as this broker sees it (for describe/watch)
    EVENTS = 1002              # long-poll of this process's structured events (for watch/tests)


HEADER = {"api": int, "v": int, "id": int, "client": Opt(str, "")}

# Timestamps in ListOffsets, as Kafka.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3          # KIP-734: the offset of the record with the largest timestamp

_produce_partition = {"partition": int, "records": bytes}
_fetch_partition = {
    "partition": int,
    "fetch_offset": int,
    "current_leader_epoch": Opt(int, -1),
    "last_fetched_epoch": Opt(int, -1),
    "log_start_offset": Opt(int, -1),
    "partition_max_bytes": Opt(int, 1_048_576),
}
_isr_entry = {"broker_id": int, "broker_epoch": int}
_listener = {"name": str, "host": str, "port": int}

REQUESTS: dict[ApiKey, dict[str, Any]] = {
    ApiKey.PRODUCE: {
        "acks": int,
        "timeout_ms": Opt(int, 30_000),
        "topics": [{"topic": str, "partitions": [_produce_partition]}],
    },
    ApiKey.FETCH: {
        "replica_id": Opt(int, -1),          # >= 0 only on an authenticated inter-broker connection
        "broker_epoch": Opt(int, -1),        # KIP-903
        "max_wait_ms": Opt(int, 500),
        "min_bytes": Opt(int, 1),
        "max_bytes": Opt(int, 52_428_800),
        "rack_id": Opt(str, ""),             # client.rack (KIP-392); "" = none
        "session_id": Opt(int, 0),           # KIP-227, replica fetches only (minibroker.broker.fetch_session)
        "session_epoch": Opt(int, -1),       # -1: no session; 0: open one; else the session's next epoch
        "forgotten_topics": Opt(Nullable([{"topic": str, "partitions": [int]}]), None),
        "topics": [{"topic": str, "partitions": [_fetch_partition]}],
    },
    ApiKey.LIST_OFFSETS: {
        "replica_id": Opt(int, -1),
        "topics": [{"topic": str, "partitions": [{
            "partition": int, "timestamp": int, "current_leader_epoch": Opt(int, -1)}]}],
    },
    ApiKey.METADATA: {"topics": Nullable([str])},
    ApiKey.API_VERSIONS: {},
    ApiKey.CREATE_TOPICS: {
        "topics": [{
            "topic": str,
            "num_partitions": Opt(int, -1),
            "replication_factor": Opt(int, -1),
            "assignments": Opt([[int]], None),   # explicit replica lists, one per partition
            "configs": Opt(MapOf(str, str), None),
        }],
        "timeout_ms": Opt(int, 30_000),
        "validate_only": Opt(bool, False),
    },
    ApiKey.DELETE_TOPICS: {
        "topics": [str],
        "timeout_ms": Opt(int, 30_000),
    },
    # Groups (the classic protocol, answered by the group's coordinator: FindCoordinator first).
    ApiKey.FIND_COORDINATOR: {"key": str, "key_type": Opt(int, 0)},        # 0 group (1 transaction: refused)
    ApiKey.JOIN_GROUP: {
        "group_id": str,
        "member_id": Opt(str, ""),              # "" on the first join: answered MEMBER_ID_REQUIRED (KIP-394)
        "group_instance_id": Opt(Nullable(str), None),
        "session_timeout_ms": int,
        "rebalance_timeout_ms": Opt(int, -1),   # -1: the session timeout
        "protocol_type": str,                   # "consumer"
        "protocols": [{"name": str, "metadata": bytes}],
    },
    ApiKey.SYNC_GROUP: {
        "group_id": str, "generation_id": int, "member_id": str,
        "group_instance_id": Opt(Nullable(str), None),
        "assignments": Opt([{"member_id": str, "assignment": bytes}], []),   # the leader's only
    },
    ApiKey.HEARTBEAT: {"group_id": str, "generation_id": int, "member_id": str,
                       "group_instance_id": Opt(Nullable(str), None)},
    # members[i] leaves as group_instance_ids[i] (when given): "" with an instance id removes that static member
    ApiKey.LEAVE_GROUP: {"group_id": str, "members": [str], "group_instance_ids": Opt([Nullable(str)], [])},
    ApiKey.OFFSET_COMMIT: {
        "group_id": str,
        "generation_id": Opt(int, -1),          # -1 with member_id "": a commit to an Empty group (tools)
        "member_id": Opt(str, ""),
        "group_instance_id": Opt(Nullable(str), None),
        "topics": [{"topic": str, "partitions": [{
            "partition": int, "offset": int, "leader_epoch": Opt(int, -1), "metadata": Opt(str, "")}]}],
    },
    # offset -1: the high watermark. Answered per partition with the low watermark once every alive replica's
    # log start reached the offset, or REQUEST_TIMED_OUT after timeout_ms.
    ApiKey.DELETE_RECORDS: {
        "topics": [{"topic": str, "partitions": [{"partition": int, "offset": int}]}],
        "timeout_ms": Opt(int, 30_000),
    },
    ApiKey.OFFSET_FETCH: {"group_id": str, "topics": Opt(Nullable([{"topic": str, "partitions": [int]}]), None)},
    ApiKey.LIST_GROUPS: {"states": Opt([str], [])},           # Kafka's state names; [] = every state
    ApiKey.DESCRIBE_GROUPS: {"groups": [str]},
    ApiKey.DELETE_GROUPS: {"groups": [str]},
    ApiKey.OFFSET_DELETE: {"group_id": str, "topics": [{"topic": str, "partitions": [int]}]},
    ApiKey.INIT_PRODUCER_ID: {
        "transactional_id": Opt(Nullable(str), None),   # transactions are not served: must be null
        "transaction_timeout_ms": Opt(int, -1),
        "producer_id": Opt(int, -1),                    # KIP-360 fields; an idempotent producer gets a new id
        "producer_epoch": Opt(int, -1),
    },
    ApiKey.SASL_HANDSHAKE: {"mechanism": str},
    ApiKey.SASL_AUTHENTICATE: {"auth_bytes": bytes},     # one SCRAM message (minibroker.net.scram)
    ApiKey.DESCRIBE_CONFIGS: {
        # resource_type 2 = topic, 4 = broker (name "" = the cluster default); names None = every config
        "resources": [{"resource_type": int, "resource_name": str, "names": Opt(Nullable([str]), None)}],
    },
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {
        "resources": [{"resource_type": int, "resource_name": str,
                       # op: 0 SET, 1 DELETE (Kafka's AlterConfigOp; APPEND/SUBTRACT are for list configs)
                       "configs": [{"name": str, "op": Opt(int, 0), "value": Opt(Nullable(str), None)}]}],
        "validate_only": Opt(bool, False),
    },
    ApiKey.CREATE_PARTITIONS: {
        "topics": [{"topic": str, "count": int, "assignments": Opt(Nullable([[int]]), None)}],
        "timeout_ms": Opt(int, 30_000),
        "validate_only": Opt(bool, False),
    },
    ApiKey.DESCRIBE_LOG_DIRS: {
        "topics": Opt(Nullable([{"topic": str, "partitions": [int]}]), None),    # None = every partition here
    },
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: {
        # replicas None cancels the partition's reassignment (KIP-455)
        "topics": [{"topic": str, "partitions": [{"partition": int, "replicas": Nullable([int])}]}],
        "timeout_ms": Opt(int, 30_000),
        "allow_replication_factor_change": Opt(bool, True),     # KIP-860
    },
    ApiKey.LIST_PARTITION_REASSIGNMENTS: {
        "topics": Opt(Nullable([{"topic": str, "partitions": [int]}]), None),     # None = every partition
        "timeout_ms": Opt(int, 30_000),
    },
    ApiKey.ELECT_LEADERS: {
        "election_type": int,                    # 0 preferred, 1 unclean
        "topics": Nullable([{"topic": str, "partitions": [int]}]),  # None = all partitions
        "timeout_ms": Opt(int, 30_000),
    },
    ApiKey.ALTER_PARTITION: {
        "broker_id": int,
        "broker_epoch": int,
        "topics": [{"topic": str, "partitions": [{
            "partition": int,
            "leader_epoch": int,
            "partition_epoch": int,
            "new_isr_with_epochs": [_isr_entry],
            "leader_recovery_state": Opt(int, 0),   # 0 RECOVERED, 1 RECOVERING
        }]}],
    },
    ApiKey.DESCRIBE_CLUSTER: {},
    ApiKey.DESCRIBE_QUORUM: {},
    ApiKey.BROKER_REGISTRATION: {
        "broker_id": int,
        "incarnation_id": str,
        "rack": Nullable(str),
        "listeners": [_listener],
        "previous_broker_epoch": Opt(int, -1),   # -1 after an unclean shutdown (KIP-966)
    },
    ApiKey.BROKER_HEARTBEAT: {
        "broker_id": int,
        "broker_epoch": int,
        "current_metadata_offset": int,
        "want_fence": Opt(bool, False),
        "want_shut_down": Opt(bool, False),
    },
    ApiKey.METADATA_FETCH: {
        "broker_id": Opt(int, -1),
        "from_offset": int,          # next metadata record offset the follower wants
        "max_wait_ms": Opt(int, 500),
    },
    ApiKey.REPLICA_STATUS: {"topics": Nullable([str])},
    ApiKey.EVENTS: {"from_seq": int, "max_wait_ms": Opt(int, 0), "max_events": Opt(int, 1000)},
}
