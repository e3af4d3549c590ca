"""Run a child Python process until it prints a marker line, then SIGKILL it."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

# Child-side prelude: `tear_writes_after(n)` makes the n-th later call to the
# storage layer's write_all write only half its bytes, announce "TORN", and
# hang until killed: a real process death in the middle of a write.
PRELUDE = textwrap.dedent('''
    import os, sys, time
    from minibroker.storage import fsutil

    def tear_writes_after(n, fraction=0.5):
        real = fsutil.write_all
        state = {"left": n}
        def torn(fd, data):
            if state["left"] == 0:
                if not isinstance(data, (bytes, bytearray, memoryview)):
                    data = b"".join(bytes(d) for d in data)
                mv = memoryview(data)
                real(fd, mv[: int(len(mv) * fraction)])
                print("TORN", len(mv), flush=True)
                while True:           # the behaviour under test: hang mid-write until the test SIGKILLs us
                    time.sleep(60)
            state["left"] -= 1
            real(fd, data)
        fsutil.write_all = torn

    def announce(*parts):
        print(*parts, flush=True)
''')


class Child:
    def __init__(self, code: str, cwd: str | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
        self.lines: list[str] = []
        self.stderr_text = ""
        self._buf = b""

    def wait_for(self, prefix: str, timeout: float = 30.0) -> str:
        """Read stdout lines until one starts with `prefix` (deadline, no sleeps)."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                text = line.decode()
                self.lines.append(text)
                if text.startswith(prefix):
                    return text
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise TimeoutError(f"child never printed {prefix!r}; stderr: {self.stderr_text}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.kill()
                    raise RuntimeError(f"child exited ({self.proc.returncode}) before {prefix!r}: "
                                       f"{self.stderr_text}")
                self._buf += chunk

    def kill(self) -> None:
        """SIGKILL the child (if still running) and collect its stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        if not self.proc.stderr.closed:
            self.stderr_text = self.proc.stderr.read().decode(errors="replace")[-3000:]
            self.proc.stdout.close()
            self.proc.stderr.close()
