"""Benchmark: PartitionLog append/read against a plain sequential file.

Appends N records of S bytes in batches of B through `append_as_leader`
(validation, CRC check, stamping, index upkeep, segment rolls) and reads them
back through `read()` (index lookup + pread of whole batches, one fetch of
--fetch-bytes at a time). In the same run it writes the very same bytes to a
plain file with one os.write per batch and reads them back with preads of
the same size. Neither side fsyncs (Kafka's default; durability comes from
replication), unless --fsync, which adds one fsync at the end of each write
phase. Reports the best of --repeat rounds.

    .venv/bin/python bench/log_bench.py                      # 1,000,000 x 100 B, batches of 1000
    .venv/bin/python bench/log_bench.py --records 200000 --fsync

Target (issue 3): log append and read rates >= 70% of the plain file rates.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from minibroker.records import build_batch, iter_records, scan_headers
from minibroker.storage import LogConfig, PartitionLog


def plain_write(path: str, chunks: list[bytes], fsync: bool) -> float:
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    for c in chunks:
        os.write(fd, c)
    if fsync:
        os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - t0


def plain_read(path: str, fetch_bytes: int) -> tuple[float, int]:
    fd = os.open(path, os.O_RDONLY)
    pos = total = 0
    elapsed = 0.0
    while True:
        t0 = time.perf_counter()
        b = os.pread(fd, fetch_bytes, pos)
        elapsed += time.perf_counter() - t0
        if not b:
            break
        pos += len(b)
        total += len(b)
    os.close(fd)
    return elapsed, total


def log_append(directory: str, batches: list[bytes], config: LogConfig, fsync: bool) -> tuple[float, PartitionLog]:
    log = PartitionLog.open(directory, config)
    log.assign_leader_epoch(0)
    t0 = time.perf_counter()
    for b in batches:
        log.append_as_leader(b, 0)
    if fsync:
        log.flush()
    return time.perf_counter() - t0, log


def log_read(log: PartitionLog, fetch_bytes: int) -> tuple[float, int]:
    """Times the log.read() calls only; finding the next fetch offset in
    the returned batches is the consumer's work and is not counted."""
    offset, end, total = log.log_start_offset, log.log_end_offset, 0
    elapsed = 0.0
    while offset < end:
        t0 = time.perf_counter()
        chunk = log.read(offset, fetch_bytes)
        elapsed += time.perf_counter() - t0
        total += len(chunk)
        for h in scan_headers(chunk):
            pass
        offset = h.last_offset + 1
    return elapsed, total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--fetch-bytes", type=int, default=1 << 20)
    ap.add_argument("--segment-bytes", type=int, default=1 << 30)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--fsync", action="store_true")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()

    n_batches = args.records // args.batch
    value = b"x" * args.record_size
    t0 = time.perf_counter()
    batches = [build_batch([(None, value, 1_700_000_000_000)] * args.batch) for _ in range(n_batches)]
    encode_s = time.perf_counter() - t0
    records = n_batches * args.batch
    root = tempfile.mkdtemp(prefix="log-bench-", dir=args.dir)
    config = LogConfig(segment_bytes=args.segment_bytes)
    best: dict[str, float] = {}
    on_disk = 0
    try:
        for r in range(args.repeat):
            d = os.path.join(root, f"bench-{r}")
            t_app, log = log_append(d, batches, config, args.fsync)
            on_disk = log.size_bytes
            # the plain file gets the same bytes (the batches before stamping,
            # which differ only in 12 header bytes each), one write per batch
            plain = os.path.join(root, f"plain-{r}.bin")
            t_pw = plain_write(plain, batches, args.fsync)
            t_lr, n_lr = log_read(log, args.fetch_bytes)
            t_pr, n_pr = plain_read(plain, args.fetch_bytes)
            assert n_lr == n_pr == on_disk, (n_lr, n_pr, on_disk)
            for k, v in (("log_append", t_app), ("plain_write", t_pw), ("log_read", t_lr), ("plain_read", t_pr)):
                best[k] = min(best.get(k, v), v)
            log.close()
            shutil.rmtree(d)
            os.unlink(plain)
        # client-side decode rate, for context
        t0 = time.perf_counter()
        decoded = sum(1 for _ in iter_records(b"".join(batches[: max(1, n_batches // 10)])))
        decode_rate = decoded / (time.perf_counter() - t0)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    mb = on_disk / 1e6
    print(f"{records:,} records x {args.record_size} B in batches of {args.batch} "
          f"({n_batches} batches, {mb:.1f} MB on disk), fetch {args.fetch_bytes} B, "
          f"fsync={'end of phase' if args.fsync else 'none'}, best of {args.repeat}")
    print(f"{'':14}{'MB/s':>10}{'records/s':>14}{'seconds':>10}")
    for k in ("plain_write", "log_append", "plain_read", "log_read"):
        t = best[k]
        print(f"{k:14}{mb / t:10.0f}{records / t:14,.0f}{t:10.3f}")
    app = best["plain_write"] / best["log_append"]
    rd = best["plain_read"] / best["log_read"]
    print(f"log append = {app:.0%} of plain write, log read = {rd:.0%} of plain read (target >= 70%)")
    print(f"client side: build_batch {records / encode_s:,.0f} records/s, "
          f"iter_records {decode_rate:,.0f} records/s")
    return 0 if app >= 0.7 and rd >= 0.7 else 1


if __name__ == "__main__":
    sys.exit(main())
