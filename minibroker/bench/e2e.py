"""End-to-end latency: a paced acks=all producer here, a consumer in a process of its own.

Each record's value starts with its send time (`perf_counter_ns`, 8 bytes big-endian)
taken just before `Producer.send`. The consumer runs in a second Python process, as
an application reading the topic would (`python -m minibroker.bench.e2e consume`),
so the producer's pacing and the consumer's decoding do not queue behind each other
on one event loop and one core. Every record is stamped; the consumer times every
eighth by offset (`SAMPLE_EVERY`), hundreds of thousands of samples a run.
`perf_counter_ns` is CLOCK_MONOTONIC on Linux, one clock for every process on the
host, so the consumer computes each timed record's time from that send to the poll
that returned it. A figure covers batching (linger.ms), the leader's append,
replication to the ISR (the consumer reads up to the high watermark), the fetch,
decoding and both processes' scheduling.

The runner gives the topic about a second of retention (`E2E_TOPIC_CONFIGS`). At
half the batched load a 5 s run writes about 0.9 GB across the three replicas; with
no retention that is page cache growing into memory the kernel never used since boot,
and on a VM whose host backs guest memory lazily (this project's Firecracker VMs, booted
with `page_reporting.page_reporting_order=11`: free 8 MB blocks go back to the host)
each new page costs a host fault inside the write's copy: 420 MB/s into new memory
against 4.3 GB/s into reused pages with a plain `os.write` loop, `copy_folio_from_iter_atomic`
went from 1.6 % to 23-26 % of all CPU (`perf record -a`) and p99 from 5 ms to 20-130 ms
from one run to the next. A broker that has run for a while recycles its page cache;
bounded retention measures that steady state (followers' system time stayed at 0.21-0.29 s
per run instead of growing to 1 s). Appends that still land on returned memory show as
1.5-4.5 ms writes of a 256 KB batch on the event loop (`perf trace --duration`).

The consumer process tunes its garbage collector as minibroker's brokers do
(`minibroker.memory.tune_gc`: its start-up heap frozen, fewer collections), as a
Python application that cares about latency would. With CPython's defaults each
full collection cost it 12-25 ms of CPU, one every 3-4 s at 520,000 records/s,
and the records in flight waited out each one: in 5 interleaved pairs of 5 s runs
at that rate (bench/e2e_rates.py), p99 18-31 ms with it against 27-59 ms without,
lower in 4 of the 5 pairs.

The two processes talk over the consumer's stdin and stdout, one line each way:
the consumer prints `ready` once its position is known; the producer writes
`start WARM_NS` when its clock starts (records sent before WARM_NS are not counted)
and `end OFFSET` once it has flushed (the consumer stops when it has read up to
OFFSET, or DRAIN_S later). The consumer then writes its latencies, float64 ms in
arrival order, to the file it was given and prints `done RECEIVED LAST_POLL_NS CPU_S WAIT_S WAKEUPS`
(its CPU time, its time runnable but waiting for a core, and the times it got one, from the
producer's start to its last poll).
"""
from __future__ import annotations

import array
import asyncio
import os
import struct
import sys
import tempfile
import time
from dataclasses import dataclass

from minibroker.bench.partitions import runqueue_wait
from minibroker.client.accumulator import ProducerBatch
from minibroker.client.consumer import Consumer
from minibroker.client.producer import Producer
from minibroker.errors import KafkaError

STAMP = struct.Struct(">q")
TICK_S = 0.001            # the pacing step: each tick sends what the rate owes by then
WARMUP_S = 0.5            # records sent in the first half second are not counted
DRAIN_S = 30.0            # the consumer gives up this long after the producer's last send
# The consumer times every SAMPLE_EVERY-th record (by offset), so that timing them costs it little:
# timing each one took a third of its CPU (31 % of a core at 450,000 records/s, 21 % sampled), on a
# 2-core machine that four other busy processes share (bench/e2e_rates.py).
SAMPLE_EVERY = 8
READY_S = 60.0            # for the consumer process to connect and find its position


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
    consumer_cpu_s: float = 0.0     # the consumer process's CPU time from the producer's start to its last poll
    consumer_wait_s: float = 0.0    # ... its time runnable but waiting for a core (/proc/self/schedstat)
    consumer_wakeups: int = 0       # ... the times it was put on a core
    producer_wait_s: float = 0.0    # this process's (the producer's) wait for a core while it sent
    producer_wakeups: int = 0

    def wait_line(self) -> str:
        """How long the producer and the consumer each waited for a core per wake-up, on average."""
        def one(name: str, wait_s: float, wakeups: int, span_s: float) -> str:
            return (f"{name} {wait_s / max(wakeups, 1) * 1e6:,.0f} us per wake-up "
                    f"({100 * wait_s / span_s if span_s else 0:.0f} % of the run)")
        return ("waiting for a core: " + one("producer", self.producer_wait_s, self.producer_wakeups, self.send_seconds)
                + ", " + one("consumer", self.consumer_wait_s, self.consumer_wakeups,
                             self.send_seconds + self.drain_seconds))

    @property
    def achieved_rate(self) -> float:
        return self.sent / self.send_seconds if self.send_seconds else 0.0


async def end_to_end(bootstrap: str, topic: str, *, rate: float, seconds: float, size: int,
                     linger_ms: int = 1) -> EndToEnd:
    """Send `rate` records/s for `seconds` to partition 0 of `topic` (new and empty) and
    measure each record's send-to-poll time in a consumer process."""
    total = max(1, int(rate * seconds))
    pad = b"e" * max(0, size - STAMP.size)
    failed = 0
    first_error = ""
    with tempfile.TemporaryDirectory(prefix="minibroker-e2e-") as tmp:
        out_path = os.path.join(tmp, "latencies")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "minibroker.bench.e2e", "consume", bootstrap, topic, out_path,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), READY_S)
            if line.strip() != b"ready":
                raise RuntimeError(f"the consumer process did not start (said {line!r})")
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
                wait_before = runqueue_wait("self")
                start = time.perf_counter()
                warm_ns = time.perf_counter_ns() + int(min(WARMUP_S, seconds / 5) * 1e9)
                proc.stdin.write(b"start %d\n" % warm_ns)
                send = p.send
                sent = 0
                while sent < total:
                    due = min(total, int((time.perf_counter() - start) * rate) + 1)
                    while sent < due:
                        await send(topic, STAMP.pack(time.perf_counter_ns()) + pad, partition=0)
                        sent += 1
                    await asyncio.sleep(TICK_S)
                send_seconds = time.perf_counter() - start
                wait_after = runqueue_wait("self")
                last = await p.send_and_wait(topic, STAMP.pack(0) + pad, partition=0)    # ordered after the rest
            proc.stdin.write(b"end %d\n" % last.offset)
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), DRAIN_S + READY_S)
            words = line.split()
            if len(words) != 6 or words[0] != b"done":
                raise RuntimeError(f"the consumer process failed (said {line!r})")
            received, last_poll_ns, consumer_cpu_s = int(words[1]), int(words[2]), float(words[3])
            consumer_wait_s, consumer_wakeups = float(words[4]), int(words[5])
            lat = array.array("d")
            with open(out_path, "rb") as f:
                lat.frombytes(f.read())
        finally:
            if proc.returncode is None:
                proc.stdin.close()
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
    drain = (last_poll_ns / 1e9 - start - send_seconds) if last_poll_ns else 0.0
    return EndToEnd(rate, sent, send_seconds, lat.tolist(), received, max(0.0, drain), failed, first_error,
                    consumer_cpu_s, consumer_wait_s, consumer_wakeups, wait_after[0] - wait_before[0],
                    wait_after[1] - wait_before[1])


async def consume(bootstrap: str, topic: str, out_path: str) -> None:
    """The consumer process: read partition 0 of `topic` from its start until told where it ends."""
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    lat = array.array("d")
    last_poll_ns = 0
    warm_ns: int | None = None
    end: int | None = None
    give_up = float("inf")
    cpu_start = 0.0
    wait_start = (0.0, 0)

    async def commands() -> None:
        nonlocal warm_ns, end, give_up, cpu_start, wait_start
        while line := await stdin.readline():
            word, value = line.split()
            if word == b"start":
                warm_ns, cpu_start, wait_start = int(value), time.process_time(), runqueue_wait("self")
            elif word == b"end":
                end, give_up = int(value), time.perf_counter() + DRAIN_S
        give_up = min(give_up, time.perf_counter())           # the producer is gone

    async with Consumer(bootstrap, {"auto.offset.reset": "earliest", "max.poll.records": "100000",
                                    "fetch.max.wait.ms": "100"}) as c:
        await c.assign_topic(topic, [0])
        await c.position((topic, 0))
        reader = asyncio.ensure_future(commands())
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        unpack = STAMP.unpack_from
        append = lat.append
        position = 0
        read = 0                        # every record read, the two markers too
        markers = 0                     # the markers read
        while (end is None or position <= end) and time.perf_counter() < give_up:
            recs = await c.poll(timeout_ms=200)
            if not recs:
                continue
            now = time.perf_counter_ns()
            warm = warm_ns if warm_ns is not None else now
            read += len(recs)
            markers += recs[0].offset == 0
            for r in recs[(-recs[0].offset) % SAMPLE_EVERY::SAMPLE_EVERY]:
                sent_ns = unpack(r.value)[0] if r.value else 0
                if sent_ns and sent_ns >= warm:
                    append((now - sent_ns) / 1e6)
            last_poll_ns = now
            position = recs[-1].offset + 1
        # The paced records lie between the first marker (offset 0) and the last (`end`).
        received = read - markers - (1 if end is not None and position > end else 0)
        reader.cancel()
        cpu_s = time.process_time() - cpu_start
        wait_s, wakeups = runqueue_wait("self")
    with open(out_path, "wb") as f:
        lat.tofile(f)
    sys.stdout.write(f"done {received} {last_poll_ns} {cpu_s:.3f} {wait_s - wait_start[0]:.6f} "
                     f"{wakeups - wait_start[1]}\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] != "consume":
        sys.stderr.write("usage: python -m minibroker.bench.e2e consume BOOTSTRAP TOPIC OUT_PATH\n")
        return 2
    from minibroker.cli.common import run_async
    from minibroker.memory import tune_gc
    tune_gc()
    run_async(consume(argv[1], argv[2], argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
