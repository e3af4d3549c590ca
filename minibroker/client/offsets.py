"""ListOffsets for clients: earliest (log start), latest (high watermark), by timestamp or
the max timestamp (-3), per partition.

Shared by the consumer's position resets and the admin's `list_offsets`.
Requests go to each partition's leader, grouped per broker; partitions whose
leader is unknown, or that answer a retriable error, are retried after a
metadata refresh until the deadline.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from collections.abc import Mapping

from minibroker.client.network import ClientNetwork
from minibroker.client.settle import settle
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, ApiKey

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "OffsetResult", "list_offsets_once",
           "list_offsets", "list_offsets_settled"]


@dataclass(frozen=True)
class OffsetResult:
    offset: int
    leader_epoch: int
    timestamp: int


async def list_offsets_once(net: ClientNetwork, specs: Mapping[TopicPartition, int], *,
                            timeout_ms: int | None = None
                            ) -> tuple[dict[TopicPartition, OffsetResult], dict[TopicPartition, KafkaError]]:
    """One round: send a ListOffsets to each leader; returns (answers, errors per partition)."""
    by_node: dict[int, dict[str, list[dict]]] = {}
    errors: dict[TopicPartition, KafkaError] = {}
    for tp, ts in specs.items():
        leader = net.cache.leader_id(tp)
        if leader is None:
            errors[tp] = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp}: no known leader")
            continue
        by_node.setdefault(leader, {}).setdefault(tp.topic, []).append(
            {"partition": tp.partition, "timestamp": ts, "current_leader_epoch": net.cache.leader_epoch(tp)})

    async def one(node: int, topics: dict[str, list[dict]]) -> None:
        body = {"replica_id": -1, "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
        try:
            resp = await net.request(node, ApiKey.LIST_OFFSETS, body, channel="meta", timeout_ms=timeout_ms)
            if resp.get("error"):
                raise KafkaError(resp["error"], resp.get("message", ""), remote=True)
        except KafkaError as exc:
            for t, ps in topics.items():
                for p in ps:
                    errors[TopicPartition(t, p["partition"])] = KafkaError(exc.code, f"broker {node}: {exc.message}",
                                                                           remote=exc.remote)
            return
        for t in resp.get("topics", ()):
            for p in t.get("partitions", ()):
                tp = TopicPartition(t["topic"], p["partition"])
                if p.get("error", 0):
                    errors[tp] = KafkaError(p["error"], f"{tp} on broker {node}", remote=True)
                else:
                    answers[tp] = OffsetResult(p["offset"], p.get("leader_epoch", -1), p.get("timestamp", -1))

    answers: dict[TopicPartition, OffsetResult] = {}
    await asyncio.gather(*(one(n, t) for n, t in by_node.items()))
    for tp in specs:
        if tp not in answers and tp not in errors:
            errors[tp] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{tp}: no answer")
    return answers, errors


async def list_offsets_settled(net: ClientNetwork, specs: Mapping[TopicPartition, int], *, timeout_ms: int = 60_000
                               ) -> tuple[dict[TopicPartition, OffsetResult], dict[TopicPartition, KafkaError]]:
    """Retry retriable errors (refreshing metadata when they say so) until `timeout_ms`;
    returns (answers, the errors left per partition) instead of raising, so one bad
    partition does not hide the others' offsets."""
    net.want_topics({tp.topic for tp in specs})
    if any(net.cache.leader_id(tp) is None for tp in specs):
        try:
            await net.refresh_metadata()
        except KafkaError:
            pass

    async def once(todo: dict[TopicPartition, int], _ms_left: int
                   ) -> tuple[dict[TopicPartition, OffsetResult], dict[TopicPartition, KafkaError]]:
        return await list_offsets_once(net, todo)
    return await settle(net, specs, once, timeout_ms)


async def list_offsets(net: ClientNetwork, specs: Mapping[TopicPartition, int], *,
                       timeout_ms: int = 60_000) -> dict[TopicPartition, OffsetResult]:
    """As `list_offsets_settled`, raising the first error left (a fatal one at once)."""
    out, failed = await list_offsets_settled(net, specs, timeout_ms=timeout_ms)
    if failed:
        raise next(iter(failed.values()))
    return out
