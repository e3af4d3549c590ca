"""The verification checker: what a run did to acknowledged data.

Pure: takes the producer's log (every acknowledgement and every failure),
what the consumer read, and optionally each replica's batch index, and
reports the violations Kafka's replication system tests look for:

  lost          acked records never read, or read at another offset than acked
  duplicated    one produced value read at more than one offset
  reordered     within a partition, acked values whose read order contradicts
                their send order (only counts records sent from one sequence)
  failed_read   records whose produce failed *definitely* (before append) but
                were read anyway (I7)
  divergent     the same offset holding different batches on two replicas
  inconsistent  one (partition, offset) read with two different values, by
                any reader at any time (Jepsen's inconsistent-offsets)
  vanished      a value a live reader got during the run (so it was below
                some HW: committed) that the final read from offset 0 lacks
  unconverged   replicas that never reached their leader's LEO, so could not
                be compared (a liveness failure, I6)

`notes` carry what is worth knowing but is not a violation (consumer
position resets, HW seen going down after a leader change, records that
were lost but are still in some replica's files).

It must not know how the records were produced or read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable

# Errors after which the record is definitely not in the log (refused before append).
DEFINITE_FAILURES = frozenset({
    "NOT_ENOUGH_REPLICAS", "INVALID_REQUIRED_ACKS", "CORRUPT_MESSAGE", "MESSAGE_TOO_LARGE",
    "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_REQUEST", "RECORD_LIST_TOO_LARGE",
    "NEVER_SENT",       # expired in the client's buffer before any attempt
})


@dataclass(frozen=True)
class Ack:
    value: str
    partition: int
    offset: int
    seq: int


@dataclass(frozen=True)
class Failure:
    value: str
    partition: int
    error: str
    seq: int

    @property
    def definite(self) -> bool:
        return self.error in DEFINITE_FAILURES


@dataclass(frozen=True)
class Read:
    value: str
    partition: int
    offset: int


@dataclass
class Report:
    acked: int = 0
    failed_definite: int = 0
    failed_indeterminate: int = 0
    read: int = 0
    lost: list[Ack] = field(default_factory=list)
    moved: list[tuple[Ack, int]] = field(default_factory=list)     # acked at one offset, read at another
    duplicated: list[tuple[str, list[tuple[int, int]]]] = field(default_factory=list)
    reordered: list[tuple[int, str, str]] = field(default_factory=list)
    failed_read: list[Failure] = field(default_factory=list)
    divergent: list[tuple[str, int, str]] = field(default_factory=list)
    inconsistent: list[tuple[int, int, list[str]]] = field(default_factory=list)
    vanished: list[Read] = field(default_factory=list)
    unconverged: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    idempotent: bool = False        # the producer ran with enable.idempotence=true (shown, never excuses duplicates)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.moved or self.duplicated or self.reordered
                    or self.failed_read or self.divergent or self.inconsistent or self.vanished
                    or self.unconverged)

    def lines(self, limit: int = 10) -> list[str]:
        out = [
            f"acked={self.acked} failed(definite)={self.failed_definite} "
            f"failed(indeterminate)={self.failed_indeterminate} read={self.read}"
            + (" idempotence=on" if self.idempotent else ""),
            f"lost={len(self.lost)} moved={len(self.moved)} duplicated={len(self.duplicated)} "
            f"reordered={len(self.reordered)} failed_read={len(self.failed_read)} "
            f"divergent={len(self.divergent)} inconsistent={len(self.inconsistent)} "
            f"vanished={len(self.vanished)} unconverged={len(self.unconverged)}",
        ]
        for a in self.lost[:limit]:
            out.append(f"  LOST value={a.value} acked at {a.partition}:{a.offset}")
        for a, off in self.moved[:limit]:
            out.append(f"  MOVED value={a.value} acked at {a.partition}:{a.offset}, read at offset {off}")
        for v, where in self.duplicated[:limit]:
            out.append(f"  DUPLICATE value={v} at " + ", ".join(f"{p}:{o}" for p, o in where))
        for p, a, b in self.reordered[:limit]:
            out.append(f"  REORDERED partition {p}: {b} read before {a} but sent after it")
        for f in self.failed_read[:limit]:
            out.append(f"  READ-OF-FAILED value={f.value} partition {f.partition} failed with {f.error}")
        for name, off, why in self.divergent[:limit]:
            out.append(f"  DIVERGENT {name} at offset {off}: {why}")
        for p, off, values in self.inconsistent[:limit]:
            out.append(f"  INCONSISTENT partition {p} offset {off} read as " + " and ".join(values))
        for r in self.vanished[:limit]:
            out.append(f"  VANISHED value={r.value} read at {r.partition}:{r.offset} during the run, "
                       f"absent from the final read")
        for why in self.unconverged[:limit]:
            out.append(f"  UNCONVERGED {why}")
        for n in self.notes[:limit]:
            out.append(f"  note: {n}")
        out.append("RESULT: " + ("PASS" if self.ok else "FAIL"))
        return out


def check(acks: Iterable[Ack], failures: Iterable[Failure], reads: Iterable[Read],
          live_reads: Iterable[Read] = ()) -> Report:
    """`reads` is the final read of every partition from offset 0 after the run;
    `live_reads` what readers got while the run went on (optional)."""
    rep = Report()
    acks = list(acks)
    failures = list(failures)
    reads = list(reads)
    live_reads = list(live_reads)
    rep.acked = len(acks)
    rep.failed_definite = sum(1 for f in failures if f.definite)
    rep.failed_indeterminate = len(failures) - rep.failed_definite
    rep.read = len(reads)

    where: dict[str, list[tuple[int, int]]] = {}
    for r in reads:
        where.setdefault(r.value, []).append((r.partition, r.offset))
    for v, locs in where.items():
        distinct = sorted(set(locs))
        if len(distinct) > 1:
            rep.duplicated.append((v, distinct))

    for a in acks:
        locs = where.get(a.value)
        if not locs:
            rep.lost.append(a)
        elif (a.partition, a.offset) not in locs:
            rep.moved.append((a, locs[0][1]))

    for f in failures:
        if f.definite and f.value in where:
            rep.failed_read.append(f)

    at: dict[tuple[int, int], list[str]] = {}
    for r in reads + live_reads:
        vals = at.setdefault((r.partition, r.offset), [])
        if r.value not in vals:
            vals.append(r.value)
    for (p, off), vals in sorted(at.items()):
        if len(vals) > 1:
            rep.inconsistent.append((p, off, vals))
    vanished_seen: set[str] = set()
    for r in live_reads:
        if r.value not in where and r.value not in vanished_seen:
            vanished_seen.add(r.value)
            rep.vanished.append(r)

    seq_of = {a.value: a.seq for a in acks}
    by_partition: dict[int, list[Read]] = {}
    for r in reads:
        by_partition.setdefault(r.partition, []).append(r)
    for p, rs in by_partition.items():
        rs.sort(key=lambda r: r.offset)
        last_val, last_seq = None, -1
        for r in rs:
            s = seq_of.get(r.value)
            if s is None:
                continue
            if s < last_seq:
                rep.reordered.append((p, r.value, last_val))  # type: ignore[arg-type]
            else:
                last_val, last_seq = r.value, s
    return rep


def compare_replicas(name: str, replicas: dict[int, list[tuple[int, int, int, bytes]]], report: Report) -> None:
    """`replicas` maps broker id -> [(base_offset, last_offset, leader_epoch, batch_bytes)].

    Compares every replica with the first over the offsets both hold; any
    batch that differs in bounds, epoch or bytes is a divergence."""
    ids = sorted(replicas)
    if len(ids) < 2:
        return
    ref_id = ids[0]
    ref = {b[0]: b for b in replicas[ref_id]}
    for other in ids[1:]:
        for b in replicas[other]:
            r = ref.get(b[0])
            if r is None:
                ref_end = max((x[1] for x in replicas[ref_id]), default=-1)
                if b[0] <= ref_end:
                    report.divergent.append((name, b[0], f"broker {other} has a batch at {b[0]} that starts "
                                                         f"inside another batch on broker {ref_id}"))
                continue
            if r[1:3] != b[1:3] or r[3] != b[3]:
                report.divergent.append((name, b[0], f"broker {ref_id} holds {r[0]}..{r[1]} epoch {r[2]}, "
                                                     f"broker {other} holds {b[0]}..{b[1]} epoch {b[2]}"
                                                     + ("" if r[1:3] != b[1:3] else " (bytes differ)")))
