"""Process-wide allocator and garbage-collector settings for minibroker's own
programs (broker, controller, the CLI and its bench), applied once at start.

Owns nothing after the call. Must not be called by the client library on a
user's behalf: a program embedding the Producer or the Consumer decides its
own allocator and collector.

The allocator (`tune_allocator`):

Why: batches are 16 KB-4 MB buffers that live for one request. glibc's
malloc serves them from the heap once its dynamic mmap threshold has risen
past them, but gives the top of the heap back to the kernel whenever more
than twice that threshold is free there (M_TRIM_THRESHOLD's dynamic value):
two 256 KB buffers freed together, as a producer's batch and its bytes
are, are enough. The next batch then faults every page in again. On this
project's 2-core VMs a fault costs 2-3 us, so a 256 KB batch paid ~150 us of
faults per copy: more than encoding its 2,000 records. Fixed thresholds
keep up to TRIM_THRESHOLD of free heap mapped and serve every buffer up to
MMAP_THRESHOLD from the heap. The cost is that much RSS kept after a peak.
"""
from __future__ import annotations

import ctypes
import gc
import logging
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 8 << 20        # free heap kept mapped (bytes)
MMAP_THRESHOLD = 4 << 20        # larger blocks get their own mapping, as before
DISABLE_ENV = "MINIBROKER_MALLOC_DEFAULTS"    # set to 1 to leave glibc's dynamic thresholds alone

log = logging.getLogger("minibroker.memory")


def tune_allocator() -> bool:
    """Fix glibc's trim and mmap thresholds (see the module docstring); whether
    they were set. A no-op elsewhere (musl, macOS) or with $MINIBROKER_MALLOC_DEFAULTS=1."""
    if os.environ.get(DISABLE_ENV) == "1":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt       # the process's own symbols: libc's, where it is glibc
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    if not ok:
        log.debug("mallopt refused the thresholds; glibc's defaults stay")
    return ok


def tune_gc() -> None:
    """The collector (generation 2) collections walk every live object. In a broker,
    with a large request's hundreds of thousands of objects, they paused the loop for
    100 ms and more; in the bench's end-to-end consumer, whose start-up heap (35,000
    objects: the modules, asyncio, uvloop, the client) is all they walk, each cost
    12-25 ms of CPU, one every 3-4 s at 520,000 records/s (its decoded records are
    allocated, and counted by the collector, faster than it frees them), and every
    record in flight meanwhile waited that long. Objects alive at start-up leave the
    collector's view (gc.freeze), the youngest generation is collected after 10,000
    net allocations instead of 700, and full collections run 100 times less often."""
    gc.freeze()
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(max(gen0, 10_000), gen1, 1_000)
