"""Faults on a local cluster of real processes, and what the brokers say happened.

Owns, for one topic of one `LocalCluster`: the faults this object put in
place (stopped/killed nodes, paused ones, isolated ones) and undoing them
(`restore`), the brokers' own views of each partition (ReplicaStatus: role,
leader, ISR, epochs, LEO/HW), conditions on them with deadlines, the choice
of a fault's target (the leader of a partition, a follower, the
controller), and a `Workload` run under the faults. Used by the failure
tests and by the randomised soak (`minibroker.verify.soak`, bench/soak.py).

The freshest view of a partition is the one with the highest partition
epoch among reachable brokers, since brokers apply metadata only forwards
(I7); paused or isolated brokers are not asked (their view may be stale,
which is the point of those faults).

Must not know what the checker concludes.
"""
from __future__ import annotations

import asyncio
from typing import Any
from collections.abc import Callable

from minibroker import clock
from minibroker.client.admin import Admin
from minibroker.errors import KafkaError
from minibroker.testing.cluster import LocalCluster, wait_for
from minibroker.testing.layout import CONTROLLER_ID
from minibroker.verify.checker import Report
from minibroker.verify.replicas import ReplicaDirs
from minibroker.verify.runner import FinishOptions, Workload, ensure_topic


class FaultRig:
    """Faults on a LocalCluster and the views that say what they did, for one topic.

    Invariant: `down` holds the nodes this rig stopped or killed, `paused` those
    it froze, `cut` those it isolated; `restore()` undoes all three."""

    # The load's producer: short time-outs so a fault costs seconds, not Kafka's 30 s.
    PRODUCER = {"request.timeout.ms": "3000", "delivery.timeout.ms": "6000"}

    def __init__(self, cluster: LocalCluster, topic: str = "t", partitions: int = 3) -> None:
        self.c = cluster
        self.topic = topic
        self.partitions = partitions
        self.down: set[int] = set()
        self.paused: set[int] = set()
        self.cut: set[int] = set()
        self.admin = Admin(cluster.bootstrap, {"request.timeout.ms": "2000", "default.api.timeout.ms": "15000",
                                               "reconnect.backoff.max.ms": "200",
                                               "socket.connection.setup.timeout.ms": "1000"})
        self.workload: Workload | None = None

    async def close(self) -> None:
        if self.workload is not None and not self.workload.stopped:
            await self.workload.stop()
        await self.admin.close()

    async def __aenter__(self) -> FaultRig:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- topic and load -------------------------------------------------------------

    async def create_topic(self, assignments: list[list[int]] | None = None,
                           configs: dict[str, str] | None = None) -> None:
        await ensure_topic(self.admin, self.topic, self.partitions, 3, configs or {}, assignments)
        await self.wait_isr_full()

    async def start_load(self, rate: float = 0.0, producer: dict[str, str] | None = None,
                         follow: bool = True, max_in_flight: int = 200) -> Workload:
        self.workload = Workload(self.c.bootstrap, self.topic, self.partitions, rate=rate,
                                 producer_config={**self.PRODUCER, **(producer or {})}, follow=follow,
                                 max_in_flight=max_in_flight)
        await self.workload.start()
        return self.workload

    async def progress(self, count: int = 30, timeout_s: float = 30.0, partition: int | None = None) -> None:
        assert self.workload is not None
        await self.workload.progress(count, timeout_s, partition)

    async def finish(self, converge_timeout_s: float = 30.0) -> Report:
        """Restore every fault, then stop the load and run the checker with the replica comparison."""
        assert self.workload is not None
        await self.restore()
        rep = await self.workload.finish(FinishOptions(replica_dirs=ReplicaDirs.of_local_cluster(self.c.data_dir),
                                                       converge_timeout_s=converge_timeout_s))
        return rep

    # -- views ------------------------------------------------------------------------

    def reachable(self) -> list[int]:
        return [b for b in self.c.broker_ids if b not in self.down and b not in self.paused]

    async def status_of(self, broker: int, timeout_s: float = 2.0) -> dict[int, dict[str, Any]]:
        """partition -> broker `broker`'s own ReplicaStatus entry for it."""
        st = await asyncio.wait_for(self.admin.replica_status(self.c.broker_address(broker), [self.topic]),
                                    timeout_s)
        return {p["partition"]: p for p in st.get("partitions", ()) if p.get("topic") == self.topic}

    async def views(self, brokers: list[int] | None = None) -> dict[int, dict[int, dict[str, Any]]]:
        """broker -> partition -> entry, for the brokers that answer."""
        out: dict[int, dict[int, dict[str, Any]]] = {}

        async def one(b: int) -> None:
            try:
                out[b] = await self.status_of(b)
            except (TimeoutError, KafkaError, OSError):
                pass
        await asyncio.gather(*(one(b) for b in (brokers if brokers is not None else self.reachable())))
        return out

    async def freshest(self, p: int, exclude: set[int] | None = None) -> dict[str, Any] | None:
        """The view of partition `p` with the highest partition epoch among reachable, un-cut brokers."""
        brokers = [b for b in self.reachable() if b not in self.cut and b not in (exclude or set())]
        best = None
        for parts in (await self.views(brokers)).values():
            e = parts.get(p)
            if e is not None and (best is None or e["partition_epoch"] > best["partition_epoch"]):
                best = e
        return best

    async def leader(self, p: int = 0) -> int:
        v = await self.freshest(p)
        assert v is not None, f"no broker answered for partition {p}"
        return v["leader"]

    async def isr(self, p: int = 0) -> list[int]:
        v = await self.freshest(p)
        assert v is not None
        return list(v["isr"])

    async def wait_view(self, pred: Callable[[dict[int, dict[str, Any]]], bool], what: str,
                        timeout_s: float = 30.0, exclude: set[int] | None = None) -> None:
        """Until `pred({partition: freshest view})` holds."""
        async def cond() -> bool:
            vs = {p: await self.freshest(p, exclude) for p in range(self.partitions)}
            if any(v is None for v in vs.values()):
                return False
            return pred(vs)  # type: ignore[arg-type]
        await wait_for(cond, timeout_s=timeout_s, interval_s=0.1, what=what)

    async def wait_metadata(self, pred: Callable[[Any], bool], what: str, p: int = 0,
                            timeout_s: float = 30.0) -> Any:
        """Until `pred(PartitionDescription)` holds for partition `p` in a Metadata answer
        (from any broker that answers; for partitions no live replica reports on)."""
        async def cond() -> Any:
            td = (await self.admin.describe_topics([self.topic]))[0]
            pd = next(x for x in td.partitions if x.partition == p)
            return pd if pred(pd) else None
        return await wait_for(cond, timeout_s=timeout_s, interval_s=0.1, what=what)

    async def wait_isr_full(self, timeout_s: float = 40.0) -> None:
        """Every partition led, with every replica in the ISR, as the freshest views say,
        and every leader's own status agreeing (it leads, its ISR is full)."""
        async def cond() -> bool:
            vs = await self.views(self.c.broker_ids)
            missing = [b for b in self.c.broker_ids if b not in vs]
            if missing:
                raise AssertionError(f"brokers {missing} do not answer")
            for p in range(self.partitions):
                entries = [v[p] for v in vs.values() if p in v]
                best = max(entries, key=lambda e: e["partition_epoch"])
                lead = best["leader"]
                if lead < 0 or sorted(best["isr"]) != sorted(r["broker_id"] for r in best["replicas"]):
                    raise AssertionError(f"partition {p}: leader {lead} ISR {best['isr']} "
                                         f"(partition epoch {best['partition_epoch']})")
                own = vs.get(lead, {}).get(p)
                if own is None or own["role"] != "leader" or own["partition_epoch"] != best["partition_epoch"]:
                    raise AssertionError(f"partition {p}: broker {lead} does not lead it yet: "
                                         f"{own and (own['role'], own['partition_epoch'])}")
            return True
        await wait_for(cond, timeout_s=timeout_s, interval_s=0.1, what="every partition led with a full ISR")

    async def wait_out_of_isr(self, broker: int, timeout_s: float = 30.0) -> None:
        """Until `broker` is no partition's leader and in no ISR (fenced, shut down, or shrunk away)."""
        await self.wait_view(lambda vs: all(broker not in v["isr"] and v["leader"] != broker for v in vs.values()),
                             f"broker {broker} out of every ISR", timeout_s, exclude={broker})

    async def wait_leader_not(self, broker: int, p: int = 0, timeout_s: float = 30.0) -> None:
        await self.wait_view(lambda vs: vs[p]["leader"] not in (broker, -1),
                             f"partition {p} led by another broker than {broker}", timeout_s, exclude={broker})

    # -- targets --------------------------------------------------------------------------

    async def target(self, kind: str) -> int:
        """`leader`: the leader of partition 0; `follower`: a replica of partition 0 that is not
        its leader, preferring one that leads no partition; `controller`: node 0."""
        if kind == "controller":
            return CONTROLLER_ID
        vs = {p: await self.freshest(p) for p in range(self.partitions)}
        lead0 = vs[0]["leader"] if vs[0] else -1
        if kind == "leader":
            assert lead0 > 0, f"partition 0 has no leader: {vs[0]}"
            return lead0
        leaders = {v["leader"] for v in vs.values() if v}
        followers = [b for b in self.c.broker_ids if b != lead0]
        pure = [b for b in followers if b not in leaders]
        return (pure or followers)[0]

    # -- faults -------------------------------------------------------------------------------

    def stop(self, node: int) -> None:
        self.c.stop(node, timeout_s=15)
        self.down.add(node)

    def kill(self, node: int) -> None:
        self.c.kill(node)
        self.down.add(node)

    def start(self, node: int) -> None:
        if node == CONTROLLER_ID:
            self.c.restart_controller()
        else:
            self.c.start_broker(node)
        self.down.discard(node)

    def pause(self, node: int) -> None:
        self.c.pause(node)
        self.paused.add(node)

    def resume(self, node: int) -> None:
        self.c.resume(node)
        self.paused.discard(node)

    def isolate(self, node: int) -> None:
        self.c.isolate(node)
        self.cut.add(node)

    def heal(self, node: int | None = None) -> None:
        self.c.heal(node)
        if node is None:
            self.cut.clear()
        else:
            self.cut.discard(node)

    async def wait_running(self, brokers: list[int] | None = None) -> None:
        await self.c.wait_running(60, brokers)

    async def restore(self) -> None:
        """Resume, heal and start everything this rig stopped; wait until every broker runs."""
        for n in sorted(self.paused):
            self.resume(n)
        if self.cut:
            self.heal()
        for n in sorted(self.down):
            self.start(n)
        await self.wait_running()

    async def hold(self, seconds: float, *, progress: int = 0) -> None:
        """Keep a fault in place for `seconds` (the fault's length, e.g. past the session
        timeout, not a synchronisation), requiring `progress` acks meanwhile if given."""
        end = clock.monotonic() + seconds
        if progress:
            await self.progress(progress, timeout_s=seconds + 30)
        left = end - clock.monotonic()
        if left > 0:
            await asyncio.sleep(left)
