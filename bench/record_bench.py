"""Micro-benchmark of the record format's CPU cost, without a network.

Measures, on one core, the three places that touch records:

1. **send path** (client): `Producer.send()` for N records of S bytes into
   the accumulator (metadata pre-filled, no sender task), then encoding every
   batch as the sender would (`minibroker.client.producer.encode`). Reported
   as microseconds per record for each part and in total.
2. **consume path** (client): decoding the encoded batches with
   `minibroker.records.iter_records(..., with_headers=True)` (what the
   consumer does per fetched partition), records/s.
3. **leader validation** (broker): `PartitionLog.append_as_leader`'s check of
   one produce payload (`single_producer_batch`, framing, CRC and, with the
   varint format, the record payload), microseconds per batch and per record.

Times are this process's CPU time (`time.process_time`), so that other
work on a shared machine does not count; each figure is the best of
--repeat rounds.

    .venv/bin/python bench/record_bench.py                    # 200,000 x 100 B, batch.size 16384
    .venv/bin/python bench/record_bench.py --batch-size 262144 --compression-type lz4
"""
from __future__ import annotations

import argparse
import asyncio
import time

from minibroker.client.producer import Producer, encode
from minibroker.client.types import TopicPartition
from minibroker.records import iter_records, single_producer_batch
from minibroker.storage.log_config import LogConfig

clock = time.process_time


async def send_round(count: int, size: int, batch_size: int, compression: str | None) -> tuple[float, float, list]:
    cfg = {"batch.size": str(batch_size), "buffer.memory": str(1 << 40), "linger.ms": "100000"}
    if compression:
        cfg["compression.type"] = compression
    p = Producer("127.0.0.1:1", cfg)
    p._loop = asyncio.get_running_loop()
    p._started = p._running = True
    p._nparts["t"] = 1
    p._tps["t"] = [TopicPartition("t", 0)]
    value = b"v" * size
    send = p.send
    t0 = clock()
    for _ in range(count):
        await send("t", value)
    t1 = clock()
    batches = p.acc.queued()
    encoded = [encode(b) for b in batches]
    t2 = clock()
    return t1 - t0, t2 - t1, encoded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=16384)
    ap.add_argument("--compression-type", default=None)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    n = a.records
    best_send = best_enc = best_dec = best_val = float("inf")
    encoded: list = []
    max_message_bytes = max(LogConfig().max_message_bytes, a.batch_size * 2)
    for _ in range(a.repeat):
        s, e, encoded = asyncio.run(send_round(n, a.size, a.batch_size, a.compression_type))
        best_send, best_enc = min(best_send, s), min(best_enc, e)
        t0 = clock()
        got = 0
        for b in encoded:
            for _r in iter_records(b, with_headers=True):
                got += 1
        best_dec = min(best_dec, clock() - t0)
        assert got == n, (got, n)
        t0 = clock()
        for b in encoded:
            if single_producer_batch(b, max_message_bytes) is None:
                raise SystemExit("a batch failed validation")
        best_val = min(best_val, clock() - t0)
    nb = len(encoded)
    print(f"{n:,} records of {a.size} B, batch.size={a.batch_size}, compression={a.compression_type or 'none'}, "
          f"{nb:,} batches, best of {a.repeat}")
    print(f"send path: send {best_send / n * 1e6:.3f} us/record + encode {best_enc / n * 1e6:.3f} us/record "
          f"= {(best_send + best_enc) / n * 1e6:.3f} us/record")
    print(f"consume decode: {n / best_dec:,.0f} records/s ({best_dec / n * 1e6:.3f} us/record)")
    print(f"leader validation: {best_val / nb * 1e6:.1f} us/batch, {best_val / n * 1e9:.0f} ns/record")


if __name__ == "__main__":
    main()
