"""The broker's data path: every partition replica this broker hosts.

Owns: the `Partition` objects (leader or follower role, driven by metadata),
Produce / Fetch / ListOffsets handling, delayed produces and fetches
(purgatory), the follower fetchers, the periodic ISR check and HW
checkpoints, and carrying ISR proposals to the controller.

Must not know: how metadata arrives (the control path calls `on_metadata`),
how AlterPartition travels (`AlterPartitionManager.submit`), replication
rules (they live in minibroker.replication.PartitionLeader).

SKELETON: the signatures of docs/dev/broker-contract.md, so the control path
can wire it; the bodies land in the following commits.
"""
from __future__ import annotations

from typing import Any, Callable

from minibroker.config import Config
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import EventSink
from minibroker.metadata import BrokerRecord, PartitionRecord
from minibroker.net.server import RequestContext


class ReplicaManager:
    def __init__(self, *, node_id: int, config: Config, log_manager: Any, image: Any,
                 alter_partition: Any, peers: Any, events: EventSink,
                 broker_epoch: Callable[[], int]) -> None:
        self.node_id = node_id
        self.config = config
        self.log_manager = log_manager
        self.image = image
        self.alter_partition = alter_partition
        self.peers = peers
        self.events = events
        self.broker_epoch = broker_epoch

    async def start(self) -> None:
        """Start the ISR-check and HW-checkpoint timers."""

    async def shutdown(self) -> None:
        """Stop fetchers, fail purgatory, checkpoint HWs, shut the logs down."""

    def on_metadata(self, partitions: list[PartitionRecord], brokers: list[BrokerRecord], now_ms: int) -> None:
        """Apply a batch of metadata changes (T1/T2)."""

    async def handle_produce(self, ctx: RequestContext, body: dict) -> dict | None:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "produce not wired yet")

    async def handle_fetch(self, ctx: RequestContext, body: dict) -> dict:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "fetch not wired yet")

    async def handle_list_offsets(self, ctx: RequestContext, body: dict) -> dict:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "list offsets not wired yet")

    def replica_status(self, topics: list[str] | None) -> dict:
        return {"node_id": self.node_id, "partitions": []}

    def leaderships(self) -> list[tuple[str, int]]:
        return []

    def high_watermark(self, topic: str, partition: int) -> int | None:
        return None
