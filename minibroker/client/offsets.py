"""ListOffsets for clients: earliest (log start), latest (high watermark), by timestamp or
the max timestamp (-3), per partition.

Shared by the consumer's position resets and the admin's `list_offsets`.
Requests go to each partition's leader, grouped per broker; partitions whose
leader is unknown, or that answer a retriable error, are retried after a
metadata refresh until the deadline.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping

from minibroker.client.network import ClientNetwork
from minibroker.client.settle import settle, to_leaders
from minibroker.client.types import TopicPartition
from minibroker.errors import KafkaError
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
    return await to_leaders(
        net, specs, ApiKey.LIST_OFFSETS,
        lambda tp, ts: {"partition": tp.partition, "timestamp": ts, "current_leader_epoch": net.cache.leader_epoch(tp)},
        lambda topics: {"replica_id": -1, "topics": topics},
        lambda p: OffsetResult(p["offset"], p.get("leader_epoch", -1), p.get("timestamp", -1)),
        timeout_ms=timeout_ms)


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
