"""One simulated cluster run: the real controller, brokers and clients on the
simulated loop and network, a seeded fault plan, the invariants, a trace.

Owns: the processes of one run (their configs, starting, killing, pausing,
controlled shutdown, restarting on the same data directory), the workload
(one acks=all producer, one consumer reading everything; the producer is
idempotent with retries, Kafka's default, or with `workload="verifiable"`
Kafka's VerifiableProducer: retries=0, no idempotence, five requests in
flight, ten times the rate, so a partition's order rests on the client's
and the broker's request order alone), the nemesis that
carries out a `Plan`, the observations fed to `Invariants`, and the trace
whose digest says whether two runs were the same. Everything random comes
from the run's seed: the network's latencies, the plan, the global `random`
module the clients use, the controller's placement RNG and uuid4.

Must not know: how the loop or the network work inside, the rules of
replication (the real drivers and cores run them).
"""
from __future__ import annotations

import asyncio
import contextvars
import gc
import hashlib
import logging
import os
import random
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from minibroker import clock
from minibroker.broker.server import BrokerServer
from minibroker.client.accumulator import ProducerBatch
from minibroker.client.admin import Admin, NewTopic
from minibroker.client.consumer import Consumer
from minibroker.client.producer import Producer
from minibroker.client.types import TopicPartition
from minibroker.config import DEFAULTS, Config
from minibroker.controller.server import ControllerServer
from minibroker.controller.settings import ControllerSettings
from minibroker.controller.state import ControllerState
from minibroker.errors import KafkaError
from minibroker.dynamic_config import ResourceType
from minibroker.records import iter_records
from minibroker.replication.throttle import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS
from minibroker.sim.faults import Fault, Plan
from minibroker.sim.invariants import Invariants, unconverged
from minibroker.sim.loop import SimLoop, SimProcess
from minibroker.sim.net import SimNetwork
from minibroker.sim.storage import SimDisk
from minibroker.storage.manager import partition_dir_name
from minibroker.verify.checker import DEFINITE_FAILURES, Read
from minibroker.verify.producer import RETRIED
from minibroker.verify.replicas import read_partition

TOPIC = "t"
SECRET = "simulated-cluster-secret"  # fixed: the simulation is deterministic, and nothing leaves the process
EPOCH_MS = 1_700_000_000_000        # virtual wall clock at t=0


@dataclass(frozen=True)
class SimSettings:
    """Timeouts are short but keep Kafka's ratios (heartbeat < session, lag > fetch wait)."""
    brokers: int = 3
    partitions: int = 3
    replication_factor: int = 3
    duration_s: float = 60.0
    session_timeout_ms: int = 2000
    heartbeat_interval_ms: int = 500
    replica_lag_ms: int = 2000
    fetch_wait_ms: int = 500
    fetch_backoff_ms: int = 200
    rebalance_interval_s: int = 5
    produce_interval_s: float = 0.2
    idle_window_s: float = 3.0
    max_idle_requests_per_partition_s: float = 30.0
    power_loss: bool = False
    workload: Literal["idempotent", "verifiable"] = "idempotent"
    reassign: bool = False          # the nemesis also reassigns partitions (faults.py)
    throttle: bool = False          # with reassign: each move is throttled (KIP-73), the throttles cleared at heal

    @property
    def liveness_window_s(self) -> float:
        """The session timeout plus a few lag periods (and a restart's recovery)."""
        return (self.session_timeout_ms + 4 * self.replica_lag_ms) / 1000 + 2.0

    @property
    def heal_at_s(self) -> float:
        return max(5.0, self.duration_s - self.liveness_window_s - self.idle_window_s)


class SimClock:
    """The virtual clock installed for a run: the loop's time, as wall-clock ms from EPOCH_MS."""

    def __init__(self, loop: SimLoop) -> None:
        self.loop = loop

    def now_ms(self) -> int:
        return EPOCH_MS + int(self.loop.time() * 1000)

    def monotonic(self) -> float:
        return self.loop.time()


@dataclass
class RunResult:
    seed: int
    plan: Plan
    violations: list[str]
    trace: list[str]
    digest: str
    sim_seconds: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


class World:
    """Invariant: `procs[name]` is the live (or paused) incarnation of each process, absent when down."""

    def __init__(self, seed: int, plan: Plan, settings: SimSettings, root: str) -> None:
        self.seed = seed
        self.plan = plan
        self.s = settings
        self.root = root
        self.rng = random.Random(seed)
        self.loop = SimLoop()
        self.loop.set_exception_handler(self._on_loop_exception)
        self.net = SimNetwork(self.loop, seed)
        self.disk = SimDisk(root)
        self.inv = Invariants(max_idle_requests_per_partition_s=settings.max_idle_requests_per_partition_s)
        self.retried: set[str] = set()     # values of batches the producer resent (outcome not definite)
        self.trace: list[str] = []
        self.procs: dict[str, SimProcess] = {}
        self.brokers: dict[int, BrokerServer] = {}
        self.controller: ControllerServer | None = None
        self.quiet = 0
        self.stopping = False
        self.healed = False
        self.loop_errors = 0
        self.topics = [TOPIC]
        self.broker_ids = list(range(1, settings.brokers + 1))
        self._ctl_rng = random.Random(seed * 7 + 3)

    # -- trace -----------------------------------------------------------------
    def note(self, what: str) -> None:
        self.trace.append(f"{self.loop.time():9.3f} {what.replace(self.root, '$ROOT')}")

    def _on_loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        msg = str(context.get("message", ""))
        if "was destroyed but it is pending" in msg or "exception was never retrieved" in msg:
            return
        self.loop_errors += 1
        exc = context.get("exception")
        self.note(f"loop-error {msg} {type(exc).__name__ if exc else ''}: {exc}")

    # -- configs ---------------------------------------------------------------
    def _common(self) -> dict[str, str]:
        s = self.s
        return {
            "minibroker.cluster.secret": SECRET,
            "broker.session.timeout.ms": str(s.session_timeout_ms),
            "broker.heartbeat.interval.ms": str(s.heartbeat_interval_ms),
            "min.insync.replicas": "2",
            "default.replication.factor": str(s.replication_factor),
        }

    def controller_config(self) -> Config:
        return Config({**DEFAULTS, **self._common(), "node.id": "3000", "listeners": "CONTROLLER://ctl:9093",
                       "metadata.log.dir": os.path.join(self.root, "controller"),
                       "auto.leader.rebalance.enable": "true",
                       "leader.imbalance.check.interval.seconds": str(self.s.rebalance_interval_s)})

    def broker_config(self, b: int) -> Config:
        s = self.s
        return Config({**DEFAULTS, **self._common(), "node.id": str(b), "broker.rack": f"r{b}",
                       "listeners": f"PLAINTEXT://b{b}:9092", "inter.broker.listener.name": "PLAINTEXT",
                       "log.dirs": os.path.join(self.root, f"broker-{b}"),
                       "controller.quorum.bootstrap.servers": "ctl:9093",
                       "replica.lag.time.max.ms": str(s.replica_lag_ms),
                       "replica.fetch.wait.max.ms": str(s.fetch_wait_ms),
                       "replica.fetch.backoff.ms": str(s.fetch_backoff_ms),
                       "replica.socket.timeout.ms": str(s.session_timeout_ms + 1000),
                       "replica.high.watermark.checkpoint.interval.ms": "500",
                       "minibroker.controlled.shutdown.timeout.ms": "5000",
                       "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
                       # throttled runs copy a log in many small Fetches, so the quota has something to hold back
                       **({"replica.fetch.max.bytes": "512"} if s.throttle else {})})

    @property
    def bootstrap(self) -> str:
        return ",".join(f"b{b}:9092" for b in self.broker_ids)

    # -- processes -------------------------------------------------------------
    def _hook_events(self, name: str, sink: Any, attr: str) -> None:
        orig = getattr(sink, attr)

        def hooked(ev: Any) -> Any:
            self.note(f"{name} {ev.kind} {ev.partition} {ev.before}->{ev.after} {ev.reason}".rstrip())
            return orig(ev)
        setattr(sink, attr, hooked)

    def start_controller(self) -> None:
        proc = SimProcess("ctl", "ctl")
        cfg = self.controller_config()
        server = ControllerServer(cfg, state=ControllerState(ControllerSettings.from_config(cfg),
                                                             rng=random.Random(self._ctl_rng.getrandbits(32))))
        self._hook_events("ctl", server.events, "append")
        self.controller = server
        self.procs["ctl"] = proc

        async def main() -> None:
            await server.start()
            await server.stopped.wait()
        self.loop.spawn(proc, main(), name="ctl")
        self.note("start ctl")

    def start_broker(self, b: int) -> None:
        name = f"b{b}"
        if name in self.procs:
            return
        proc = SimProcess(name, name)
        server = BrokerServer(self.broker_config(b))
        self._hook_events(name, server.events, "_append")
        self.brokers[b] = server
        self.procs[name] = proc

        async def main() -> None:
            await server.run(install_signals=False)
            self.note(f"exit {name}")
            self._exit(name, proc)
        self.loop.spawn(proc, main(), name=name)
        self.note(f"start {name}")

    def _exit(self, name: str, proc: SimProcess) -> None:
        """The process is gone: the kernel closes its sockets. After the heal, a process that
        was still shutting down when every fault was undone is restarted as soon as it exits."""
        self.net.process_died(proc)
        self.loop.kill(proc)
        if self.procs.get(name) is proc:
            del self.procs[name]
            if self.healed:
                self.loop.call_soon(self.restart, name, context=contextvars.Context())

    def kill(self, name: str, power_loss: bool = False) -> None:
        proc = self.procs.get(name)
        if proc is None:
            return
        self._exit(name, proc)
        if power_loss:
            dropped = self.disk.power_loss(self._dir_of(name))
            self.note(f"power-loss {name} ({dropped} file(s) cut back to their fsynced length)")
        else:
            self.note(f"kill {name}")

    def _dir_of(self, name: str) -> str:
        return os.path.join(self.root, "controller" if name == "ctl" else f"broker-{name[1:]}")

    def restart(self, name: str) -> None:
        if name in self.procs:
            return
        if name == "ctl":
            self.start_controller()
        else:
            self.start_broker(int(name[1:]))

    def pause(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and not proc.paused:
            proc.paused = True
            self.note(f"pause {name}")

    def resume(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.paused:
            self.loop.resume(proc)
            self.note(f"resume {name}")

    def controlled_shutdown(self, b: int) -> None:
        name = f"b{b}"
        proc = self.procs.get(name)
        if proc is None or proc.paused:
            return
        self.note(f"shutdown {name}")
        proc.context.run(self.brokers[b].request_stop, "sim nemesis: controlled shutdown")

    # -- observations ------------------------------------------------------------
    def leaders_sample(self) -> None:
        t = self.loop.time()
        for b in self.broker_ids:
            proc = self.procs.get(f"b{b}")
            rm = self.brokers[b].replica_manager if b in self.brokers else None
            if proc is None or rm is None:
                continue
            for e in rm.replica_status(None)["partitions"]:
                if e["role"] == "leader":
                    self.inv.on_leader(t, b, f"{e['topic']}-{e['partition']}", e["leader_epoch"], e["hw"])

    def controller_view(self) -> dict[str, dict[str, Any]]:
        ctl = self.controller
        out: dict[str, dict[str, Any]] = {}
        if ctl is None or "ctl" not in self.procs:
            return out
        for topic in sorted(ctl.core.topics.partitions):
            for p, rec in sorted(ctl.core.topics.partitions[topic].items()):
                out[f"{topic}-{p}"] = {"leader": rec.leader, "isr": list(rec.isr), "replicas": list(rec.replicas),
                                       "epoch": rec.leader_epoch}
        return out

    def broker_leos(self) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for b in self.broker_ids:
            rm = self.brokers[b].replica_manager if b in self.brokers and f"b{b}" in self.procs else None
            if rm is None:
                continue
            for e in rm.replica_status(None)["partitions"]:
                out.setdefault(f"{e['topic']}-{e['partition']}", {})[b] = e["leo"]
        return out

    def unconverged(self) -> list[str]:
        view = self.controller_view()
        if not view:
            return ["the controller is down or knows no partition"]
        down = [n for n in ["ctl"] + [f"b{b}" for b in self.broker_ids] if n not in self.procs]
        return ([f"{n} is not running" for n in down]) + unconverged(view, self.broker_leos())

    # -- workload --------------------------------------------------------------
    async def producer_main(self) -> None:
        cfg = {"acks": "all", "linger.ms": "5", "request.timeout.ms": "3000", "delivery.timeout.ms": "10000",
               "retry.backoff.ms": "100", "max.block.ms": "5000", "client.id": "sim-producer"}
        interval_s = self.s.produce_interval_s
        if self.s.workload == "verifiable":
            cfg.update({"retries": "0", "enable.idempotence": "false", "linger.ms": "2",
                        "max.in.flight.requests.per.connection": "5"})
            interval_s /= 10
        prod = Producer(self.bootstrap, cfg)
        prod.on_retry = self._on_retry
        seq = 0
        pending: set[asyncio.Task] = set()
        while not self.stopping:
            await asyncio.sleep(interval_s)
            if self.quiet or self.stopping:
                continue
            seq += 1
            value = f"v{seq}"
            part = seq % self.s.partitions
            task = asyncio.ensure_future(self._send(prod, value, part, seq))
            pending.add(task)
            task.add_done_callback(pending.discard)

    def _on_retry(self, batch: ProducerBatch, err: KafkaError) -> None:
        """The producer resends `batch`: its records' outcome is no longer definite (as verify's)."""
        self.retried.update(rec[1].decode() for rec in batch.records)

    async def _send(self, prod: Producer, value: str, part: int, seq: int) -> None:
        try:
            fut = await prod.send(TOPIC, value.encode(), partition=part)
            md = await fut
        except KafkaError as exc:
            name = exc.code.name if hasattr(exc.code, "name") else str(exc.code)
            if value in self.retried and name in DEFINITE_FAILURES:
                name = RETRIED + name        # an earlier attempt may have appended it: not a definite failure
            self.inv.on_failure(value, part, name, seq)
            return
        self.inv.on_ack(value, md.partition, md.offset, seq)
        self.note(f"ack {value} {md.partition}:{md.offset}")

    async def consumer_main(self) -> None:
        cons = Consumer(self.bootstrap, {"client.id": "sim-consumer", "auto.offset.reset": "earliest",
                                         "client.rack": "r1",      # reads from broker 1 where it is a follower
                                         "request.timeout.ms": "3000", "fetch.max.wait.ms": "500"})
        while True:
            try:
                await cons.assign_topic(TOPIC)
                break
            except KafkaError:
                await asyncio.sleep(0.5)
        for tp in cons.assignment():
            cons.seek(tp, 0)
        while True:
            try:
                records = await cons.poll(1000)
            except KafkaError as exc:
                self.note(f"consumer error {exc}")
                await asyncio.sleep(0.2)
                continue
            for r in records:
                self.inv.on_read(self.loop.time(), r.partition, r.offset, (r.value or b"").decode())

    # -- the nemesis -----------------------------------------------------------
    async def admin_call(self, what: str, fn: Callable[[Admin], Any]) -> bool:
        adm = Admin(self.bootstrap, {"request.timeout.ms": "3000", "default.api.timeout.ms": "5000"})
        try:
            await asyncio.wait_for(fn(adm), 6)
            self.note(f"{what}: ok")
            return True
        except (KafkaError, TimeoutError) as exc:
            self.note(f"{what}: {type(exc).__name__} {exc}")
            return False
        finally:
            await adm.close()

    def leader_of(self, partition: int) -> int | None:
        view = self.controller_view().get(f"{TOPIC}-{partition}")
        return view["leader"] if view and view["leader"] >= 0 else None

    async def apply(self, f: Fault) -> None:
        k = f.kind
        name = f"b{f.target}" if isinstance(f.target, int) else str(f.target)
        self.note(f"fault {f.describe()}")
        if k in ("kill", "power_loss", "ctl_kill"):
            self.kill(name, power_loss=(k == "power_loss"))
            await asyncio.sleep(f.hold)
            self.restart(name)
        elif k == "pause":
            self.pause(name)
            await asyncio.sleep(f.hold)
            self.resume(name)
        elif k == "isolate":
            others = ["ctl", "p1", "c1", "harness"] + [f"b{b}" for b in self.broker_ids if f"b{b}" != name]
            for o in others:
                self.net.cut(name, o)
                self.net.cut(o, name)
            await asyncio.sleep(f.hold)
            for o in others:
                self.net.heal(name, o)
                self.net.heal(o, name)
            self.note(f"heal {name}")
        elif k == "cut":
            dst = f"b{f.other}" if isinstance(f.other, int) else str(f.other)
            self.net.cut(name, dst)
            await asyncio.sleep(f.hold)
            self.net.heal(name, dst)
            self.note(f"heal {name}->{dst}")
        elif k == "reset":
            self.note(f"reset {self.net.reset_one()}")
        elif k == "shutdown":
            assert isinstance(f.target, int)
            self.controlled_shutdown(f.target)
            await asyncio.sleep(f.hold)
            while name in self.procs and not self.stopping:
                await asyncio.sleep(0.5)
            self.restart(name)
        elif k == "elect":
            await self.admin_call("preferred election", lambda a: a.elect_leaders("preferred"))
        elif k == "rebalance":
            if self.controller is not None and "ctl" in self.procs:
                self.controller.core.next_rebalance_ms = 0
        elif k == "create_topic":
            topic = f"n{len(self.topics)}"
            self.topics.append(topic)
            await self.admin_call(f"create topic {topic}", lambda a: a.create_topics(
                [NewTopic(topic, 1 + f.other % 3 if isinstance(f.other, int) else 1, self.s.replication_factor)]))
        elif k == "quiet":
            self.quiet += 1
            await asyncio.sleep(f.hold)
            self.quiet -= 1
        elif k == "move":
            await self.quiet_move(f)
        elif k == "reassign":
            await self.reassign(f)

    async def reassign(self, f: Fault) -> None:
        """KIP-455 under the other faults: a full replica set loses broker `f.target`; a partial one gets
        its missing brokers back, first in the order (the preferred leader once it has caught up).
        With a hold under a second, the move is cancelled after it (a no-op if it completed)."""
        part = int(f.other) if isinstance(f.other, int) else 0
        view = self.controller_view().get(f"{TOPIC}-{part}")
        if view is None:
            return
        current = view["replicas"]
        if len(current) >= len(self.broker_ids):
            target = [r for r in current if r != f.target]
        else:
            target = [b for b in self.broker_ids if b not in current] + current
        tp = TopicPartition(TOPIC, part)
        if self.s.throttle:
            await self.set_throttles(int(f.hold * 10))
        await self.admin_call(f"reassign {tp} to {target}", lambda a: a.alter_partition_reassignments({tp: target}))
        if f.hold < 1.0:
            await asyncio.sleep(f.hold)
            await self.admin_call(f"cancel the reassignment of {tp}",
                                  lambda a: a.alter_partition_reassignments({tp: None}))

    async def set_throttles(self, rate: int) -> None:
        """KIP-73 on every replica of the topic (`*`, both sides) at `rate` B/s, the cluster default."""
        async def throttle(a: Admin) -> None:
            await a.incremental_alter_configs((ResourceType.TOPIC, TOPIC), {LEADER_REPLICAS: "*",
                                                                             FOLLOWER_REPLICAS: "*"})
            await a.incremental_alter_configs((ResourceType.BROKER, ""), {LEADER_RATE: str(rate),
                                                                          FOLLOWER_RATE: str(rate)})
        await self.admin_call(f"throttle replication to {rate} B/s", throttle)

    async def clear_throttles(self) -> None:
        """At heal, as `reassign-partitions --verify` does once the moves are done: the throttles go, so a
        replica the throttle kept behind can catch up (retried while the restarted cluster settles)."""
        async def clear(a: Admin) -> None:
            await a.incremental_alter_configs((ResourceType.TOPIC, TOPIC), {}, [LEADER_REPLICAS, FOLLOWER_REPLICAS])
            await a.incremental_alter_configs((ResourceType.BROKER, ""), {}, [LEADER_RATE, FOLLOWER_RATE])
        for _ in range(20):
            if await self.admin_call("clear the throttles", clear):
                return
            await asyncio.sleep(0.5)

    async def quiet_move(self, f: Fault) -> None:
        """A leadership move in which nothing is written: stop producing, kill the leader of one
        partition, restart it once another replica leads, then a preferred election."""
        self.quiet += 1
        try:
            part = int(f.other) if isinstance(f.other, int) else 0
            old = self.leader_of(part)
            if old is None:
                return
            self.kill(f"b{old}")
            for _ in range(int(self.s.session_timeout_ms / 100) + 40):
                await asyncio.sleep(0.1)
                now = self.leader_of(part)
                if now is not None and now != old:
                    break
            await asyncio.sleep(f.hold)
            self.restart(f"b{old}")
            for _ in range(100):
                await asyncio.sleep(0.1)
                v = self.controller_view().get(f"{TOPIC}-{part}")
                if v and old in v["isr"]:
                    break
            await self.admin_call("preferred election", lambda a: a.elect_leaders("preferred"))
            await asyncio.sleep(1.0)
        finally:
            self.quiet -= 1

    async def nemesis(self) -> None:
        running: list[asyncio.Task] = []
        for f in self.plan.faults:
            delay = f.at - self.loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.loop.time() >= self.s.heal_at_s:
                break
            running.append(asyncio.ensure_future(self.apply(f)))
        await asyncio.sleep(max(0.0, self.s.heal_at_s - self.loop.time()))
        for t in running:
            t.cancel()

    # -- the run -----------------------------------------------------------------
    async def monitor(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            self.leaders_sample()

    async def until(self, cond: Callable[[], bool], timeout_s: float, step_s: float = 0.1) -> bool:
        deadline = self.loop.time() + timeout_s
        while not cond():
            if self.loop.time() >= deadline:
                return False
            await asyncio.sleep(step_s)
        return True

    def heal_everything(self) -> None:
        self.note("heal everything")
        self.healed = True
        self.net.heal()
        self.quiet = 0
        for name in sorted(self.procs):
            self.resume(name)
        for name in ["ctl"] + [f"b{b}" for b in self.broker_ids]:
            self.restart(name)

    async def main(self) -> None:
        s = self.s
        self.start_controller()
        for b in self.broker_ids:
            self.start_broker(b)
        running = lambda: all(self.brokers[b].state.value == "RUNNING" for b in self.broker_ids)  # noqa: E731
        if not await self.until(running, 20):
            self.inv.liveness(self.loop.time(), ["the cluster did not start"])
            return
        await self.admin_call(f"create topic {TOPIC}", lambda a: a.create_topics(
            [NewTopic(TOPIC, s.partitions, s.replication_factor)]))
        await self.until(lambda: not self.unconverged(), 10)
        self.note("cluster up")
        mon = asyncio.ensure_future(self.monitor())
        prod = SimProcess("producer", "p1")
        cons = SimProcess("consumer", "c1")
        self.loop.spawn(prod, self.producer_main(), name="producer")
        self.loop.spawn(cons, self.consumer_main(), name="consumer")
        await self.nemesis()
        self.heal_everything()
        self.stopping = True           # the producer stops: the cluster goes idle
        if s.throttle:
            await self.clear_throttles()
        t0 = self.loop.time()
        ok = await self.until(lambda: not self.unconverged(), s.liveness_window_s)
        if not ok:
            self.inv.liveness(self.loop.time(), self.unconverged())
        self.note(f"converged={ok} after {self.loop.time() - t0:.1f}s")
        r0, by0 = self.net.requests, dict(self.net.requests_by)
        idle_s = max(s.idle_window_s, s.duration_s - self.loop.time())     # the run lasts duration_s
        worst = 0
        for _ in range(max(1, int(idle_s))):         # the busiest simulated second of the idle window
            before = self.net.requests
            await asyncio.sleep(idle_s / max(1, int(idle_s)))
            worst = max(worst, self.net.requests - before)
        busiest = sorted(((n - by0.get(k, 0), k) for k, n in self.net.requests_by.items()), reverse=True)[:3]
        self.note(f"idle {idle_s:.1f}s, {self.net.requests - r0} requests, by path: "
                  + ", ".join(f"{a}->{b}={n}" for n, (a, b) in busiest))
        rate = self.inv.idle_requests(self.loop.time(), worst, idle_s / max(1, int(idle_s)),
                                      len(self.controller_view()))
        self.note(f"idle requests per partition in the busiest second {rate:.1f}")
        mon.cancel()
        self.final_check()

    def final_check(self) -> None:
        view = self.controller_view()
        reads: list[Read] = []
        replicas: dict[int, dict[int, list[Any]]] = {}
        isr: dict[int, list[int]] = {}
        for p in range(self.s.partitions):
            v = view.get(f"{TOPIC}-{p}")
            if not v or v["leader"] < 0 or v["leader"] not in self.brokers:
                continue
            rm = self.brokers[v["leader"]].replica_manager
            if rm is None:
                continue
            hw = next((e["hw"] for e in rm.replica_status([TOPIC])["partitions"] if e["partition"] == p), 0)
            isr[p] = v["isr"]
            replicas[p] = {b: read_partition(os.path.join(self.root, f"broker-{b}", partition_dir_name(TOPIC, p)),
                                             upto=hw) for b in v["replicas"]}
            for batch in replicas[p].get(v["leader"], []):
                for rec in iter_records(batch[3]):
                    reads.append(Read((rec.value or b"").decode(), p, rec.offset))
        rep = self.inv.final_data(self.loop.time(), reads, replicas, isr)
        self.note(f"acked={rep.acked} read={rep.read} live_reads={len(self.inv.live_reads)}")


@contextmanager
def _seeded_process_globals(seed: int) -> Iterator[None]:
    """The globals the real code draws from, seeded for the run and restored after."""
    state = random.getstate()
    random.seed(seed)
    urng = random.Random(seed ^ 0x5EED)
    real_uuid4 = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=urng.getrandbits(128), version=4)  # type: ignore[assignment]
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        uuid.uuid4 = real_uuid4  # type: ignore[assignment]
        random.setstate(state)
        logging.disable(disabled)


def _discard(world: World) -> None:
    """Close the loop and collect what the run left (tasks of killed processes); their
    coroutines are closed without a running loop, which may complain: nobody listens."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda _u: None
    try:
        world.loop.close()
        for value in list(vars(world).values()):
            if isinstance(value, dict):
                value.clear()
        world.controller = None
        world.net = None  # type: ignore[assignment]
        world.loop.network = None
        gc.collect()
    finally:
        sys.unraisablehook = hook


def _open_fds() -> set[int]:
    try:
        return {int(n) for n in os.listdir("/proc/self/fd")}
    except OSError:
        return set()


def run_seed(seed: int, plan: Plan | None = None, settings: SimSettings | None = None,
             world_cls: type[World] = World) -> RunResult:
    """Run one seed (its own plan unless one is given) and check it. `world_cls` lets a test
    plant a defect in the world to see that the invariants catch it."""
    from minibroker.sim.faults import make_plan
    s = settings or SimSettings()
    plan = plan if plan is not None else make_plan(seed, s)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    root = tempfile.mkdtemp(prefix=f"minibroker-sim-{seed}-", dir=shm)
    fds = _open_fds()
    world = world_cls(seed, plan, s, root)
    try:
        with _seeded_process_globals(seed), clock.using(SimClock(world.loop)), world.disk.installed():
            try:
                world.loop.run_until_complete(asyncio.wait_for(world.main(), s.duration_s + 60))
            except TimeoutError:
                world.inv.liveness(world.loop.time(), ["the run did not finish"])
            finally:
                requests = world.net.requests
                _discard(world)
    finally:
        for fd in sorted(_open_fds() - fds):   # files the killed processes left open
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(root, ignore_errors=True)
    world.trace.append(f"violations={len(world.inv.violations)}")
    world.trace.extend(world.inv.violations)
    digest = hashlib.sha256("\n".join(world.trace).encode()).hexdigest()[:16]
    stats = {"callbacks": world.loop.callbacks, "requests": requests, "loop_errors": world.loop_errors}
    return RunResult(seed, plan, list(world.inv.violations), world.trace, digest, world.loop.time(), stats)
