"""The verifiable producer: numbered records, every outcome logged.

Owns: the send loop (values `"{run}p{partition}-{seq}"`, round-robin over
the partitions, an optional rate, a bound on records in flight), and the
log of outcomes as the checker's `Ack`s and `Failure`s.

As Kafka's VerifiableProducer it runs with `retries=0`: every record is
sent once, so each outcome belongs to exactly one attempt and a failure's
error says whether the record can be in the log (definite: refused before
the append, or never sent) or not known (timeouts, connection loss,
`*_AFTER_APPEND`). With retries a batch could be appended by one attempt
and refused definitely by the next, and the checker would report a false
read-of-failed.

With `enable.idempotence=true` in its config it retries instead (as Kafka
clients >= 3.0 do by default): the broker's sequence checks make a retried
batch land once, so the checker's `duplicated` must stay 0; a "definite"
error after more than one attempt is logged as `RETRIED_<error>`, which the
checker counts as indeterminate (an earlier attempt may have appended it).

Must not know: how records are read back or what the checker concludes.
"""
from __future__ import annotations

import asyncio
import secrets
from typing import Any
from collections.abc import Mapping

from minibroker import clock
from minibroker.client.accumulator import ProducerBatch
from minibroker.client.producer import Producer
from minibroker.errors import KafkaError, error_name
from minibroker.verify.checker import DEFINITE_FAILURES, Ack, Failure

RETRIED = "RETRIED_"           # prefix: a definite error after an earlier attempt that may have appended
NEVER_SENT = "NEVER_SENT"      # expired in the client's buffer before any attempt: definitely not in the log

PRODUCER_SETTINGS: dict[str, str] = {
    "acks": "all",
    "retries": "0",
    "linger.ms": "2",
    "request.timeout.ms": "5000",
    "delivery.timeout.ms": "10000",
    "max.block.ms": "10000",
    "metadata.max.age.ms": "2000",
    "retry.backoff.ms": "50",
    "retry.backoff.max.ms": "500",
    "reconnect.backoff.max.ms": "500",
    "socket.connection.setup.timeout.ms": "2000",
}


def make_value(run: str, partition: int, seq: int) -> str:
    return f"{run}p{partition}-{seq}"


def parse_value(run: str, value: str) -> tuple[int, int] | None:
    """(partition, seq) of a value this run produced, else None."""
    if not value.startswith(run):
        return None
    body = value[len(run):]
    if not body.startswith("p"):
        return None
    part, sep, seq = body[1:].partition("-")
    if not sep or not part.isdigit() or not seq.isdigit():
        return None
    return int(part), int(seq)


def new_run_id() -> str:
    return secrets.token_hex(3) + ":"


class VerifiableProducer:
    """Invariant: every value sent is in exactly one of `acks`, `failures`
    or the in-flight set; `acks`/`failures` only grow."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, run: str | None = None,
                 config: Mapping[str, Any] | None = None, rate: float = 0.0, max_in_flight: int = 500) -> None:
        self.topic = topic
        self.partitions = partitions
        self.run = run if run is not None else new_run_id()
        cfg = dict(PRODUCER_SETTINGS)
        cfg.update({k: str(v) for k, v in (config or {}).items()})
        cfg.setdefault("enable.idempotence", "false")
        if cfg["enable.idempotence"].lower() == "true" and cfg["retries"] == "0":
            cfg["retries"] = "2147483647"
        self.producer = Producer(bootstrap, cfg)
        self.idempotent = self.producer.idempotent
        self.rate = rate
        self.acks: list[Ack] = []
        self.failures: list[Failure] = []
        self.sent = 0
        self._acked_by_p = [0] * partitions
        self._next_seq = [0] * partitions
        self._window = asyncio.Semaphore(max_in_flight)
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._progress = asyncio.Event()
        self.last_error: str | None = None

    # -- outcomes ------------------------------------------------------------------

    def _on_batch_done(self, batch: ProducerBatch, base_offset: int, error: KafkaError | None) -> None:
        p = batch.tp.partition
        if error is None:
            for i, rec in enumerate(batch.records):
                value = rec[1].decode()
                seq = parse_value(self.run, value)[1]  # type: ignore[index]
                self.acks.append(Ack(value, p, base_offset + i, seq))
            self._acked_by_p[p] += len(batch.records)
        else:
            name = NEVER_SENT if batch.attempts == 0 else error_name(int(error.code))
            if batch.attempts > 1 and name in DEFINITE_FAILURES:
                name = RETRIED + name
            self.last_error = f"{name}: {error}"
            for rec in batch.records:
                value = rec[1].decode()
                seq = parse_value(self.run, value)[1]  # type: ignore[index]
                self.failures.append(Failure(value, p, name, seq))
        for _ in batch.records:
            self._window.release()
        self._progress.set()

    # -- the send loop ---------------------------------------------------------------

    async def start(self, records: int | None = None, duration_s: float | None = None) -> VerifiableProducer:
        """Start sending in the background until `records` were sent or `duration_s`
        passed (whichever first; None = no limit) or `stop()`."""
        await self.producer.start()
        self.producer.on_batch_done = self._on_batch_done
        await self.producer.partitions_for(self.topic)
        self._task = asyncio.ensure_future(self._run(records, duration_s))
        return self

    async def sending_done(self) -> None:
        """Until the send loop ended (its limits reached); outcomes may still be pending."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _run(self, records: int | None, duration_s: float | None) -> None:
        start = clock.monotonic()
        p = 0
        while not self._stop.is_set():
            if records is not None and self.sent >= records:
                return
            now = clock.monotonic()
            if duration_s is not None and now - start >= duration_s:
                return
            if self.rate > 0:
                due = start + self.sent / self.rate
                if due > now:
                    await self._sleep_or_stop(due - now)
                    continue
            await self._window.acquire()
            if self._stop.is_set():
                self._window.release()
                return
            seq = self._next_seq[p]
            self._next_seq[p] += 1
            value = make_value(self.run, p, seq)
            try:
                await self.producer.send(self.topic, value.encode(), partition=p)
            except KafkaError as exc:     # refused by the client before buffering: never sent
                self._window.release()
                self.failures.append(Failure(value, p, NEVER_SENT, seq))
                self.last_error = f"{NEVER_SENT}: {exc}"
            self.sent += 1
            p = (p + 1) % self.partitions

    async def _sleep_or_stop(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Stop sending, wait for every outcome (flush), close the client."""
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        try:
            await self.producer.flush(int(timeout_s * 1000))
        except KafkaError:
            pass
        await self.producer.close(0)

    # -- progress ------------------------------------------------------------------------

    async def wait_acked(self, count: int, timeout_s: float = 30.0, partition: int | None = None) -> None:
        """Until at least `count` acks (on `partition`, if given) were logged in total."""
        deadline = clock.monotonic() + timeout_s
        while self._acked(partition) < count:
            if self._task is not None and self._task.done():
                self._task.result()
            left = deadline - clock.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self._acked(partition)} of {count} records acknowledged after {timeout_s}s"
                                   + (f" on partition {partition}" if partition is not None else "")
                                   + (f" (last failure: {self.last_error})" if self.last_error else ""))
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), min(left, 0.5))
            except TimeoutError:
                pass

    def _acked(self, partition: int | None) -> int:
        return len(self.acks) if partition is None else self._acked_by_p[partition]

    def acked_count(self, partition: int | None = None) -> int:
        return self._acked(partition)

    def last_acked_offsets(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for a in self.acks:
            if a.offset > out.get(a.partition, -1):
                out[a.partition] = a.offset
        return out

    def error_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.failures:
            out[f.error] = out.get(f.error, 0) + 1
        return out


