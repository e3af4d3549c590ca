"""Text formats of the CLI, as Kafka's tools print them where they exist.

Pure functions from client-library values to lines; the commands print them.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from minibroker.client.describe import PartitionDescription, TopicDescription
from minibroker.client.types import TopicPartition
from minibroker.dynamic_config import ConfigEntry, ConfigSource
from minibroker.errors import ErrorCode, KafkaError, error_name


# The Java exception a Kafka tool reports an error code as, and its default message.
_JAVA: dict[int, tuple[str, str]] = {
    ErrorCode.OFFSET_OUT_OF_RANGE: ("OffsetOutOfRangeException", "The requested offset is not within the range of "
                                    "offsets maintained by the server."),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ("UnknownTopicOrPartitionException",
                                           "This server does not host this topic-partition."),
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ("NotLeaderOrFollowerException",
                                       "For requests intended only for the leader, this error indicates that the "
                                       "broker is not the current leader. For requests intended for any replica, this "
                                       "error indicates that the broker is not a replica of the topic partition."),
    ErrorCode.LEADER_NOT_AVAILABLE: ("LeaderNotAvailableException",
                                     "There is no leader for this topic-partition as we are in the middle of a "
                                     "leadership election."),
    ErrorCode.REQUEST_TIMED_OUT: ("TimeoutException", "The request timed out."),
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: ("GroupSubscribedToTopicException",
                                          "The consumer group is actively subscribed to the topic"),
    ErrorCode.GROUP_ID_NOT_FOUND: ("GroupIdNotFoundException", "The group id does not exist."),
    ErrorCode.NON_EMPTY_GROUP: ("GroupNotEmptyException", "The group is not empty."),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: ("InvalidReplicaAssignmentException",
                                           "Replica assignment is invalid."),
    ErrorCode.INVALID_REPLICATION_FACTOR: ("InvalidReplicationFactorException", "Replication factor is below 1 or "
                                           "larger than the number of available brokers."),
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: ("NoReassignmentInProgressException",
                                            "No partition reassignment is in progress."),
}


def java_exception(code: int, message: str = "") -> str:
    """`Name: message` of the Java exception Kafka's admin client raises for `code` (the broker's
    message when it sent one, as the exception carries it, else the error's default)."""
    if code in _JAVA:
        name, default = _JAVA[code]
        return f"{name}: {message or default}"
    return f"KafkaException: {error_name(code)}" + (f": {message}" if message else "")


def ids(xs: Iterable[int] | None) -> str:
    return "N/A" if xs is None else ",".join(str(x) for x in xs)


# A partition being reassigned: (replicas, adding, removing), as ListPartitionReassignments answers.
Reassignments = Mapping[TopicPartition, tuple[list[int], list[int], list[int]]]


def topic_line(td: TopicDescription, reassignments: Reassignments | None = None) -> str:
    """TopicCommand.TopicDescription.printDescription; Configs lists the non-default configs
    (topic overrides and broker-level values, as DescribeConfigs reports them). While the first
    partition is being reassigned its adding replicas do not count in ReplicationFactor, as Kafka."""
    out = f"Topic: {td.name}"
    if td.topic_id:
        out += f"\tTopicId: {td.topic_id}"
    configs = ",".join(f"{k}={v}" for k, v in sorted(td.configs.items()))
    rf = td.replication_factor
    moving = (reassignments or {}).get(TopicPartition(td.name, td.partitions[0].partition)) if td.partitions else None
    if moving is not None:
        rf = len(moving[0]) - len(moving[1])
    return (out + f"\tPartitionCount: {len(td.partitions)}\tReplicationFactor: {rf}"
            f"\tConfigs: {configs}")


def partition_line(pd: PartitionDescription, *, leader_epoch: bool = False,
                   reassignments: Reassignments | None = None) -> str:
    """TopicCommand.PartitionDescription.printDescription (with --leader-epoch, LeaderEpoch after Leader;
    Adding Replicas and Removing Replicas while the partition is being reassigned)."""
    out = f"\tTopic: {pd.topic}\tPartition: {pd.partition}\tLeader: {'none' if pd.leader is None else pd.leader}"
    if leader_epoch:
        out += f"\tLeaderEpoch: {pd.leader_epoch}"
    out += f"\tReplicas: {ids(pd.replicas)}\tIsr: {ids(pd.isr)}"
    moving = (reassignments or {}).get(TopicPartition(pd.topic, pd.partition))
    if moving is not None:
        out += f"\tAdding Replicas: {ids(moving[1])}\tRemoving Replicas: {ids(moving[2])}"
    out += f"\tElr: {ids(pd.elr)}\tLastKnownElr: {ids(pd.last_known_elr)}"
    return out


def describe_lines(topics: Iterable[TopicDescription], *, under_replicated: bool = False,
                   under_min_isr: bool = False, at_min_isr: bool = False, unavailable: bool = False,
                   leader_epoch: bool = False, with_overrides: bool = False,
                   reassignments: Reassignments | None = None) -> list[str]:
    """kafka-topics --describe: a topic line, then its partitions; with a filter only
    the matching partitions and no topic lines; with `with_overrides` (--topics-with-overrides)
    only the topic lines of topics that have a non-default config (TopicCommand.DescribeOptions)."""
    filtered = under_replicated or under_min_isr or at_min_isr or unavailable
    lines: list[str] = []
    for td in topics:
        if with_overrides and not filtered:
            if td.configs:
                lines.append(topic_line(td, reassignments))
            continue
        if not filtered:
            lines.append(topic_line(td, reassignments))
        for pd in td.partitions:
            moving = (reassignments or {}).get(TopicPartition(pd.topic, pd.partition))
            rf = len(pd.replicas) - len(moving[1]) if moving is not None else len(pd.replicas)
            if (not filtered or (under_replicated and rf - len(pd.isr) > 0)
                    or (unavailable and pd.unavailable)
                    or (under_min_isr and pd.under_min_isr(td.min_isr))
                    or (at_min_isr and pd.at_min_isr(td.min_isr))):
                lines.append(partition_line(pd, leader_epoch=leader_epoch, reassignments=reassignments))
    return lines


def offsets_lines(topic: str, offsets: Mapping[int, int]) -> list[str]:
    """kafka-get-offsets: topic:partition:offset."""
    return [f"{topic}:{p}:{o}" for p, o in sorted(offsets.items())]


def offset_skip_line(tp: TopicPartition, err: KafkaError) -> str:
    """GetOffsetShell's stderr line for a partition it could not get an offset for."""
    return f"Skip getting offsets for topic-partition {tp.topic}:{tp.partition} due to error: {err}"


def partitions_from_json(text: str) -> list[TopicPartition]:
    """kafka-leader-election's --path-to-json-file: {"partitions": [{"topic": T, "partition": N}, ...]};
    ValueError says what is wrong (not JSON, a missing field, duplicates)."""
    import json
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise ValueError('expected {"partitions": [{"topic": "...", "partition": N}, ...]}')
    out: list[TopicPartition] = []
    for e in doc["partitions"]:
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and type(e.get("partition")) is int):
            raise ValueError(f"partition entry {json.dumps(e)}: expected a string topic and an integer partition")
        out.append(TopicPartition(e["topic"], e["partition"]))
    dups = sorted({str(tp) for tp in out if out.count(tp) > 1})
    if dups:
        raise ValueError(f"Replica election data contains duplicate partitions: {', '.join(dups)}")
    if not out:
        raise ValueError("no partitions given")
    return out


def api_name(key: int) -> str:
    """Kafka's ApiKeys name (Produce, ListOffsets, ...), minibroker's own keys likewise."""
    from minibroker.protocol.api import ApiKey
    try:
        return "".join(w.capitalize() for w in ApiKey(key).name.split("_"))
    except ValueError:
        return "UNKNOWN"


def api_versions_lines(address: str, node_id: int, rack: str | None,
                       api_keys: Iterable[Mapping[str, int]]) -> list[str]:
    """kafka-broker-api-versions: `HOST:PORT (id: N rack: R) -> (`, one `Name(key): min to max [usable: v]`
    line per API (the highest version both sides speak), then `)`."""
    keys = sorted(api_keys, key=lambda k: k["api"])
    lines = [f"{address} (id: {node_id} rack: {rack or 'null'}) -> ("]
    for i, k in enumerate(keys):
        sep = "," if i < len(keys) - 1 else ""
        lines.append(f"\t{api_name(k['api'])}({k['api']}): {k['min_v']} to {k['max_v']} [usable: {k['max_v']}]{sep}")
    lines.append(")")
    return lines


def config_describe_lines(entity_type: str, name: str, entries: Iterable[ConfigEntry], *,
                          only: ConfigSource | None) -> list[str]:
    """kafka-configs --describe: a heading, then `  name=value sensitive=false synonyms={SOURCE:name=value, ...}`
    for each entry (only those from source `only`, unless --all)."""
    if name == "":
        head = f"Default configs for {entity_type} in the cluster are:"
    else:
        head = f"{'All' if only is None else 'Dynamic'} configs for {entity_type[:-1]} {name} are:"
    lines = [head]
    for e in entries:
        if only is not None and e.source != only:
            continue
        syn = ", ".join(f"{s.name}:{n}={v}" for s, n, v in e.synonyms)
        lines.append(f"  {e.name}={e.value} sensitive=false synonyms={{{syn}}}")
    return lines


def election_lines(election_type: str, results: Mapping[TopicPartition, KafkaError | None]) -> tuple[list[str], int]:
    """LeaderElectionCommand's report; returns (lines, number of failed partitions)."""
    kind = election_type.upper()
    ok = sorted((tp for tp, e in results.items() if e is None))
    noop = sorted((tp for tp, e in results.items() if e is not None and e.name == "ELECTION_NOT_NEEDED"))
    failed = sorted((tp, e) for tp, e in results.items() if e is not None and e.name != "ELECTION_NOT_NEEDED")
    lines = []
    if ok:
        lines.append(f"Successfully completed leader election ({kind}) for partitions {', '.join(map(str, ok))}")
    if noop:
        lines.append(f"Valid replica already elected for partitions {', '.join(map(str, noop))}")
    for tp, e in failed:
        lines.append(f"Error completing leader election ({kind}) for partition: {tp}: {e}")
    return lines, len(failed)


def produce_error_line(topic: str, key: bytes | None, value: bytes | None, err: BaseException) -> str:
    """As Kafka's ErrorLoggingCallback, with the error's code name."""
    k = "null" if key is None else f"{len(key)} bytes"
    v = "null" if value is None else f"{len(value)} bytes"
    return f"ERROR Error when sending message to topic {topic} with key: {k}, value: {v} with error: {err}"
