"""The verifiable consumer: what each partition holds, read from offset 0.

Owns: a consumer assigned every partition of the topic from the earliest
offset, the list of records it read (the checker's `Read`s), and the two
ways of reading:

  follow     runs beside the producer for the whole run (a live reader:
             every record it gets was below some replica's HW, so it must
             still be there at the end), noting position resets and HW
             regressions it observes;
  read_all   the final pass after faults healed: from offset 0 until every
             partition's position reaches a target (the HW after the run,
             and past the last acknowledged offset), with a deadline.

Only values of this run (by prefix) are logged as reads; others are
counted as `foreign`. Must not know what was acknowledged or why.
"""
from __future__ import annotations

import asyncio
from typing import Any
from collections.abc import Mapping

from minibroker import clock
from minibroker.client.consumer import Consumer
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.verify.checker import Read

CONSUMER_SETTINGS: dict[str, str] = {
    "auto.offset.reset": "earliest",
    "fetch.max.wait.ms": "200",
    "request.timeout.ms": "5000",
    "metadata.max.age.ms": "2000",
    "retry.backoff.ms": "50",
    "retry.backoff.max.ms": "500",
    "reconnect.backoff.max.ms": "500",
    "socket.connection.setup.timeout.ms": "2000",
}


class VerifiableConsumer:
    """Invariant: `reads` holds each (partition, offset) at most once per pass
    (a re-read after a reset is not logged again unless the value differs)."""

    def __init__(self, bootstrap: str, topic: str, *, run: str = "",
                 config: Mapping[str, Any] | None = None) -> None:
        self.topic = topic
        self.run = run
        cfg = dict(CONSUMER_SETTINGS)
        cfg.update({k: str(v) for k, v in (config or {}).items()})
        self.consumer = Consumer(bootstrap, cfg)
        self.reads: list[Read] = []
        self.foreign = 0
        self.notes: list[str] = []          # resets, errors: what a reader of the report wants to know
        self.hw_regressions: list[str] = []
        self._seen: dict[tuple[int, int], str] = {}
        self._positions: dict[int, int] = {}
        self._hw: dict[int, int] = {}
        self._tps: list[TopicPartition] = []
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()

    async def start(self) -> VerifiableConsumer:
        await self.consumer.start()
        self.consumer.on_note = self._on_note
        self._tps = await self.consumer.assign_topic(self.topic)
        for tp in self._tps:
            self.consumer.seek(tp, 0)
        return self

    def _on_note(self, note: str) -> None:
        if "reset" in note:
            self.notes.append(note)

    def _take(self, records: list[Any]) -> None:
        for r in records:
            key = (r.partition, r.offset)
            value = r.value.decode(errors="replace") if r.value is not None else ""
            prev_pos = self._positions.get(r.partition, 0)
            if r.offset < prev_pos - 1:
                self.notes.append(f"partition {r.partition}: position went back from {prev_pos} to {r.offset}")
            self._positions[r.partition] = r.offset + 1
            if not value.startswith(self.run):
                self.foreign += 1
                continue
            if self._seen.get(key) == value:
                continue
            self._seen[key] = value
            self.reads.append(Read(value, r.partition, r.offset))
        for tp in self._tps:
            hw = self.consumer.highwater(tp)
            if hw is None:
                continue
            last = self._hw.get(tp.partition, -1)
            if hw < last and self.consumer.fetched_from(tp) is not None:
                self.hw_regressions.append(f"partition {tp.partition}: HW {last} -> {hw} "
                                           f"(from broker {self.consumer.fetched_from(tp)})")
            self._hw[tp.partition] = max(hw, last)

    async def _poll(self, timeout_ms: int) -> None:
        try:
            self._take(await self.consumer.poll(timeout_ms))
        except KafkaError as exc:
            self.notes.append(f"poll: {exc}")
            if exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                self.consumer.seek_to_beginning()
            await asyncio.sleep(0.05)

    # -- follow (live) ------------------------------------------------------------------

    def follow(self) -> None:
        """Read in the background until `stop()`."""
        self._task = asyncio.ensure_future(self._follow())

    async def _follow(self) -> None:
        while not self._stop.is_set():
            await self._poll(200)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        await self.consumer.close()

    # -- read everything -----------------------------------------------------------------

    def position(self, partition: int) -> int:
        return self._positions.get(partition, 0)

    async def read_all(self, targets: dict[int, int], timeout_s: float = 30.0) -> dict[int, int]:
        """Poll until every partition's position is >= its target offset, or the deadline;
        returns the partitions (-> position) that fell short."""
        deadline = clock.monotonic() + timeout_s
        while True:
            short = {p: self.position(p) for p, t in targets.items() if self.position(p) < t}
            if not short or clock.monotonic() > deadline:
                return short
            await self._poll(200)
