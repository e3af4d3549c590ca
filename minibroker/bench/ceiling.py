"""`minibroker bench produce --compare-ceiling PATH`: run a replication-ceiling script in the
same sitting and print minibroker's figures as ratios to it.

The ceiling script (any path; the project never ships or imports it) is run as
`python PATH all --runs R --seconds S --fsync 0`; it prints one JSON line per case
and run (`{"run", "case", "rec_s", "p50_us", "p99_us", ...}`). This module only
runs it, takes the median per case and divides (the goal table is figures.py's)."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


# The ceiling's CPU per request of each process (us), by the figure key of minibroker's own (produce.py).
CPU_KEYS = (("awaited_cpu_client_us", "producer_cpu_us_per_req", "client"),
            ("awaited_cpu_leader_us", "leader_cpu_us_per_req", "leader"),
            ("awaited_cpu_follower_us", "follower_cpu_us_per_req", "follower"))


@dataclass(frozen=True)
class Ceiling:
    """Median figures of each ceiling case (records/s, p50 and p99 in us; `cpu_us`: the CPU per request
    of each process, by the ceiling's key, for the cases that print it)."""
    rec_s: dict[str, float]
    p50_us: dict[str, float]
    p99_us: dict[str, float]
    cpu_us: dict[str, dict[str, float]] = field(default_factory=dict)

    def case(self, prefix: str) -> str | None:
        return next((c for c in self.rec_s if c.startswith(prefix)), None)


def parse_ceiling(lines: list[str]) -> Ceiling:
    """The JSON lines a ceiling run printed (other lines are ignored)."""
    runs: dict[str, list[dict[str, float]]] = defaultdict(list)
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "case" in row and "rec_s" in row:
            runs[str(row["case"])].append(row)

    def med(key: str) -> dict[str, float]:
        return {c: statistics.median(float(r.get(key, 0.0)) for r in rs) for c, rs in runs.items()}
    cpu = {c: {k: statistics.median(float(r[k]) for r in rs) for _, k, _ in CPU_KEYS if all(k in r for r in rs)}
           for c, rs in runs.items()}
    return Ceiling(med("rec_s"), med("p50_us"), med("p99_us"), cpu)


def run_ceiling(path: str, runs: int, seconds: float, out: Callable[[str], None]) -> Ceiling:
    """Run the ceiling script to the end and parse what it printed."""
    cmd = [sys.executable, path, "all", "--runs", str(runs), "--seconds", str(seconds), "--fsync", "0"]
    out("ceiling: " + " ".join(cmd[1:]))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=runs * 6 * (seconds + 40) + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"the ceiling script failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    ceiling = parse_ceiling(proc.stdout.splitlines())
    if not ceiling.rec_s:
        raise RuntimeError("the ceiling script printed no JSON result lines")
    return ceiling


def ratio_lines(fig: Mapping[str, float], ceiling: Ceiling) -> list[str]:
    """minibroker's figures (one run's, or the medians over the runs: `batched_rate`,
    `awaited_rate`, `awaited_p50_ms`, `awaited_p99_ms` and the `awaited_cpu_*_us` of CPU_KEYS)
    over the ceiling's matching cases."""
    lines = []
    batched = fig.get("batched_rate")
    for prefix in ("blob 100 ", "blob 1000 "):
        case = ceiling.case(prefix)
        if case and ceiling.rec_s[case] and batched:
            lines.append(f"ratio batched / ceiling '{case}': {batched:,.0f} / "
                         f"{ceiling.rec_s[case]:,.0f} = {batched / ceiling.rec_s[case]:.2f}")
    case = ceiling.case("awaited")
    rate = fig.get("awaited_rate")
    if case and rate and ceiling.rec_s[case]:
        p50, p99 = fig.get("awaited_p50_ms", 0.0) * 1000, fig.get("awaited_p99_ms", 0.0) * 1000
        lines.append(f"ratio awaited rate / ceiling: {rate:,.0f} / {ceiling.rec_s[case]:,.0f} = "
                     f"{rate / ceiling.rec_s[case]:.2f}")
        if ceiling.p50_us[case]:
            lines.append(f"ratio awaited p50 / ceiling p50: {p50:,.0f} us / {ceiling.p50_us[case]:,.0f} us = "
                         f"{p50 / ceiling.p50_us[case]:.2f}x")
        if ceiling.p99_us[case]:
            lines.append(f"ratio awaited p99 / ceiling p99: {p99:,.0f} us / {ceiling.p99_us[case]:,.0f} us = "
                         f"{p99 / ceiling.p99_us[case]:.2f}x")
        cpu = ceiling.cpu_us.get(case, {})
        parts = [f"{name} {fig[mine]:,.0f} / {cpu[theirs]:,.0f} = {fig[mine] / cpu[theirs]:.2f}x"
                 for mine, theirs, name in CPU_KEYS if fig.get(mine) and cpu.get(theirs)]
        if parts:
            lines.append("ratio awaited CPU per record / ceiling's per request (us): " + ", ".join(parts))
    return lines
