"""DeleteRecords for the admin client (Kafka's Admin.deleteRecords, kafka-delete-records).

Each partition's request goes to its leader, grouped per broker; a partition
whose leader is unknown, or that answers a retriable error (a leader moved),
is sent again after a metadata refresh until the deadline (client/settle.py). The answer per
partition is its low watermark (every alive replica's log start reached the
offset) or the error it ended with.
"""
from __future__ import annotations

from collections.abc import Mapping

from minibroker.client.network import ClientNetwork
from minibroker.client.settle import settle, to_leaders
from minibroker.client.types import TopicPartition
from minibroker.errors import KafkaError
from minibroker.protocol.api import ApiKey


async def _once(net: ClientNetwork, offsets: Mapping[TopicPartition, int], timeout_ms: int
                ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, KafkaError]]:
    return await to_leaders(net, offsets, ApiKey.DELETE_RECORDS,
                            lambda tp, offset: {"partition": tp.partition, "offset": offset},
                            lambda topics: {"topics": topics, "timeout_ms": timeout_ms},
                            lambda p: int(p["low_watermark"]),
                            timeout_ms=timeout_ms + net.request_timeout_ms, partition_messages=True)


async def delete_records(net: ClientNetwork, offsets: Mapping[TopicPartition, int], *, timeout_ms: int = 60_000
                         ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, KafkaError]]:
    """Delete every record below each partition's offset (-1: below its high watermark); returns (low
    watermark per partition, the error per partition that did not get one)."""
    net.want_topics({tp.topic for tp in offsets})
    await net.refresh_metadata()

    async def once(todo: dict[TopicPartition, int], ms_left: int
                   ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, KafkaError]]:
        return await _once(net, todo, ms_left)
    return await settle(net, offsets, once, timeout_ms)
