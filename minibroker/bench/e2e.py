"""End-to-end latency: a paced acks=all producer and a consumer in the same process.

Each record's value starts with its send time (`perf_counter_ns`, 8 bytes big-endian)
taken just before `Producer.send`; the consumer, a second task polling the same
partition, records for each record the time from that send to the poll that
returned it. So a figure covers batching (linger.ms), the leader's append,
replication to the ISR (the consumer reads up to the high watermark), the
fetch, decoding and this process's own scheduling.
"""
from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass

from minibroker.client.accumulator import ProducerBatch
from minibroker.client.consumer import Consumer
from minibroker.client.producer import Producer
from minibroker.errors import KafkaError

STAMP = struct.Struct(">q")
TICK_S = 0.001            # the pacing step: each tick sends what the rate owes by then
WARMUP_S = 0.5            # records sent in the first half second are not counted


@dataclass
class EndToEnd:
    target_rate: float
    sent: int
    send_seconds: float
    latencies_ms: list[float]
    received: int = 0
    drain_seconds: float = 0.0      # from the last send to the poll that returned the last record
    failed: int = 0                 # records the producer could not write (never to come back)
    first_error: str = ""

    @property
    def achieved_rate(self) -> float:
        return self.sent / self.send_seconds if self.send_seconds else 0.0


async def end_to_end(bootstrap: str, topic: str, *, rate: float, seconds: float, size: int,
                     linger_ms: int = 1) -> EndToEnd:
    """Send `rate` records/s for `seconds` to partition 0 of `topic` (new and empty) and
    measure each record's send-to-poll time."""
    total = max(1, int(rate * seconds))
    pad = b"e" * max(0, size - STAMP.size)
    lat: list[float] = []
    received = 0
    warm_ns = 0
    last_poll = 0.0
    failed = 0
    first_error = ""
    expected = total                # lowered by the records that failed, once the producer has flushed
    sends_done = 0.0
    async with Consumer(bootstrap, {"auto.offset.reset": "earliest", "max.poll.records": "100000",
                                    "fetch.max.wait.ms": "100"}) as c:
        await c.assign_topic(topic, [0])
        await c.position((topic, 0))

        async def consume() -> None:
            nonlocal received, last_poll
            unpack = STAMP.unpack_from
            while received < expected and not (sends_done and time.perf_counter() > sends_done + 30):
                recs = await c.poll(timeout_ms=200)
                now = time.perf_counter_ns()
                for r in recs:
                    sent_ns = unpack(r.value)[0] if r.value else 0
                    if sent_ns >= warm_ns:
                        lat.append((now - sent_ns) / 1e6)
                received += len(recs)
                if recs:
                    last_poll = time.perf_counter()

        async with Producer(bootstrap, {"acks": "all", "linger.ms": str(linger_ms), "batch.size": "262144",
                                        "max.request.size": "4194304"}) as p:
            await p.partitions_for(topic)
            await p.send_and_wait(topic, STAMP.pack(0) + pad, partition=0)     # connections up

            def done(batch: ProducerBatch, _base: int, err: KafkaError | None) -> None:
                nonlocal failed, first_error
                if err is not None:
                    failed += len(batch)
                    first_error = first_error or str(err)
            p.on_batch_done = done
            received -= 1                                                         # that one is not counted
            start = time.perf_counter()
            warm_ns = time.perf_counter_ns() + int(min(WARMUP_S, seconds / 5) * 1e9)
            reader = asyncio.ensure_future(consume())
            send = p.send
            sent = 0
            while sent < total:
                due = min(total, int((time.perf_counter() - start) * rate) + 1)
                while sent < due:
                    await send(topic, STAMP.pack(time.perf_counter_ns()) + pad, partition=0)
                    sent += 1
                await asyncio.sleep(TICK_S)
            send_seconds = time.perf_counter() - start
            await p.flush()
            sends_done = time.perf_counter()
            expected = total - failed
        await reader
    return EndToEnd(rate, sent, send_seconds, lat, received, max(0.0, last_poll - start - send_seconds), failed,
                     first_error)
