"""The admin client: topics, offsets, elections, cluster and replica views.

Owns nothing long-lived beyond its `ClientNetwork`. Calls any broker for
what any broker answers (CreateTopics, CreatePartitions, ElectLeaders and
IncrementalAlterConfigs are forwarded to the controller, KIP-590), each
leader for ListOffsets, and a given broker for its own DescribeConfigs,
ReplicaStatus / Events / ApiVersions. Retriable failures are retried on
another broker until `default.api.timeout.ms`.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable, Mapping, Sequence

from minibroker.client.config import ADMIN_DEFAULTS, client_config
from minibroker.client.describe import BrokerDescription, TopicDescription, describe_from_metadata
from minibroker.client.metadata import parse_topic
from minibroker.client.network import Address, ClientNetwork, now_ms
from minibroker.client.offsets import LATEST_TIMESTAMP, OffsetResult, list_offsets, list_offsets_settled
from minibroker.client.types import TopicPartition
from minibroker.config import parse_hostport
from minibroker.dynamic_config import ConfigEntry, ResourceType, entry_from_wire
from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import check
from minibroker.protocol.api import ApiKey

ELECTION_TYPES = {"preferred": 0, "unclean": 1}


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    assignments: list[list[int]] | None = None


@dataclass(frozen=True)
class ReplicaLogInfo:
    """One replica in a log directory (Kafka's ReplicaInfo)."""
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    """One broker's log directory (Kafka's LogDirDescription)."""
    path: str
    error: int
    replicas: dict[TopicPartition, ReplicaLogInfo]
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerDescription, ...]


class Admin:
    """`async with Admin("127.0.0.1:9092") as admin: await admin.create_topic("orders", 3, 3)`."""

    def __init__(self, bootstrap_servers: str | list[str] | None = None,
                 config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.cfg = client_config(ADMIN_DEFAULTS, config, kwargs, bootstrap_servers)
        self.net = ClientNetwork(self.cfg, all_topics=True)
        self.api_timeout_ms = self.cfg.get_int("default.api.timeout.ms")

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self.net.close()

    # -- plumbing ----------------------------------------------------------------

    async def _any(self, api: ApiKey, body: dict[str, Any], timeout_ms: int | None = None) -> dict[str, Any]:
        """Send to any broker, retrying retriable whole-request failures until the API timeout."""
        deadline = now_ms() + (timeout_ms or self.api_timeout_ms)
        while True:
            try:
                _, resp = await self.net.request_any(api, body)
                return check(resp)
            except KafkaError as exc:
                if not exc.retriable or now_ms() >= deadline:
                    raise
            await asyncio.sleep(self.net.cache.refresh_backoff_ms / 1000)

    async def metadata(self, topics: list[str] | None = None) -> dict[str, Any]:
        return await self._any(ApiKey.METADATA, {"topics": topics})

    # -- topics ------------------------------------------------------------------

    async def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False,
                            timeout_ms: int = 30_000) -> dict[str, KafkaError | None]:
        """Returns each topic's error (None = created)."""
        entries = []
        for t in topics:
            e: dict[str, Any] = {"topic": t.name, "num_partitions": t.num_partitions,
                                 "replication_factor": t.replication_factor}
            if t.assignments is not None:
                e["assignments"] = [list(a) for a in t.assignments]
            if t.configs:
                e["configs"] = {str(k): str(v) for k, v in t.configs.items()}
            entries.append(e)
        body = {"topics": entries, "timeout_ms": timeout_ms, "validate_only": validate_only}
        resp = await self._any(ApiKey.CREATE_TOPICS, body)
        return {t["topic"]: (KafkaError(t["error"], t.get("message") or "", remote=True) if t.get("error") else None)
                for t in resp.get("topics", ())}

    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           configs: Mapping[str, str] | None = None, *, assignments: list[list[int]] | None = None,
                           wait: bool = True, if_not_exists: bool = False) -> None:
        """Create one topic (raising its error); with `wait`, return once every partition has a leader."""
        res = await self.create_topics([NewTopic(name, num_partitions, replication_factor, configs or {},
                                                 assignments)])
        err = res.get(name)
        if err is not None and not (if_not_exists and err.code == ErrorCode.TOPIC_ALREADY_EXISTS):
            raise err
        if wait:
            await self.wait_for_leaders(name)

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30_000) -> dict[str, KafkaError | None]:
        """DeleteTopics (API 20): each topic's error (None = deleted)."""
        resp = await self._any(ApiKey.DELETE_TOPICS, {"topics": list(names), "timeout_ms": timeout_ms})
        return {t["topic"]: (KafkaError(t["error"], t.get("message") or "", remote=True) if t.get("error") else None)
                for t in resp.get("topics", ())}

    async def delete_topic(self, name: str) -> None:
        """Delete one topic, raising its error."""
        err = (await self.delete_topics([name])).get(name)
        if err is not None:
            raise err

    async def wait_for_leaders(self, topic: str, timeout_ms: int | None = None) -> None:
        """Until the topic's metadata shows a leader for every partition."""
        def ready() -> bool:
            tm = self.net.cache.topics.get(topic)
            return tm is not None and not tm.error and bool(tm.partitions) and all(
                pm.leader >= 0 for pm in tm.partitions)
        await self.net.wait_for(ready, timeout_ms or self.api_timeout_ms, f"leaders of topic {topic}")

    async def list_topics(self) -> list[str]:
        resp = await self.metadata(None)
        return sorted(t["topic"] for t in resp.get("topics", ()) if not t.get("error"))

    async def describe_topics(self, topics: list[str] | None = None) -> list[TopicDescription]:
        """Topic and partition descriptions from Metadata (sorted by name, partitions by id).
        A named topic that does not exist raises UNKNOWN_TOPIC_OR_PARTITION."""
        resp = await self.metadata(topics)
        out = describe_from_metadata(resp)
        for t in resp.get("topics", ()):
            if t.get("error") and (topics is not None):
                raise KafkaError(t["error"], f"topic {t['topic']}", remote=True)
        return out

    async def create_partitions(self, topic: str, count: int, assignments: list[list[int]] | None = None, *,
                                validate_only: bool = False, timeout_ms: int = 30_000) -> None:
        """Grow `topic` to `count` partitions (CreatePartitions, through the controller); raises its error."""
        body: dict[str, Any] = {"topics": [{"topic": topic, "count": count}], "timeout_ms": timeout_ms,
                                "validate_only": validate_only}
        if assignments is not None:
            body["topics"][0]["assignments"] = [list(a) for a in assignments]
        resp = await self._any(ApiKey.CREATE_PARTITIONS, body)
        for r in resp.get("results", ()):
            if r.get("error"):
                raise KafkaError(r["error"], r.get("message") or "", remote=True)

    # -- configs -------------------------------------------------------------------

    async def describe_configs(self, resources: Iterable[tuple[int, str]]) -> dict[tuple[int, str], list[ConfigEntry]]:
        """`[(ResourceType.TOPIC, "orders"), (ResourceType.BROKER, "1"), (ResourceType.BROKER, "")]` ->
        each resource's entries. A broker's own configs are asked of that broker (as Kafka's admin
        does); topics and the cluster default of any broker. A failed resource raises."""
        wanted = list(resources)
        out: dict[tuple[int, str], list[ConfigEntry]] = {}
        anywhere = [r for r in wanted if not (r[0] == ResourceType.BROKER and r[1] != "")]
        by_broker = [r for r in wanted if r[0] == ResourceType.BROKER and r[1] != ""]
        replies: list[dict[str, Any]] = []
        if anywhere:
            body = {"resources": [{"resource_type": int(t), "resource_name": n} for t, n in anywhere]}
            replies += (await self._any(ApiKey.DESCRIBE_CONFIGS, body)).get("results", [])
        if by_broker:
            live = await self.brokers()
            for t, n in by_broker:
                addr = live.get(int(n)) if n.isdigit() else None
                if addr is None:
                    raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {n} is not a live broker")
                body = {"resources": [{"resource_type": int(t), "resource_name": n}]}
                replies += check(await self.net.request_address(addr, ApiKey.DESCRIBE_CONFIGS, body,
                                                                channel="meta")).get("results", [])
        for r in replies:
            if r.get("error"):
                raise KafkaError(r["error"], r.get("message") or "", remote=True)
            out[(r["resource_type"], r["resource_name"])] = [entry_from_wire(c) for c in r.get("configs", ())]
        return out

    async def incremental_alter_configs(self, resource: tuple[int, str], set_configs: Mapping[str, str],
                                        delete_configs: Iterable[str] = (), *, validate_only: bool = False) -> None:
        """SET and DELETE configs of one resource (through the controller); raises its error."""
        ops = [{"name": k, "op": 0, "value": str(v)} for k, v in set_configs.items()]
        ops += [{"name": k, "op": 1} for k in delete_configs]
        body = {"resources": [{"resource_type": int(resource[0]), "resource_name": resource[1], "configs": ops}],
                "validate_only": validate_only}
        resp = await self._any(ApiKey.INCREMENTAL_ALTER_CONFIGS, body)
        for r in resp.get("results", ()):
            if r.get("error"):
                raise KafkaError(r["error"], r.get("message") or "", remote=True)

    # -- cluster -----------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        resp = await self._any(ApiKey.DESCRIBE_CLUSTER, {})
        return ClusterDescription(resp.get("cluster_id"), resp.get("controller_id", -1), tuple(
            BrokerDescription(b["node_id"], b["host"], b["port"], b.get("rack") or None,
                              b.get("fenced", False), b.get("broker_epoch", -1))
            for b in sorted(resp.get("brokers", ()), key=lambda b: b["node_id"])))

    async def describe_quorum(self) -> dict[str, Any]:
        """The metadata quorum as the controller reports it (DescribeQuorum, forwarded by a broker)."""
        return await self._any(ApiKey.DESCRIBE_QUORUM, {})

    async def brokers(self) -> dict[int, Address]:
        """Live brokers from Metadata: node id -> (host, port) on this listener."""
        resp = await self.metadata([])
        return {b["node_id"]: (b["host"], b["port"]) for b in resp.get("brokers", ())}

    # -- offsets ------------------------------------------------------------------

    async def list_offsets(self, specs: Mapping[TopicPartition, int], *,
                           timeout_ms: int | None = None) -> dict[TopicPartition, OffsetResult]:
        """`{tp: LATEST_TIMESTAMP | EARLIEST_TIMESTAMP}` -> offsets (latest = the high watermark)."""
        await self.net.refresh_metadata()
        return await list_offsets(self.net, specs, timeout_ms=timeout_ms or self.api_timeout_ms)

    async def delete_records(self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
                             ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, KafkaError]]:
        """Kafka's deleteRecords: every record below each partition's offset (-1: its high watermark) is
        deleted; (low watermark per partition, the error of each partition without one)."""
        from minibroker.client.delete_records import delete_records
        return await delete_records(self.net, offsets, timeout_ms=timeout_ms or self.api_timeout_ms)

    async def topic_offsets(self, topic: str, timestamp: int = LATEST_TIMESTAMP,
                            partitions: Iterable[int] | None = None) -> dict[int, int]:
        resp = await self.metadata([topic])
        tm = parse_topic(resp["topics"][0]) if resp.get("topics") else None
        if tm is None or tm.error:
            raise KafkaError(tm.error if tm else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic}", remote=True)
        parts = [pm.partition for pm in tm.partitions]
        if partitions is not None:
            wanted = list(partitions)
            for p in wanted:
                if p not in parts:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {p}")
            parts = wanted
        self.net.want_topics([topic])
        res = await self.list_offsets({TopicPartition(topic, p): timestamp for p in parts})
        return {tp.partition: r.offset for tp, r in sorted(res.items())}

    async def partition_offsets(self, partitions: Iterable[TopicPartition], timestamp: int = LATEST_TIMESTAMP, *,
                                timeout_ms: int | None = None
                                ) -> tuple[dict[TopicPartition, OffsetResult], dict[TopicPartition, KafkaError]]:
        """Each partition's offset, or its error: a partition without a leader fails at once
        (LEADER_NOT_AVAILABLE) instead of being retried; others are retried until `timeout_ms`."""
        tps = list(partitions)
        self.net.want_topics({tp.topic for tp in tps})
        await self.net.refresh_metadata()
        failed: dict[TopicPartition, KafkaError] = {}
        specs: dict[TopicPartition, int] = {}
        for tp in tps:
            if self.net.cache.leader_id(tp) is None:
                code = self.net.cache.topic_error(tp.topic) or ErrorCode.LEADER_NOT_AVAILABLE
                failed[tp] = KafkaError(code, f"{tp}: no leader (partition offline)" if code ==
                                        ErrorCode.LEADER_NOT_AVAILABLE else f"{tp}", remote=True)
            else:
                specs[tp] = timestamp
        answers, errors = await list_offsets_settled(self.net, specs, timeout_ms=timeout_ms or self.api_timeout_ms)
        failed.update(errors)
        return answers, failed

    # -- elections ------------------------------------------------------------------

    async def elect_leaders(self, election_type: str, partitions: Iterable[TopicPartition] | None = None,
                            timeout_ms: int = 30_000) -> dict[TopicPartition, KafkaError | None]:
        """Preferred or unclean election (None = all partitions); each partition's error or None."""
        et = ELECTION_TYPES[election_type]
        topics = None if partitions is None else _by_topic(partitions)
        resp = await self._any(ApiKey.ELECT_LEADERS, {"election_type": et, "topics": topics, "timeout_ms": timeout_ms})
        out: dict[TopicPartition, KafkaError | None] = {}
        for t in resp.get("results", ()):
            for p in t.get("partitions", ()):
                code = p.get("error", 0)
                out[TopicPartition(t["topic"], p["partition"])] = (
                    KafkaError(code, p.get("message") or "", remote=True) if code else None)
        return out

    # -- reassignment (KIP-455) -------------------------------------------------------

    async def alter_partition_reassignments(self, targets: Mapping[TopicPartition, Sequence[int] | None], *,
                                            timeout_ms: int = 30_000) -> dict[TopicPartition, KafkaError | None]:
        """Kafka's alterPartitionReassignments: each partition's target replicas (None cancels its
        reassignment); each partition's error or None once the controller accepted it."""
        grouped: dict[str, list[dict[str, Any]]] = {}
        for tp, replicas in targets.items():
            grouped.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "replicas": None if replicas is None else list(replicas)})
        resp = await self._any(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
            "topics": [{"topic": t, "partitions": ps} for t, ps in grouped.items()], "timeout_ms": timeout_ms})
        out: dict[TopicPartition, KafkaError | None] = {}
        for t in resp.get("topics", ()):
            for p in t["partitions"]:
                code = p.get("error", 0)
                out[TopicPartition(t["topic"], p["partition"])] = (
                    KafkaError(code, p.get("message") or "", remote=True) if code else None)
        return out

    async def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None, *,
                                           timeout_ms: int | None = None
                                           ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """The partitions being reassigned (all, or among `partitions`): (replicas, adding, removing) each."""
        topics = None if partitions is None else _by_topic(partitions)
        body: dict[str, Any] = {"topics": topics}
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        resp = await self._any(ApiKey.LIST_PARTITION_REASSIGNMENTS, body, timeout_ms)
        return {TopicPartition(t["topic"], p["partition"]): (p["replicas"], p["adding_replicas"],
                                                             p["removing_replicas"])
                for t in resp.get("topics", ()) for p in t["partitions"]}

    # -- per-broker observability -------------------------------------------------------

    async def api_versions(self, address: str | Address) -> dict[str, Any]:
        addr = parse_hostport(address) if isinstance(address, str) else address
        return check(await self.net.request_address(addr, ApiKey.API_VERSIONS, {}, channel="meta"))

    async def describe_log_dirs(self, broker_ids: Iterable[int] | None = None, topics: Iterable[str] | None = None
                                ) -> dict[int, list[LogDirDescription]]:
        """Kafka's describeLogDirs: each broker's log directories (minibroker's: one per broker), the replicas in
        them (all, or those of `topics`) with their size and offset lag, and the volume's total and usable bytes.
        Brokers not in the metadata raise BROKER_NOT_AVAILABLE."""
        addresses = await self.brokers()
        wanted = sorted(addresses) if broker_ids is None else list(broker_ids)
        missing = [b for b in wanted if b not in addresses]
        if missing:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker(s) {missing} not in the cluster's metadata")
        body: dict[str, Any] = {"topics": None}
        if topics is not None:
            names = list(topics)
            tds = await self.describe_topics(names)
            body["topics"] = [{"topic": td.name, "partitions": [pd.partition for pd in td.partitions]} for td in tds]
        out: dict[int, list[LogDirDescription]] = {}
        for b in wanted:
            resp = check(await self.net.request_address(addresses[b], ApiKey.DESCRIBE_LOG_DIRS, body, channel="meta"))
            out[b] = [LogDirDescription(d["log_dir"], d["error"], {
                TopicPartition(t["topic"], p["partition"]): ReplicaLogInfo(p["size"], p["offset_lag"], p["is_future"])
                for t in d["topics"] for p in t["partitions"]}, d["total_bytes"], d["usable_bytes"])
                for d in resp["results"]]
        return out

    async def replica_status(self, address: str | Address, topics: list[str] | None = None) -> dict[str, Any]:
        addr = parse_hostport(address) if isinstance(address, str) else address
        return check(await self.net.request_address(addr, ApiKey.REPLICA_STATUS, {"topics": topics}, channel="meta"))

    async def events(self, address: str | Address, from_seq: int = 0, max_wait_ms: int = 0,
                     max_events: int = 1000) -> dict[str, Any]:
        """One Events long-poll on its own connection (so it never delays other calls)."""
        addr = parse_hostport(address) if isinstance(address, str) else address
        return check(await self.net.request_address(
            addr, ApiKey.EVENTS, {"from_seq": from_seq, "max_wait_ms": max_wait_ms, "max_events": max_events},
            channel="events", timeout_ms=max_wait_ms + self.net.request_timeout_ms))


def _by_topic(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    """[{topic, partitions: [ids]}] in the order the topics first appear."""
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic": t, "partitions": ps} for t, ps in grouped.items()]
