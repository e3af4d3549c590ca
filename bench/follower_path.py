"""The follower's own work per awaited acks=all record, in one process, without sockets (issue 13).

    .venv/bin/python bench/follower_path.py                     # 20,000 records, 3 runs
    .venv/bin/python bench/follower_path.py --records 5000 --runs 5
    .venv/bin/python bench/follower_path.py --profile 30        # and cProfile's top 30 by own time
    .venv/bin/python bench/follower_path.py --wire              # through a real Connection, in memory
    PYTHONPATH=/path/to/other/tree .venv/bin/python bench/follower_path.py

One broker's ReplicaManager on a real LogManager in a temporary directory
hosts a follower replica (broker 1) of an RF=3 partition led by broker 2.
Its fetcher talks to an in-memory fake leader: the first Fetch opens a
KIP-227 session, and each Fetch at offset N is answered, on a later loop
turn as a socket's answer would be, with one new batch of one 100-byte
record of an idempotent producer (sequence N) stamped at base offset N with
the leader epoch (as the leader's log stores it) and the leader's HW (N: the leader's HW moves when both
followers have acknowledged N, i.e. after this answer). Each cycle is what
a follower does for one awaited record on a real cluster, minus the
sockets and the leader: take the answer, append the batch, move the HW,
send the next Fetch (its acknowledgement).

By default the fake connection answers the Fetch body as built (no
framing); `--wire` sends it through the broker's own peer connections
(`InterBrokerConnections`) holding a real `Connection` on an in-memory
transport instead (msgpack frames both ways, the answer decoded as from a
socket). The fake leader's own work (checking the session, stamping the
batch) is in the figure; it is small and the same for every tree.

`bench/cpu_per_record.py --awaited` measures a real cluster, where the
kernel, the other processes and the machine's neighbours move the figure by
10 % from run to run; this one measures the follower's Python path alone.
It prints the CPU per record (process time, min/median/max of the runs) and
the median wall time from an answer handed over to the follower to its next
Fetch leaving (the follower's hop of the awaited cycle, in process).
For instruction counts, run it under valgrind at two sizes and divide the
difference (startup cancels out):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python bench/follower_path.py \\
        --records 800 --runs 1 2>&1 | grep Collected          # and --records 200
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
import struct
import time
from typing import Any

from crc32c import crc32c

from minibroker.broker.eventlog import EventLog
from minibroker.clock import wall_ms
from minibroker.broker.fetch_session import next_epoch
from minibroker.broker.metadata_image import MetadataImage
from minibroker.broker.replica_manager import ReplicaManager
from minibroker.config import DEFAULTS, Config
from minibroker.errors import ErrorCode, KafkaError
from minibroker.metadata import BrokerRecord, Endpoint, PartitionRecord, TopicRecord
from minibroker.metrics.counts import EventCounts
from minibroker.protocol.api import ApiKey
from minibroker.records import CRC_POS, CRC_START, LOG_OVERHEAD, build_batch
from minibroker.storage import LogManager

TOPIC = "t"
LEADER, FOLLOWER = 2, 1
LEADER_EPOCH = 1
BROKER_EPOCHS = {1: 11, 2: 12, 3: 13}
SESSION_ID = 77
PRODUCER_ID = 1000
SEQ_POS = 53                         # the base sequence in a v2 batch header
_SEQ, _CRC, _FRAME = struct.Struct(">i"), struct.Struct(">I"), struct.Struct(">qii")


class _NoController:
    async def submit(self, *args: Any, **kwargs: Any) -> dict:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the ISR does not change in this bench")


class _FakeLeader:
    """Broker 2 as its follower sees it: a KIP-227 session and one new batch per Fetch.

    Timing starts at the Fetch at offset 1 (the session is open, the first record appended) and
    ends at the Fetch at offset `records + 1`, which acknowledges the last of `records` appends."""

    def __init__(self, records: int, profile: cProfile.Profile | None) -> None:
        self.records = records
        self.profile = profile
        self.epoch = 0                     # the session epoch the next incremental Fetch must carry
        self.offset = -1                   # the follower's position as the session holds it
        self.template = bytearray(build_batch([b"x" * 100], timestamp_ms=int(time.time() * 1000),
                                              producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=0))
        self.delivered = 0                  # perf_counter_ns when the last answer was handed over
        self.gaps_ns: list[int] = []        # from each answer handed over to the next Fetch sent (timed ones)
        self.start: os.times_result | None = None
        self.end: os.times_result | None = None
        self.done = asyncio.get_running_loop().create_future()

    def _batch(self, n: int) -> bytes:
        """The idempotent producer's record at offset `n` as the leader stores it: its sequence
        is n (so its CRC is its own), stamped at base offset n with the leader epoch."""
        b = self.template
        _SEQ.pack_into(b, SEQ_POS, n & 0x7FFFFFFF)
        _CRC.pack_into(b, CRC_POS, crc32c(memoryview(b)[CRC_START:]))
        _FRAME.pack_into(b, 0, n, len(b) - LOG_OVERHEAD, LEADER_EPOCH)
        return bytes(b)

    def deliver(self, to: Any, answer: Any) -> None:
        """An answer arrives (`to(answer)`): the clock of the answer -> next Fetch gap starts."""
        self.delivered = time.perf_counter_ns()
        to(answer)

    def answer(self, api: int, body: dict[str, Any]) -> dict[str, Any] | None:
        """The answer to one request, or None for a Fetch that parks (the last one)."""
        if self.start is not None and self.end is None:
            self.gaps_ns.append(time.perf_counter_ns() - self.delivered)
        if api != ApiKey.FETCH:
            raise RuntimeError(f"the follower sent api {api}: not expected in this bench")
        if body["replica_id"] != FOLLOWER or body["broker_epoch"] != BROKER_EPOCHS[FOLLOWER]:
            raise RuntimeError(f"unexpected replica fetch {body}")
        epoch = body["session_epoch"]
        named = [p for t in body["topics"] for p in t["partitions"] if t["topic"] == TOPIC]
        if epoch == 0:
            if len(named) != 1:
                raise RuntimeError(f"the full Fetch names {named}")
        elif body["session_id"] != SESSION_ID or epoch != self.epoch:
            raise RuntimeError(f"session {body['session_id']} epoch {epoch}, expected {SESSION_ID} {self.epoch}")
        self.epoch = next_epoch(epoch)
        for p in named:
            if p["current_leader_epoch"] != LEADER_EPOCH or p["partition"] != 0:
                raise RuntimeError(f"unexpected fetch entry {p}")
            self.offset = p["fetch_offset"]
        n = self.offset
        if n == 1 and self.start is None:
            self.start = os.times()
            if self.profile is not None:
                self.profile.enable()
        if n == self.records + 1:
            if self.profile is not None:
                self.profile.disable()
            self.end = os.times()
            self.done.set_result(None)
            return None
        if epoch != 0 and not named:
            raise RuntimeError(f"an incremental Fetch at offset {n} names nothing after an append")
        records = self._batch(n)
        return {"error": 0, "throttle_time_ms": 0, "session_id": SESSION_ID, "topics": [{
            "topic": TOPIC, "partitions": [{
                "partition": 0, "error": 0, "high_watermark": n, "last_stable_offset": n, "log_start_offset": 0,
                "diverging_epoch": None, "preferred_read_replica": -1, "current_leader": None, "records": records}]}]}


class _FakeConnection:
    """A connection to the fake leader: each answer arrives on a later loop turn, as a socket's would."""

    closed = False

    def __init__(self, leader: _FakeLeader) -> None:
        self.leader = leader

    async def request(self, api: int, body: dict[str, Any], *, timeout_ms: int = 30_000) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        resp = self.leader.answer(int(api), body)
        if resp is not None:
            loop.call_soon(self.leader.deliver, fut.set_result, resp)
        return await fut

    def send_request(self, api: int, body: dict[str, Any], on_done: Any, *, timeout_ms: int = 30_000) -> None:
        """The fetcher's way: the answer reaches `on_done(answer, None)` on a later loop turn."""
        resp = self.leader.answer(int(api), body)
        if resp is not None:
            asyncio.get_running_loop().call_soon(self.leader.deliver, lambda r: on_done(r, None), resp)


class _LeaderTransport:
    """An in-memory transport under a real Connection: the request frames it is written are decoded
    and answered by the fake leader, the answer fed back as frames on a later loop turn."""

    def __init__(self, leader: _FakeLeader, conn: Any) -> None:
        from minibroker.protocol.framing import FrameDecoder, encode_frame
        self.leader = leader
        self.conn = conn
        self.decoder = FrameDecoder()
        self.encode = encode_frame

    def write(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        for msg in self.decoder.feed(data):
            resp = self.leader.answer(msg["api"], msg)
            if resp is not None:
                loop.call_soon(self.leader.deliver, self.conn._on_data, self.encode({"id": msg["id"], **resp}))

    def close(self) -> None:
        pass


def _wire_peers(leader: _FakeLeader, image: MetadataImage) -> Any:
    """The broker's own peer connections, holding a real Connection to the leader's advertised
    endpoint on an in-memory transport."""
    from minibroker.broker.peers import InterBrokerConnections
    from minibroker.net.connection import Connection
    conn = Connection("127.0.0.1", 1, "broker-1-replica", 100 << 20)
    conn._transport = _LeaderTransport(leader, conn)          # type: ignore[assignment]
    conn._loop = asyncio.get_running_loop()
    peers = InterBrokerConnections(node_id=FOLLOWER, image=image, listener="PLAINTEXT", secret="",
                                   max_frame_bytes=100 << 20)
    peers._conns[LEADER] = conn
    return peers


class _Peers:
    """The follower's connections to its peers: the one to the fake leader, always open."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def get(self, broker_id: int) -> Any:
        conn = self.current(broker_id)
        if conn is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker {broker_id} in this bench")
        return conn

    def current(self, broker_id: int) -> Any:
        return self.conn if broker_id == LEADER else None

    def drop(self, broker_id: int) -> None:
        raise RuntimeError("the follower dropped its connection to the leader")


async def _run(records: int, wire: bool, profile: cProfile.Profile | None) -> tuple[float, float, float]:
    """User and system CPU seconds per record of `records` awaited cycles, and the median wall time
    from an answer handed over to the next Fetch sent, in seconds."""
    with tempfile.TemporaryDirectory(prefix="minibroker-follower-path-") as tmp:
        config = Config({**DEFAULTS, "node.id": str(FOLLOWER)})
        image = MetadataImage(config)
        events = EventLog(FOLLOWER)                # as the broker's: the ring, its counts, the log line
        events.bind(asyncio.get_running_loop())
        events.ring.subscribe(EventCounts().observe)
        lm = await asyncio.to_thread(LogManager, tmp, event_sink=events)
        leader = _FakeLeader(records, profile)
        peers = _wire_peers(leader, image) if wire else _Peers(_FakeConnection(leader))
        rm = ReplicaManager(node_id=FOLLOWER, config=config, log_manager=lm, image=image,
                            alter_partition=_NoController(), peers=peers, events=events,
                            broker_epoch=lambda: BROKER_EPOCHS[FOLLOWER], clock=wall_ms)
        batch = [BrokerRecord(b, BROKER_EPOCHS[b], None, (Endpoint("PLAINTEXT", "127.0.0.1", 1),), fenced=False)
                 for b in (1, 2, 3)]
        batch += [TopicRecord(TOPIC, "id", 1, {}),
                  PartitionRecord(TOPIC, 0, (2, 1, 3), (2, 1, 3), LEADER, LEADER_EPOCH, 0)]
        await rm.start()
        try:
            delta = image.apply(list(enumerate(batch)), None, len(batch))
            rm.on_metadata(delta.partitions, delta.brokers, int(time.monotonic() * 1000))   # starts the fetcher
            await asyncio.wait_for(leader.done, 120)
            part = rm._partitions[(TOPIC, 0)]
            if part.leo != records + 1 or part.hw != records or part.producers.entry(PRODUCER_ID) is None:
                raise RuntimeError(f"the follower ends at LEO {part.leo}, HW {part.hw}, "
                                   f"producer {part.producers.entry(PRODUCER_ID)}")
            assert leader.start is not None and leader.end is not None
            start, end = leader.start, leader.end
            return ((end.user - start.user) / records, (end.system - start.system) / records,
                    statistics.median(leader.gaps_ns) / 1e9)
        finally:
            await rm.shutdown()
            await asyncio.to_thread(lm.shutdown)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wire", action="store_true",
                    help="send the Fetches through the broker's peer connections and a real Connection on an "
                         "in-memory transport (msgpack frames both ways), not straight to the fake leader")
    ap.add_argument("--profile", type=int, default=0, metavar="TOP",
                    help="also run once under cProfile and print the top TOP entries by own time")
    args = ap.parse_args()
    try:
        import uvloop
        run = uvloop.run
    except ImportError:
        run = asyncio.run
    runs = [run(_run(args.records, args.wire, None)) for _ in range(args.runs)]
    user = [u * 1e6 for u, _, _ in runs]
    system = [s * 1e6 for _, s, _ in runs]
    gap = [g * 1e6 for _, _, g in runs]
    print(f"follower path{' through a Connection' if args.wire else ''}, {args.records:,} awaited records "
          f"of 100 B, RF=3, in process: "
          f"user {statistics.median(user):.1f} us/record (min {min(user):.1f}, max {max(user):.1f}), "
          f"system {statistics.median(system):.1f} (min {min(system):.1f}, max {max(system):.1f}); "
          f"answer -> next Fetch p50 {statistics.median(gap):.1f} us (min {min(gap):.1f}, max {max(gap):.1f}); "
          f"{args.runs} runs")
    if args.profile:
        prof = cProfile.Profile()
        run(_run(args.records, args.wire, prof))
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.profile)
        print(out.getvalue())


if __name__ == "__main__":
    main()
