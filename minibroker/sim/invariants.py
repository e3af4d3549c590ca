"""The simulation's invariants: what a run must never show.

Pure: takes observations (leader samples, consumer reads, acknowledgements,
replica files read at the end, the cluster's final state and request counts)
and returns violations as one-line strings. Checked as the run goes
(`on_*`) and at the end (`final`). Safety reuses minibroker/verify's
checker (lost, moved, inconsistent, vanished acknowledged records) and its
replica comparison (the committed prefix byte-for-byte on every ISR member);
added here: a leader's HW never decreases within its epoch, one leader per
epoch, liveness (a leader, a full ISR and equal LEOs after healing) and no
busy loop (requests per idle partition per simulated second bounded).

Must not know: how the observations were made (the world does that).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from minibroker.verify.checker import Ack, Failure, Read, Report, check, compare_replicas

Batch = tuple[int, int, int, bytes]


@dataclass
class Invariants:
    """Invariant: `violations` only grows; `hw[(partition, epoch, broker)]` is
    the highest HW seen for that leader in that epoch."""
    max_idle_requests_per_partition_s: float = 30.0
    violations: list[str] = field(default_factory=list)
    hw: dict[tuple[str, int, int], int] = field(default_factory=dict)
    leader_of_epoch: dict[tuple[str, int], int] = field(default_factory=dict)
    reads: dict[tuple[int, int], str] = field(default_factory=dict)
    live_reads: list[Read] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)

    def _violate(self, t: float, what: str) -> None:
        self.violations.append(f"t={t:.3f} {what}")

    # -- as the run goes --------------------------------------------------------
    def on_leader(self, t: float, broker: int, partition: str, epoch: int, hw: int) -> None:
        """Triggered by each sample of a broker that says it leads `partition` in `epoch`."""
        owner = self.leader_of_epoch.setdefault((partition, epoch), broker)
        if owner != broker:
            self._violate(t, f"TWO_LEADERS {partition} epoch {epoch}: brokers {owner} and {broker}")
        key = (partition, epoch, broker)
        last = self.hw.get(key)
        if last is not None and hw < last:
            self._violate(t, f"HW_DECREASED {partition} epoch {epoch} leader {broker}: {last} -> {hw}")
        if last is None or hw > last:
            self.hw[key] = hw

    def on_read(self, t: float, partition: int, offset: int, value: str) -> None:
        """Triggered by each record a consumer returns."""
        seen = self.reads.setdefault((partition, offset), value)
        if seen != value:
            self._violate(t, f"INCONSISTENT_READ partition {partition} offset {offset}: {seen} then {value}")
        self.live_reads.append(Read(value, partition, offset))

    def on_ack(self, value: str, partition: int, offset: int, seq: int) -> None:
        self.acks.append(Ack(value, partition, offset, seq))

    def on_failure(self, value: str, partition: int, error: str, seq: int) -> None:
        self.failures.append(Failure(value, partition, error, seq))

    # -- at the end -------------------------------------------------------------
    def final_data(self, t: float, final_reads: list[Read], replicas: dict[int, dict[int, list[Batch]]],
                   isr: dict[int, list[int]]) -> Report:
        """`final_reads`: every record of the leaders' logs below the HW; `replicas[p][broker]`:
        each ISR member's batches below the HW."""
        rep = check(self.acks, self.failures, final_reads, self.live_reads)
        for p in sorted(replicas):
            members = {b: bs for b, bs in replicas[p].items() if b in isr.get(p, [])}
            compare_replicas(f"partition {p}", members, rep)
        for a in rep.lost:
            self._violate(t, f"LOST acked value {a.value} at {a.partition}:{a.offset}")
        for a, off in rep.moved:
            self._violate(t, f"MOVED acked value {a.value} from {a.partition}:{a.offset} to offset {off}")
        for f in rep.failed_read:
            self._violate(t, f"READ_OF_FAILED {f.value} ({f.error})")
        for v, where in rep.duplicated:
            self._violate(t, f"DUPLICATED value {v} at " + ", ".join(f"{p}:{o}" for p, o in where))
        for p, later, earlier in rep.reordered:
            self._violate(t, f"REORDERED partition {p}: {earlier} read before {later} but sent after it")
        for name, off, why in rep.divergent:
            self._violate(t, f"DIVERGENT {name} at {off}: {why}")
        for p, off, vals in rep.inconsistent:
            self._violate(t, f"INCONSISTENT partition {p} offset {off}: {' / '.join(vals)}")
        for r in rep.vanished:
            self._violate(t, f"VANISHED value {r.value} read at {r.partition}:{r.offset}")
        return rep

    def liveness(self, t: float, unconverged: list[str]) -> None:
        for why in unconverged:
            self._violate(t, f"LIVENESS {why}")

    def idle_requests(self, t: float, requests: int, seconds: float, partitions: int) -> float:
        rate = requests / max(seconds, 1e-9) / max(partitions, 1)
        if rate > self.max_idle_requests_per_partition_s:
            self._violate(t, f"BUSY_LOOP {rate:.0f} requests per idle partition per simulated second "
                             f"(bound {self.max_idle_requests_per_partition_s:.0f})")
        return rate


def unconverged(parts: dict[str, dict[str, Any]], leos: dict[str, dict[int, int]]) -> list[str]:
    """Why the cluster has not converged: `parts[name]` has leader, isr, replicas (the controller's
    view); `leos[name][broker]` each replica's LEO. Empty when every partition has a leader, a
    full ISR and equal LEOs."""
    out = []
    for name in sorted(parts):
        p = parts[name]
        if p["leader"] < 0:
            out.append(f"{name} has no leader")
            continue
        if sorted(p["isr"]) != sorted(p["replicas"]):
            out.append(f"{name} ISR {sorted(p['isr'])} is not the full replica set {sorted(p['replicas'])}")
        ls = leos.get(name, {})
        vals = {b: ls.get(b) for b in p["replicas"]}
        if len(set(vals.values())) != 1 or None in vals.values():
            out.append(f"{name} LEOs differ: " + ", ".join(f"b{b}={v}" for b, v in sorted(vals.items())))
    return out
