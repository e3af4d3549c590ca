"""Per-partition requests to partition leaders, retried until each partition has settled.

Owns what ListOffsets and DeleteRecords share on the client side: one round
(`to_leaders`: each partition's entry to its leader, one request per broker,
answered per partition), and the loop (`settle`) that sends rounds for the
partitions left, keeps the answers and fatal errors, and sends the retriable
ones again after the metadata refresh backoff (refreshing metadata first when
an error says the leader moved), until every partition has an answer or a
fatal error or the deadline passed.

Must not know: which API the round sends, or how answers look.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from minibroker.client.network import ClientNetwork, now_ms
from minibroker.client.retry import is_retriable, needs_metadata
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.api import ApiKey

S = TypeVar("S")
R = TypeVar("R")
Settled = tuple[dict[TopicPartition, R], dict[TopicPartition, KafkaError]]
Round = Callable[[dict[TopicPartition, S], int], Awaitable[Settled[R]]]


async def to_leaders(net: ClientNetwork, specs: Mapping[TopicPartition, S], api: ApiKey,
                     entry: Callable[[TopicPartition, S], dict[str, Any]],
                     body: Callable[[list[dict[str, Any]]], dict[str, Any]],
                     answer: Callable[[dict[str, Any]], R], *, timeout_ms: int | None = None,
                     partition_messages: bool = False) -> Settled[R]:
    """One round: `entry(tp, spec)` of each partition, grouped under its topic into `body(topics)` for its
    leader; a partition entry of the answer without an error gives `answer(entry)`. A partition without a
    known leader, or whose broker's request failed, gets that error. `partition_messages`: an erring
    partition's own `message`, where the answer has one, is its error's message."""
    by_node: dict[int, dict[str, list[dict[str, Any]]]] = {}
    errors: dict[TopicPartition, KafkaError] = {}
    for tp, spec in specs.items():
        leader = net.cache.leader_id(tp)
        if leader is None:
            errors[tp] = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp}: no known leader")
            continue
        by_node.setdefault(leader, {}).setdefault(tp.topic, []).append(entry(tp, spec))
    answers: dict[TopicPartition, R] = {}

    async def one(node: int, topics: dict[str, list[dict[str, Any]]]) -> None:
        try:
            resp = await net.request(node, api, body([{"topic": t, "partitions": ps} for t, ps in topics.items()]),
                                     channel="meta", timeout_ms=timeout_ms)
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
                    message = (partition_messages and p.get("message")) or f"{tp} on broker {node}"
                    errors[tp] = KafkaError(p["error"], message, remote=True)
                else:
                    answers[tp] = answer(p)
    await asyncio.gather(*(one(n, t) for n, t in by_node.items()))
    for tp in specs:
        if tp not in answers and tp not in errors:
            errors[tp] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{tp}: no answer")
    return answers, errors


async def settle(net: ClientNetwork, specs: Mapping[TopicPartition, S], once: Round[S, R], timeout_ms: int
                 ) -> Settled[R]:
    """(answer per partition, the error left per partition). `once(todo, ms_left)` sends one round."""
    deadline = now_ms() + timeout_ms
    todo = dict(specs)
    out: dict[TopicPartition, R] = {}
    failed: dict[TopicPartition, KafkaError] = {}
    while True:
        answers, errors = await once(todo, max(deadline - now_ms(), 0))
        out.update(answers)
        failed.update({tp: e for tp, e in errors.items() if not is_retriable(int(e.code))})
        retry = {tp: e for tp, e in errors.items() if tp not in failed}
        if not retry or now_ms() >= deadline:
            failed.update(retry)
            return out, failed
        todo = {tp: specs[tp] for tp in retry}
        if any(needs_metadata(int(e.code)) or e.code == ErrorCode.NETWORK_EXCEPTION for e in retry.values()):
            try:
                await net.refresh_metadata()
            except KafkaError:
                pass
        await asyncio.sleep(net.cache.refresh_backoff_ms / 1000)
