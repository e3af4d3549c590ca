"""The leader's own work per awaited acks=all record, in one process, without sockets (issue 13).

    .venv/bin/python bench/leader_path.py                     # 20,000 records, 3 runs
    .venv/bin/python bench/leader_path.py --records 5000 --runs 5
    .venv/bin/python bench/leader_path.py --profile 30        # and cProfile's top 30 by own time
    PYTHONPATH=/path/to/other/tree .venv/bin/python bench/leader_path.py

One broker's ReplicaManager on a real LogManager in a temporary directory leads
an RF=3 partition (ISR 1,2,3). Each cycle is what the leader does for one
awaited record on a real cluster, minus the sockets and the request server:
the producer's acks=all Produce (validated as the server validates it) appends
and parks; the two followers' parked session Fetches wake with the record; each
follower's next incremental Fetch names its new offset, which moves the HW and
completes the produce, and parks again.

`bench/cpu_per_record.py --awaited` measures a real cluster, where the
kernel, the other processes and the machine's neighbours move the figure by
10 % from run to run; this one measures the broker's Python path alone, so a
change of a few percent in it shows. It prints the CPU per record (process
time, min/median/max of the runs).
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import statistics
import tempfile
import time
import types
from typing import Any

from minibroker.broker.eventlog import EventLog
from minibroker.clock import wall_ms
from minibroker.broker.fetch_session import next_epoch
from minibroker.broker.metadata_image import MetadataImage
from minibroker.broker.replica_manager import ReplicaManager
from minibroker.config import DEFAULTS, Config
from minibroker.errors import ErrorCode, KafkaError
from minibroker.metrics.counts import EventCounts
from minibroker.metadata import BrokerRecord, Endpoint, PartitionRecord, TopicRecord
from minibroker.net.server import Dispatcher, HandlerSpec, ServerConnection
from minibroker.protocol.api import REQUESTS, ApiKey
from minibroker.protocol.framing import FrameDecoder, encode_frame
from minibroker.protocol.schema import validate
from minibroker.records import build_batch
from minibroker.storage import LogManager

TOPIC = "t"
BROKER_EPOCHS = {1: 11, 2: 12, 3: 13}


class _NoController:
    async def submit(self, *args: Any, **kwargs: Any) -> dict:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the ISR does not change in this bench")


class _NoPeers:
    async def get(self, broker_id: int) -> Any:
        raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "no peers in this bench")

    def drop(self, broker_id: int) -> None:
        pass


class _Transport:
    """An in-memory transport for a ServerConnection: what it writes is decoded into responses."""

    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self._responses: list[dict] = []
        self._waiter: asyncio.Future[None] | None = None

    def write(self, data: bytes) -> None:
        self._responses.extend(self._decoder.feed(data))
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def writelines(self, parts: Any) -> None:
        self.write(b"".join(parts))

    async def response(self) -> dict:
        while not self._responses:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._responses.pop(0)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


class _Authenticated:
    """A SASL session that has authenticated (the followers' inter-broker connections)."""
    authenticated = True
    failed = False


class _Client:
    """Sends requests to the leader: straight to the ReplicaManager's handlers (`server` False) or as
    frames through a request-server connection of its own on an in-memory transport."""

    def __init__(self, rm: ReplicaManager, dispatcher: Dispatcher | None, authenticated: bool) -> None:
        self.rm = rm
        self.ids = 0
        self.conn: ServerConnection | None = None
        self.transport = _Transport()
        if dispatcher is not None:
            self.conn = ServerConnection(dispatcher, "PLAINTEXT")
            if authenticated:
                self.conn.sasl = _Authenticated()           # type: ignore[assignment]
            self.conn.connection_made(self.transport)      # type: ignore[arg-type]
            self.ctx: Any = None
        else:
            conn = types.SimpleNamespace(abort=lambda reason: None, produce_appending=None)
            self.ctx = types.SimpleNamespace(authenticated=authenticated, conn=conn)

    async def request(self, api: ApiKey, body: dict[str, Any]) -> dict:
        if self.conn is None:
            handler = self.rm.handle_produce if api is ApiKey.PRODUCE else self.rm.handle_fetch
            resp = await handler(self.ctx, validate(body, REQUESTS[api]))
            assert resp is not None
            return resp
        self.ids += 1
        self.conn.data_received(encode_frame({"api": int(api), "v": 0, "id": self.ids, "client": "bench", **body}))
        return await self.transport.response()


class _Follower:
    """One follower's Fetch session as the fetcher drives it: a full Fetch opens it, then each
    incremental Fetch names the partition at its new offset."""

    def __init__(self, client: _Client, replica_id: int) -> None:
        self.client = client
        self.replica_id = replica_id
        self.session_id = 0
        self.epoch = 0
        self.offset = 0

    async def fetch(self) -> dict:
        resp = await self.client.request(ApiKey.FETCH, {
            "replica_id": self.replica_id, "broker_epoch": BROKER_EPOCHS[self.replica_id], "max_wait_ms": 500,
            "min_bytes": 1, "max_bytes": 10 << 20, "session_id": self.session_id, "session_epoch": self.epoch,
            "topics": [{"topic": TOPIC, "partitions": [{
                "partition": 0, "fetch_offset": self.offset, "current_leader_epoch": 0, "last_fetched_epoch": 0,
                "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        if resp.get("error"):
            raise RuntimeError(f"follower {self.replica_id} fetch failed: {resp}")
        if self.session_id == 0:
            self.session_id = resp["session_id"]
        self.epoch = next_epoch(self.epoch)
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error"]:
                    raise RuntimeError(f"follower {self.replica_id} fetch failed: {p}")
                if p["records"]:
                    self.offset += 1              # one record per batch in this bench
        return resp


async def _run(records: int, server: bool, profile: cProfile.Profile | None) -> tuple[float, float]:
    """User and system CPU seconds per record of `records` awaited cycles."""
    with tempfile.TemporaryDirectory(prefix="minibroker-leader-path-") as tmp:
        config = Config({**DEFAULTS, "node.id": "1"})
        image = MetadataImage(config)
        events = EventLog(1)                       # as the broker's: the ring, its counts, the log line
        events.bind(asyncio.get_running_loop())
        events.ring.subscribe(EventCounts().observe)
        lm = await asyncio.to_thread(LogManager, tmp, event_sink=events)
        rm = ReplicaManager(node_id=1, config=config, log_manager=lm, image=image, alter_partition=_NoController(),
                            peers=_NoPeers(), events=events, broker_epoch=lambda: BROKER_EPOCHS[1],
                            clock=wall_ms)        # as the broker's (record timestamps)
        batch = [BrokerRecord(b, BROKER_EPOCHS[b], None, (Endpoint("PLAINTEXT", "127.0.0.1", 1),), fenced=False)
                 for b in (1, 2, 3)]
        batch += [TopicRecord(TOPIC, "id", 1, {}), PartitionRecord(TOPIC, 0, (1, 2, 3), (1, 2, 3), 1, 0, 0)]
        delta = image.apply(list(enumerate(batch)), None, len(batch))
        rm.on_metadata(delta.partitions, delta.brokers, int(time.monotonic() * 1000))
        await rm.start()
        dispatcher = Dispatcher({ApiKey.PRODUCE: HandlerSpec(rm.handle_produce),
                                 ApiKey.FETCH: HandlerSpec(rm.handle_fetch)}, "", "broker") if server else None
        try:
            producer = _Client(rm, dispatcher, authenticated=False)
            produce = {"acks": -1, "timeout_ms": 30_000, "topics": [{"topic": TOPIC, "partitions": [
                {"partition": 0, "records": build_batch([b"x" * 100])}]}]}
            followers = [_Follower(_Client(rm, dispatcher, authenticated=True), r) for r in (2, 3)]
            for f in followers:
                await f.fetch()                    # opens the session (full, nothing to read)
            loop = asyncio.get_running_loop()
            parked = [loop.create_task(f.fetch()) for f in followers]
            await asyncio.sleep(0)
            start = os.times()
            if profile is not None:
                profile.enable()
            for _ in range(records):
                produced = loop.create_task(producer.request(ApiKey.PRODUCE, produce))
                for t in parked:
                    await t                        # woken by the append, with the record
                parked = [loop.create_task(f.fetch()) for f in followers]
                resp = await produced              # completed by the second follower's Fetch
                if resp.get("error") or resp["topics"][0]["partitions"][0]["error"]:
                    raise RuntimeError(f"produce failed: {resp}")
            if profile is not None:
                profile.disable()
            end = os.times()
            for t in parked:
                t.cancel()
            return (end.user - start.user) / records, (end.system - start.system) / records
        finally:
            await rm.shutdown()
            await asyncio.to_thread(lm.shutdown)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--server", action="store_true",
                    help="send the requests as frames through the request server (framing, validation, tasks, "
                         "in-order responses) on in-memory transports, not straight to the handlers")
    ap.add_argument("--profile", type=int, default=0, metavar="TOP",
                    help="also run once under cProfile and print the top TOP entries by own time")
    args = ap.parse_args()
    try:
        import uvloop
        run = uvloop.run
    except ImportError:
        run = asyncio.run
    runs = [run(_run(args.records, args.server, None)) for _ in range(args.runs)]
    user = [u * 1e6 for u, _ in runs]
    system = [s * 1e6 for _, s in runs]
    print(f"leader path{' through the request server' if args.server else ''}, {args.records:,} awaited records "
          f"of 100 B, RF=3, in process: "
          f"user {statistics.median(user):.1f} us/record (min {min(user):.1f}, max {max(user):.1f}), "
          f"system {statistics.median(system):.1f} (min {min(system):.1f}, max {max(system):.1f}), {args.runs} runs")
    if args.profile:
        prof = cProfile.Profile()
        run(_run(args.records, args.server, prof))
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.profile)
        print(out.getvalue())


if __name__ == "__main__":
    main()
