"""Kafka error codes, by Kafka's numbers and names, with retriable flags.

Every error that crosses the wire or reaches a user carries one of these
codes. `retriable` says whether a client may retry the same request;
`refresh_metadata` says whether it should refresh its metadata first
(Kafka's InvalidMetadataException family).
"""
from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    OPERATION_NOT_ATTEMPTED = 55
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    INVALID_UPDATE_VERSION = 95
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    PRODUCER_FENCED = 90
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE

    @property
    def refresh_metadata(self) -> bool:
        return self in _REFRESH_METADATA


_RETRIABLE = frozenset({
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
})

_REFRESH_METADATA = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.OFFSET_NOT_AVAILABLE,
})


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_{code}"


class KafkaError(Exception):
    """An error with a Kafka code; `remote` is True when the peer reported it. `record_errors`:
    for a refused produce, the records at fault as Kafka's RecordErrors, (index in the batch, why)."""

    def __init__(self, code: ErrorCode | int, message: str = "", *, remote: bool = False,
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        self.code = ErrorCode(code) if code in ErrorCode._value2member_map_ else code
        self.message = message
        self.remote = remote
        self.record_errors = record_errors
        name = error_name(int(code))
        super().__init__(f"{name}: {message}" if message else name)

    @property
    def name(self) -> str:
        return error_name(int(self.code))

    @property
    def retriable(self) -> bool:
        return isinstance(self.code, ErrorCode) and self.code.retriable

    @property
    def refresh_metadata(self) -> bool:
        return isinstance(self.code, ErrorCode) and self.code.refresh_metadata
