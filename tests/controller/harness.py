"""A manual-clock harness around the pure controller core (no sockets, no files)."""
from __future__ import annotations

import random
from typing import Any

from minibroker.controller.settings import ControllerSettings
from minibroker.controller.state import ControllerState, Outcome
from minibroker.metadata import PartitionRecord

SESSION_MS = 6000


class Harness:
    def __init__(self, **settings: Any) -> None:
        settings.setdefault("session_timeout_ms", SESSION_MS)
        self.state = ControllerState(ControllerSettings(**settings), rng=random.Random(0), fixed_placement_start=0)
        self.now = 1_000
        self.epochs: dict[int, int] = {}
        self.log: list[Outcome] = []
        self._incarnations = 0

    def _keep(self, out: Outcome) -> Outcome:
        self.log.append(out)
        return out

    def advance(self, ms: int) -> None:
        self.now += ms

    def register(self, b: int, rack: str | None = None, prev: int = -1, incarnation: str | None = None) -> Outcome:
        self._incarnations += 1
        out = self._keep(self.state.register_broker(
            self.now, b, incarnation or f"inc-{b}-{self._incarnations}", rack,
            [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + b}], prev))
        if out.response["error"] == 0:
            self.epochs[b] = out.response["broker_epoch"]
        return out

    def heartbeat(self, b: int, *, offset: int | None = None, epoch: int | None = None, **kw: Any) -> Outcome:
        off = self.state.next_offset - 1 if offset is None else offset
        return self._keep(self.state.heartbeat(self.now, b, self.epochs[b] if epoch is None else epoch, off, **kw))

    def start(self, *brokers: int, racks: dict[int, str] | None = None) -> None:
        for b in brokers:
            self.register(b, (racks or {}).get(b))
        for b in brokers:
            assert self.heartbeat(b).response["is_fenced"] is False

    def beat_all(self, *except_: int) -> None:
        for b, rec in list(self.state.cluster.brokers.items()):
            if b not in except_ and not rec.fenced:
                self.heartbeat(b)

    def create(self, topic: str, assignments: list[list[int]] | None = None, configs: dict[str, str] | None = None,
               partitions: int = -1, rf: int = -1) -> Outcome:
        t: dict[str, Any] = {"topic": topic, "num_partitions": partitions, "replication_factor": rf,
                             "assignments": assignments, "configs": configs}
        return self._keep(self.state.create_topics(self.now, [t]))

    def tick(self) -> list[Outcome]:
        outs = self.state.tick(self.now)
        self.log.extend(outs)
        return outs

    def p(self, topic: str = "t", partition: int = 0) -> PartitionRecord:
        part = self.state.topics.get(topic, partition)
        assert part is not None
        return part

    def alter(self, b: int, isr: list[int], topic: str = "t", partition: int = 0, *, le: int | None = None,
              pe: int | None = None, epochs: dict[int, int] | None = None, lrs: int = 0,
              broker_epoch: int | None = None) -> dict[str, Any]:
        cur = self.p(topic, partition)
        epochs = epochs or {}
        pd = {"partition": partition, "leader_epoch": cur.leader_epoch if le is None else le,
              "partition_epoch": cur.partition_epoch if pe is None else pe,
              "new_isr_with_epochs": [{"broker_id": r, "broker_epoch": epochs.get(r, self.epochs.get(r, -1))}
                                      for r in isr],
              "leader_recovery_state": lrs}
        out = self._keep(self.state.alter_partition(
            self.now, b, self.epochs[b] if broker_epoch is None else broker_epoch,
            [{"topic": topic, "partitions": [pd]}]))
        if out.response["error"]:
            return out.response
        return out.response["topics"][0]["partitions"][0]

    def events(self, kind: str | None = None) -> list:
        return [e for o in self.log for e in o.events if kind is None or e.kind == kind]
