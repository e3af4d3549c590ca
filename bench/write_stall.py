"""How long an append-style write() takes once the kernel's dirty-page limit is reached (issue 13).

    .venv/bin/python bench/write_stall.py --seconds 60               # three files at 50 MB/s each
    .venv/bin/python bench/write_stall.py --files 3 --mb-s 50 --chunk 52000 --dir /tmp

Plain file I/O (minibroker is not involved): --files files in --dir, each appended --chunk bytes at a
time at --mb-s MB/s (paced in 1 ms ticks, as a broker's appends arrive), no fsync. Every
5 s it prints the write() latency p50 / p99 / max of that window beside the kernel's
Dirty and Writeback figures from /proc/meminfo. While Dirty stays below the limit a
write is a copy into the page cache; once it reaches it (vm.dirty_ratio and friends,
about 2.2 GB on the 24 GB VM this was written on) every write is paced to the disk.
A broker appends on its event loop, so that pacing is time the loop waits. The files
are removed at the end.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from minibroker.bench.produce import pct

WINDOW_S = 5.0


def meminfo(*keys: str) -> str:
    try:
        with open("/proc/meminfo") as f:
            rows = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return ""
    return " ".join(f"{k} {rows[k].strip()}" for k in keys if k in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--files", type=int, default=3)
    ap.add_argument("--mb-s", type=float, default=50.0, help="per file")
    ap.add_argument("--chunk", type=int, default=52_000, help="bytes per write()")
    ap.add_argument("--dir", default=None, help="where to write (default: the temporary directory)")
    args = ap.parse_args()
    chunk = b"x" * args.chunk
    rate = args.mb_s * 1e6
    with tempfile.TemporaryDirectory(prefix="minibroker-write-stall-", dir=args.dir) as tmp:
        fds = [os.open(os.path.join(tmp, f"f{i}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
               for i in range(args.files)]
        try:
            start = window_start = time.perf_counter()
            written = 0
            window: list[float] = []
            while time.perf_counter() - start < args.seconds:
                due = (time.perf_counter() - start) * rate
                while written < due:
                    for fd in fds:
                        t0 = time.perf_counter()
                        os.write(fd, chunk)
                        window.append(time.perf_counter() - t0)
                    written += len(chunk)
                time.sleep(0.001)
                if time.perf_counter() - window_start >= WINDOW_S and window:
                    print(f"t={time.perf_counter() - start:5.1f} s  {len(window):,} writes: "
                          f"p50 {pct(window, 0.5) * 1e6:.0f} us, p99 {pct(window, 0.99) * 1e6:.0f} us, "
                          f"max {max(window) * 1e3:.1f} ms  {meminfo('Dirty', 'Writeback')}", flush=True)
                    window, window_start = [], time.perf_counter()
        finally:
            for fd in fds:
                os.close(fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
