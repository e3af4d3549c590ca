"""Per-partition requests to partition leaders, retried until each partition has settled.

Owns the loop shared by ListOffsets and DeleteRecords on the client side: send
one round (`once`) for the partitions left, keep the answers, keep fatal
errors, and send the retriable ones again after the metadata refresh backoff
(refreshing metadata first when an error says the leader moved), until every
partition has an answer or a fatal error or the deadline passed.

Must not know: which API the round sends, or how answers look.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from minibroker.client.network import ClientNetwork, now_ms
from minibroker.client.retry import is_retriable, needs_metadata
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode, KafkaError

S = TypeVar("S")
R = TypeVar("R")
Settled = tuple[dict[TopicPartition, R], dict[TopicPartition, KafkaError]]
Round = Callable[[dict[TopicPartition, S], int], Awaitable[Settled[R]]]


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
