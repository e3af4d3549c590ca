"""A verification run: load while faults happen, then the checker's verdict.

Owns the order of a run, as Kafka's ProduceConsumeValidateTest and
Jepsen's final-read rule give it:

  1. start the verifiable producer (acks=all, numbered values) and a live
     consumer following every partition from offset 0;
  2. the caller injects faults and waits on `progress()` (acks still come);
  3. `finish()`: stop the producer (every outcome known), stop the live
     reader, wait until the replicas converged (every replica's LEO equals
     its leader's and the HW caught up) when the replica logs are given,
     read every partition from offset 0 with a fresh consumer up to the
     final HW, run the checker, compare the replicas' batches byte for byte
     and, for every lost record, say whether any replica's files hold it.

Must not know about processes or faults (the caller owns the cluster).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

from minibroker import clock
from minibroker.client.admin import Admin
from minibroker.errors import KafkaError
from minibroker.verify.checker import Report, check, compare_replicas
from minibroker.verify.consumer import VerifiableConsumer
from minibroker.verify.producer import VerifiableProducer, new_run_id
from minibroker.verify.replicas import ReplicaDirs, find_values, read_partition, wait_converged

ADMIN_SETTINGS = {"request.timeout.ms": "3000", "default.api.timeout.ms": "15000",
                  "reconnect.backoff.max.ms": "300", "socket.connection.setup.timeout.ms": "2000",
                  "metadata.max.age.ms": "1000"}


@dataclass
class FinishOptions:
    replica_dirs: ReplicaDirs | None = None
    converge_timeout_s: float = 30.0
    hw_timeout_s: float = 15.0
    read_timeout_s: float = 30.0


async def ensure_topic(admin: Admin, topic: str, partitions: int = 3, replication_factor: int = 3,
                       configs: Mapping[str, str] | None = None,
                       assignments: list[list[int]] | None = None) -> None:
    """Create the topic unless it exists; return once every partition has a leader."""
    if assignments is not None:
        await admin.create_topic(topic, configs=dict(configs or {}), assignments=assignments, if_not_exists=True)
    else:
        await admin.create_topic(topic, partitions, replication_factor, dict(configs or {}), if_not_exists=True)


async def topic_layout(admin: Admin, topic: str) -> dict[int, list[int]]:
    """partition -> assigned replicas."""
    td = (await admin.describe_topics([topic]))[0]
    return {p.partition: list(p.replicas) for p in td.partitions}


async def broker_addresses(admin: Admin) -> dict[int, tuple[str, int]]:
    cd = await admin.describe_cluster()
    return {b.node_id: (b.host, b.port) for b in cd.brokers}


@dataclass
class Workload:
    """Invariant: `producer` and `live` belong to this run (`run` prefixes every value)."""
    bootstrap: str
    topic: str
    partitions: int
    rate: float = 0.0
    run: str = field(default_factory=new_run_id)
    producer_config: Mapping[str, Any] | None = None
    consumer_config: Mapping[str, Any] | None = None
    follow: bool = True
    max_in_flight: int = 500

    def __post_init__(self) -> None:
        self.producer = VerifiableProducer(self.bootstrap, self.topic, self.partitions, run=self.run,
                                           config=self.producer_config, rate=self.rate,
                                           max_in_flight=self.max_in_flight)
        self.live: VerifiableConsumer | None = None
        self.started_at = 0.0
        self.stopped = False

    async def start(self, records: int | None = None, duration_s: float | None = None) -> Workload:
        """Start the producer (limited by `records`/`duration_s` if given) and the live reader."""
        self.started_at = clock.monotonic()
        await self.producer.start(records, duration_s)
        if self.follow:
            self.live = VerifiableConsumer(self.bootstrap, self.topic, run=self.run, config=self.consumer_config)
            await self.live.start()
            self.live.follow()
        return self

    @property
    def acked(self) -> int:
        return self.producer.acked_count()

    async def progress(self, count: int = 50, timeout_s: float = 30.0, partition: int | None = None) -> None:
        """Until `count` more records (on `partition`, if given) were acknowledged from now."""
        base = self.producer.acked_count(partition)
        await self.producer.wait_acked(base + count, timeout_s, partition)

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        await self.producer.stop()
        if self.live is not None:
            await self.live.stop()

    async def finish(self, opts: FinishOptions | None = None) -> Report:
        """Stop the load, converge, read everything, check."""
        opts = opts or FinishOptions()
        await self.stop()
        return await verify_topic(self.bootstrap, self.topic, self.partitions, self.run, self.producer,
                                  self.live, opts)


async def _final_hws(admin: Admin, topic: str, partitions: int, wanted: dict[int, int],
                     timeout_s: float) -> tuple[dict[int, int], str]:
    """Each partition's HW (ListOffsets LATEST), waiting up to `timeout_s` for it to reach
    `wanted` (one past the last acknowledged offset)."""
    deadline = clock.monotonic() + timeout_s
    hws: dict[int, int] = {}
    why = ""
    while True:
        try:
            got = await admin.topic_offsets(topic)
            hws.update(got)
            short = [p for p in range(partitions) if hws.get(p, -1) < wanted.get(p, 0)]
            if not short:
                return hws, ""
            why = ", ".join(f"partition {p}: HW {hws.get(p, -1)} < {wanted.get(p, 0)}" for p in short)
        except KafkaError as exc:
            why = str(exc)
        if clock.monotonic() > deadline:
            return hws, why
        await asyncio.sleep(0.1)


async def verify_topic(bootstrap: str, topic: str, partitions: int, run: str, producer: VerifiableProducer,
                       live: VerifiableConsumer | None, opts: FinishOptions) -> Report:
    notes: list[str] = []
    unconverged: list[str] = []
    status: dict = {}
    async with Admin(bootstrap, ADMIN_SETTINGS) as admin:
        layout = await topic_layout(admin, topic)
        if opts.replica_dirs is not None:
            addresses = await broker_addresses(admin)
            ok, why, status = await wait_converged(admin, addresses, topic, partitions, layout,
                                                   opts.converge_timeout_s)
            if not ok:
                unconverged.append(f"after {opts.converge_timeout_s:.0f}s: {why}")
        wanted = {p: o + 1 for p, o in producer.last_acked_offsets().items()}
        hws, why = await _final_hws(admin, topic, partitions, wanted, opts.hw_timeout_s)
        if why:
            notes.append(f"final HW below the last acknowledged offset: {why}")
    final = VerifiableConsumer(bootstrap, topic, run=run)
    await final.start()
    try:
        targets = {p: hws[p] if p in hws else wanted.get(p, 0) for p in range(partitions)}
        short = await final.read_all(targets, opts.read_timeout_s)
    finally:
        await final.stop()
    for p, pos in short.items():
        notes.append(f"final read of partition {p} stopped at {pos}, HW {hws.get(p)}")
    rep = check(producer.acks, producer.failures, final.reads, live.reads if live is not None else ())
    rep.idempotent = producer.idempotent
    rep.unconverged.extend(unconverged)
    if live is not None:
        notes.extend(f"live reader: {n}" for n in live.notes[:5])
        notes.extend(f"live reader saw HW go down (allowed after a leader change): {n}"
                     for n in live.hw_regressions[:3])
    notes.extend(f"final reader: {n}" for n in final.notes[:5])
    errs = producer.error_counts()
    if errs:
        notes.append("produce failures: " + ", ".join(f"{k}={v}" for k, v in sorted(errs.items())))
    if opts.replica_dirs is not None:
        _compare(rep, opts.replica_dirs, topic, partitions, layout, status, notes)
    rep.notes.extend(notes)
    return rep


def _compare(rep: Report, dirs: ReplicaDirs, topic: str, partitions: int, layout: dict[int, list[int]],
             status: dict, notes: list[str]) -> None:
    """Byte comparison over what the converged replicas hold, and where lost records are."""
    lost_by_p: dict[int, list[str]] = {}
    for a in rep.lost:
        lost_by_p.setdefault(a.partition, []).append(a.value)
    for p in range(partitions):
        name = f"{topic}-{p}"
        st = status.get(p, {})
        leader = next((s for s in st.values() if s.get("role") == "leader"), None)
        same = [b for b in layout.get(p, []) if b in dirs.dirs and leader is not None and b in st
                and st[b]["leo"] == leader["leo"]]
        upto = leader["leo"] if leader is not None else None
        replicas = {b: read_partition(dirs.partition_dir(b, topic, p), upto) for b in same}
        if replicas:
            ends = {b: (bs[-1][1] + 1 if bs else 0) for b, bs in replicas.items()}
            if upto is not None:
                for b, end in ends.items():
                    if end != upto:
                        rep.unconverged.append(f"{name}: broker {b} files end at {end}, its LEO says {upto}")
        before = len(rep.divergent)
        compare_replicas(name, replicas, rep)
        if replicas and len(rep.divergent) == before:
            n = max(len(bs) for bs in replicas.values())
            notes.append(f"replicas of {name} on brokers {sorted(replicas)}: identical, "
                         f"{n} batches below offset {upto}")
        for value in lost_by_p.get(p, [])[:20]:
            where = [f"broker {b} offset {o}" for b in layout.get(p, []) if b in dirs.dirs
                     for v, o in find_values(dirs.partition_dir(b, topic, p), [value]).items()]
            notes.append(f"lost {value}: " + (", ".join(where) if where else "on no replica's disk"))


async def run_verify(bootstrap: str, topic: str, *, records: int | None, duration_s: float | None,
                     partitions: int = 3, replication_factor: int = 3, min_isr: int | None = None,
                     rate: float = 0.0, create: bool = True, replica_dirs: ReplicaDirs | None = None,
                     converge_timeout_s: float = 30.0, stop: asyncio.Event | None = None,
                     tick: Callable[[Workload, str], None] | None = None, idempotent: bool = False) -> Report:
    """`minibroker verify`: create the topic if needed, produce and follow for the given
    count/duration (or until `stop` is set: Ctrl-C), then finish the run (see
    Workload.finish). `tick(workload, phase)` is called about 4 times a second while sending."""
    async with Admin(bootstrap, ADMIN_SETTINGS) as admin:
        if create:
            cfg = {"min.insync.replicas": str(min_isr)} if min_isr is not None else {}
            await ensure_topic(admin, topic, partitions, replication_factor, cfg)
        partitions = len(await topic_layout(admin, topic))
    wl = Workload(bootstrap, topic, partitions, rate=rate,
                  producer_config={"enable.idempotence": "true"} if idempotent else None)
    await wl.start(records, duration_s)
    await _sending(wl, stop, tick)
    if tick is not None:
        tick(wl, "checking")
    return await wl.finish(FinishOptions(replica_dirs=replica_dirs, converge_timeout_s=converge_timeout_s))


async def _sending(wl: Workload, stop: asyncio.Event | None, tick: Callable[[Workload, str], None] | None) -> None:
    """Until the producer has sent everything it was asked to, or `stop` is set."""
    done = asyncio.ensure_future(wl.producer.sending_done())
    stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        while not done.done() and not (stopped is not None and stopped.done()):
            if tick is not None:
                tick(wl, "producing")
            await asyncio.wait([f for f in (done, stopped) if f is not None], timeout=0.25,
                               return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in (done, stopped):
            if f is not None and not f.done():
                f.cancel()

