"""Benchmark: PartitionLog append/read against a plain sequential file.

Appends N records of S bytes in batches of B through `append_as_leader`
(validation with CRC check, stamping, index upkeep, segment rolls) and reads
them back through `read()` (index lookup + pread of whole batches, one fetch
of --fetch-bytes at a time). In the same run it writes the same bytes to a
plain file with one os.write per batch and reads them back with preads of
--fetch-bytes.

The two sides are measured *paired*: each batch is written to the plain file
and appended to the log back to back (alternating which goes first), and
each plain read is followed by a log read, timing every call on its own. A
machine busy with other work then slows both sides alike instead of
whichever phase it happened to overlap. Neither side fsyncs (Kafka's
default: durability comes from replication) unless --fsync, which adds one
fsync at the end of each side's write phase. Reports the best of --repeat
rounds for each figure.

    .venv/bin/python bench/log_bench.py                      # 1,000,000 x 100 B, batches of 1000
    .venv/bin/python bench/log_bench.py --records 200000 --fsync

Target (issue 3): log append and read rates >= 70% of the plain file rates.
Exit status 1 when the target is missed.
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

clock = time.perf_counter


def write_round(root: str, r: int, batches: list[bytes], config: LogConfig,
                fsync: bool) -> tuple[float, float, PartitionLog, str]:
    log = PartitionLog.open(os.path.join(root, f"bench-{r}"), config)
    log.assign_leader_epoch(0)
    plain_path = os.path.join(root, f"plain-{r}.bin")
    fd = os.open(plain_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    t_plain = t_log = 0.0
    for i, b in enumerate(batches):
        if i % 2:
            t0 = clock()
            log.append_as_leader(b, 0)
            t1 = clock()
            os.write(fd, b)
            t2 = clock()
            t_log += t1 - t0
            t_plain += t2 - t1
        else:
            t0 = clock()
            os.write(fd, b)
            t1 = clock()
            log.append_as_leader(b, 0)
            t2 = clock()
            t_plain += t1 - t0
            t_log += t2 - t1
    if fsync:
        t0 = clock()
        os.fsync(fd)
        t1 = clock()
        log.flush()
        t2 = clock()
        t_plain += t1 - t0
        t_log += t2 - t1
    os.close(fd)
    return t_plain, t_log, log, plain_path


def read_round(log: PartitionLog, plain_path: str, fetch_bytes: int) -> tuple[float, float, int, int]:
    """Times log.read() and os.pread() calls only; finding the next fetch
    offset in the returned batches is the consumer's work, not counted."""
    fd = os.open(plain_path, os.O_RDONLY)
    t_plain = t_log = 0.0
    pos = n_plain = n_log = 0
    offset, end = log.log_start_offset, log.log_end_offset
    plain_done = False
    i = 0
    while offset < end or not plain_done:
        i += 1
        for side in ((0, 1) if i % 2 else (1, 0)):
            if side == 0 and not plain_done:
                t0 = clock()
                b = os.pread(fd, fetch_bytes, pos)
                t_plain += clock() - t0
                pos += len(b)
                n_plain += len(b)
                plain_done = not b
                del b
            elif side == 1 and offset < end:
                t0 = clock()
                chunk = log.read(offset, fetch_bytes)
                t_log += clock() - t0
                n_log += len(chunk)
                for h in scan_headers(chunk):  # noqa: B007 -- h (the last header) is read after the loop
                    pass
                offset = h.last_offset + 1
                del chunk
    os.close(fd)
    return t_plain, t_log, n_plain, n_log


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--fetch-bytes", type=int, default=1 << 20)
    ap.add_argument("--segment-bytes", type=int, default=1 << 30)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--fsync", action="store_true")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()

    n_batches = args.records // args.batch
    value = b"x" * args.record_size
    t0 = clock()
    batches = [build_batch([(None, value, 1_700_000_000_000 + i)] * args.batch) for i in range(n_batches)]
    encode_s = clock() - t0
    records = n_batches * args.batch
    root = tempfile.mkdtemp(prefix="log-bench-", dir=args.dir)
    config = LogConfig(segment_bytes=args.segment_bytes)
    best: dict[str, float] = {}
    on_disk = 0
    try:
        for r in range(args.repeat):
            t_pw, t_la, log, plain = write_round(root, r, batches, config, args.fsync)
            on_disk = log.size_bytes
            t_pr, t_lr, n_pr, n_lr = read_round(log, plain, args.fetch_bytes)
            assert n_lr == n_pr == on_disk == os.path.getsize(plain), (n_lr, n_pr, on_disk)
            for k, v in (("log_append", t_la), ("plain_write", t_pw), ("log_read", t_lr), ("plain_read", t_pr)):
                best[k] = min(best.get(k, v), v)
            log.close()
            shutil.rmtree(log.directory)
            os.unlink(plain)
        t0 = clock()
        decoded = sum(1 for _ in iter_records(b"".join(batches[: max(1, n_batches // 10)])))
        decode_rate = decoded / (clock() - t0)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    mb = on_disk / 1e6
    print(f"{records:,} records x {args.record_size} B in batches of {args.batch} "
          f"({n_batches} batches, {mb:.1f} MB on disk), fetch {args.fetch_bytes} B, "
          f"fsync={'end of phase' if args.fsync else 'none'}, best of {args.repeat} paired rounds")
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
