"""DeleteRecords for the admin client (Kafka's Admin.deleteRecords, kafka-delete-records).

Each partition's request goes to its leader, grouped per broker; a partition
whose leader is unknown, or that answers a retriable error (a leader moved),
is sent again after a metadata refresh until the deadline (client/settle.py). The answer per
partition is its low watermark (every alive replica's log start reached the
offset) or the error it ended with.
"""
from __future__ import annotations

import asyncio
from collections.abc import Mapping

from minibroker.client.network import ClientNetwork
from minibroker.client.settle import settle
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.api import ApiKey


async def _once(net: ClientNetwork, offsets: Mapping[TopicPartition, int], timeout_ms: int
                ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, KafkaError]]:
    by_node: dict[int, dict[str, list[dict]]] = {}
    errors: dict[TopicPartition, KafkaError] = {}
    for tp, offset in offsets.items():
        leader = net.cache.leader_id(tp)
        if leader is None:
            errors[tp] = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp}: no known leader")
            continue
        by_node.setdefault(leader, {}).setdefault(tp.topic, []).append({"partition": tp.partition, "offset": offset})
    answers: dict[TopicPartition, int] = {}

    async def one(node: int, topics: dict[str, list[dict]]) -> None:
        body = {"topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()], "timeout_ms": timeout_ms}
        try:
            resp = await net.request(node, ApiKey.DELETE_RECORDS, body, channel="meta",
                                     timeout_ms=timeout_ms + net.request_timeout_ms)
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
                    errors[tp] = KafkaError(p["error"], p.get("message") or f"{tp} on broker {node}", remote=True)
                else:
                    answers[tp] = p["low_watermark"]
    await asyncio.gather(*(one(n, t) for n, t in by_node.items()))
    for tp in offsets:
        if tp not in answers and tp not in errors:
            errors[tp] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{tp}: no answer")
    return answers, errors


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
