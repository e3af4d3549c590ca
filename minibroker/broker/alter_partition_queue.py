"""AlterPartition batching (Kafka's AlterPartitionManager, I5): a pure queue.

Owns: the ISR changes this broker's leaders proposed and the controller has
not answered yet, at most one per partition, and which of them are in the
one outstanding request. Builds the request body and matches the answer.

Must not know: sockets, asyncio, the clock, the partition leader cores (the
driver, `minibroker.broker.controller_channel.AlterPartitionManager`,
resolves their futures).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minibroker.errors import ErrorCode

PartitionKey = tuple[str, int]


@dataclass
class AlterPartitionItem:
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr_with_epochs: list[dict[str, int]]
    leader_recovery_state: int = 0


class AlterPartitionQueue:
    """Invariant: each partition appears at most once in `_items` (queued or
    in flight); `_inflight` is the set of keys in the one outstanding request,
    or None when nothing is in flight."""

    def __init__(self) -> None:
        self._items: dict[PartitionKey, AlterPartitionItem] = {}
        self._inflight: set[PartitionKey] | None = None

    def __len__(self) -> int:
        return len(self._items)

    @property
    def in_flight(self) -> bool:
        return self._inflight is not None

    def submit(self, item: AlterPartitionItem) -> bool:
        """False when that partition already has a change queued or in flight
        (the caller answers OPERATION_NOT_ATTEMPTED, as Kafka)."""
        key = (item.topic, item.partition)
        if key in self._items:
            return False
        self._items[key] = item
        return True

    def maybe_build_request(self, broker_id: int, broker_epoch: int) -> dict[str, Any] | None:
        """Everything queued goes into the next request, if none is in flight."""
        if self._inflight is not None or not self._items:
            return None
        self._inflight = set(self._items)
        topics: dict[str, list[dict[str, Any]]] = {}
        for it in self._items.values():
            topics.setdefault(it.topic, []).append({
                "partition": it.partition, "leader_epoch": it.leader_epoch,
                "partition_epoch": it.partition_epoch, "new_isr_with_epochs": it.new_isr_with_epochs,
                "leader_recovery_state": it.leader_recovery_state})
        return {"broker_id": broker_id, "broker_epoch": broker_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}

    def on_failure(self) -> None:
        """Transport error or retriable top-level error: keep everything queued, resend later."""
        self._inflight = None

    def on_fatal(self) -> list[PartitionKey]:
        """A top-level error that resending cannot fix: drop the in-flight partitions."""
        keys = list(self._inflight or ())
        for k in keys:
            self._items.pop(k, None)
        self._inflight = None
        return keys

    def on_response(self, resp: dict[str, Any]) -> list[tuple[PartitionKey, dict[str, Any]]]:
        """A response without a top-level error: one result per in-flight partition
        (UNKNOWN_SERVER_ERROR for any the controller left out)."""
        inflight = self._inflight or set()
        out: list[tuple[PartitionKey, dict[str, Any]]] = []
        seen: set[PartitionKey] = set()
        for t in resp.get("topics", []):
            for p in t.get("partitions", []):
                key = (t["topic"], p["partition"])
                if key in inflight and key not in seen:
                    seen.add(key)
                    out.append((key, dict(p)))
        for key in sorted(inflight - seen):
            out.append((key, {"partition": key[1], "error": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                              "message": "controller response did not mention this partition"}))
        for key, _ in out:
            self._items.pop(key, None)
        self._inflight = None
        return out

    def drain(self) -> list[PartitionKey]:
        keys = list(self._items)
        self._items.clear()
        self._inflight = None
        return keys
