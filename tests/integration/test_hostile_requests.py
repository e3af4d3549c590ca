"""Issue 10 on a real cluster: no single request or connection stalls a broker,
fills its memory or leaks its sockets, while a probe client on another
connection keeps getting ApiVersions and produce answers within 0.5 s and no
broker is fenced. On a loaded machine the bound grows with the probe's own
round trips measured just before (five times the slowest of them): what is
checked is that the probe never waits for the hostile request, whose stalls
before issue 10 were 1.8 to 18 s."""
from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import pytest

from minibroker.client import Admin, Producer
from minibroker.errors import ErrorCode, KafkaError
from minibroker.limits import max_message_bytes_limit
from minibroker.net.connection import Connection
from minibroker.protocol.api import ApiKey
from minibroker.records import build_batch
from minibroker.testing.fixtures import start_cluster
from minibroker.testing.wait import until

pytestmark = pytest.mark.cluster
FRAME_LIMIT = 48 << 20
PROBE_DEADLINE_S = 0.5


@pytest.fixture(scope="module")
def hc(tmp_path_factory: pytest.TempPathFactory):
    c = start_cluster(tmp_path_factory.mktemp("hostile") / "cluster",
                      overrides={"socket.request.max.bytes": str(FRAME_LIMIT)})

    async def setup() -> None:
        async with Admin(c.bootstrap) as admin:
            await admin.create_topic("probe", assignments=[[2, 3, 1]])
            await admin.create_topic("target", assignments=[[1, 2, 3]])
            await admin.wait_for_leaders("probe")
            await admin.wait_for_leaders("target")
    asyncio.run(setup())
    yield c
    c.destroy()


def frame(msg: dict[str, Any]) -> bytes:
    body = msgpack.packb(msg, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def broker_pid(c: Any, broker: int) -> int:
    pid = c.pids[c.layout.broker(broker).name]
    assert pid is not None
    return pid


async def fenced_events(c: Any, from_seq: int) -> tuple[list[dict], int]:
    async with Admin(c.bootstrap) as admin:
        resp = await admin.events(c.controller_address, from_seq=from_seq, max_events=10_000)
    return [e for e in resp["events"] if e["kind"] == "fenced"], resp["next_seq"]


async def with_probe(c: Any, hostile: Callable[[], Awaitable[Any]]) -> Any:
    """Run `hostile` against broker 1 while a probe on other connections asks
    broker 1 for ApiVersions and produces acks=all to a partition it follows.
    Asserts every probe answer came within PROBE_DEADLINE_S (or five times the slowest
    probe round before the hostile request, on a loaded machine) and no broker was fenced."""
    _, seq = await fenced_events(c, 0)
    host, port = c.layout.broker(1).host, c.layout.broker(1).port
    conn = await Connection.open(host, port, client_id="probe")
    latencies: list[float] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    async with Producer(c.bootstrap, {"acks": "all", "linger.ms": 0}) as producer:
        await producer.send_and_wait("probe", b"warm-up")

        async def probe() -> None:
            while not stop.is_set():
                t0 = loop.time()
                await asyncio.wait_for(conn.request(ApiKey.API_VERSIONS, {}), 10)
                await asyncio.wait_for(producer.send_and_wait("probe", b"p"), 10)
                latencies.append(loop.time() - t0)

        task = asyncio.ensure_future(probe())
        await until(lambda: len(latencies) >= 20, "the probe running", timeout_s=60, interval_s=0.01)
        baseline = max(latencies)
        try:
            result = await hostile()
            n = len(latencies)
            await until(lambda: len(latencies) >= n + 3, "probe answers after the hostile request", timeout_s=30,
                        interval_s=0.01)
        finally:
            stop.set()
            await task
            conn.close()
    bound = max(PROBE_DEADLINE_S, 5 * baseline)
    assert max(latencies) < bound, f"probe waited {max(latencies):.3f} s (bound {bound:.3f} s)"
    fenced, _ = await fenced_events(c, seq)
    assert fenced == [], f"brokers fenced: {fenced}"
    return result


async def raw(c: Any, broker: int = 1) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    spec = c.layout.broker(broker)
    return await asyncio.open_connection(spec.host, spec.port, limit=FRAME_LIMIT)


async def read_frame(r: asyncio.StreamReader) -> dict[str, Any]:
    return msgpack.unpackb(await read_raw(r), raw=False)


async def read_raw(r: asyncio.StreamReader) -> bytes:
    """One frame's body, undecoded: the tests build and decode big frames outside
    the probe, since encoding or decoding them would stall this process's loop."""
    (n,) = struct.unpack(">I", await asyncio.wait_for(r.readexactly(4), 120))
    return await asyncio.wait_for(r.readexactly(n), 120)


def fetch_entry(partition: int = 0) -> dict[str, Any]:
    return {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}


async def test_pipelined_events_long_polls_then_close_do_not_stall_the_broker(hc):
    polls = b"".join(frame({"api": int(ApiKey.EVENTS), "v": 0, "id": i, "client": "evil", "from_seq": 1 << 40,
                            "max_wait_ms": 60_000, "max_events": 1}) for i in range(40_000))

    async def hostile() -> None:
        r, w = await raw(hc)
        w.write(polls)
        await asyncio.sleep(0.5)     # the behaviour under test: polls parked on the broker, then a close
        w.transport.abort()
    await with_probe(hc, hostile)


async def test_a_fetch_naming_one_partition_400000_times_is_answered_once_without_stalling(hc):
    request = frame({"api": int(ApiKey.FETCH), "v": 0, "id": 1, "client": "evil", "max_wait_ms": 0,
                     "topics": [{"topic": "target", "partitions": [fetch_entry()] * 400_000}]})

    async def hostile() -> bytes:
        r, w = await raw(hc)
        w.write(request)
        body = await read_raw(r)
        w.close()
        return body
    resp = msgpack.unpackb(await with_probe(hc, hostile), raw=False)
    assert [len(t["partitions"]) for t in resp["topics"]] == [1]
    assert resp["topics"][0]["partitions"][0]["error"] == 0


async def test_a_produce_with_a_huge_entry_list_does_not_stall_the_broker(hc):
    batch = build_batch([b"x"])

    topics = [{"topic": "target", "partitions": [{"partition": 0, "records": batch}] * 20_000}]
    topics += [{"topic": f"nope-{i}", "partitions": [{"partition": 0, "records": batch}]} for i in range(20_000)]
    request = frame({"api": int(ApiKey.PRODUCE), "v": 0, "id": 1, "client": "evil", "acks": 1, "topics": topics})

    async def hostile() -> bytes:
        r, w = await raw(hc)
        w.write(request)
        body = await read_raw(r)
        w.close()
        return body
    resp = msgpack.unpackb(await with_probe(hc, hostile), raw=False)
    codes = [p["error"] for t in resp["topics"] for p in t["partitions"]]
    assert codes.count(0) == 20_000 and codes.count(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)) == 20_000


async def test_a_metadata_request_naming_300000_topics_does_not_stall_the_broker(hc):
    request = frame({"api": int(ApiKey.METADATA), "v": 0, "id": 1, "client": "evil",
                     "topics": [f"nope-{i}" for i in range(300_000)] + ["target"] * 1000})

    async def hostile() -> bytes:
        r, w = await raw(hc)
        w.write(request)
        body = await read_raw(r)
        w.close()
        return body
    body = await with_probe(hc, hostile)
    assert body.count(b"nope-") == 300_000 and body.count(b"target") == 1


async def test_a_client_that_never_reads_its_responses_keeps_broker_memory_bounded(hc):
    async with Producer(hc.bootstrap, {"acks": "all"}) as p:
        for _ in range(16):
            await p.send_and_wait("target", os.urandom(60_000), partition=0)
    pid = broker_pid(hc, 1)
    before = rss_bytes(pid)
    fetches = b"".join(frame({"api": int(ApiKey.FETCH), "v": 0, "id": i, "client": "evil", "max_wait_ms": 0,
                              "topics": [{"topic": "target", "partitions": [fetch_entry()]}]}) for i in range(400))
    writers = []
    for _ in range(3):
        _, w = await raw(hc)
        w.write(fetches)
        writers.append(w)
    peak = before
    # An absence check: the broker must not grow while nobody reads (before the
    # fix it kept every response: about 1 GB here within a few seconds).
    for _ in range(50):
        await asyncio.sleep(0.1)            # the absence check's sampling window (behaviour under test)
        peak = max(peak, rss_bytes(pid))
    for w in writers:
        w.transport.abort()
    assert peak - before < 64 << 20, f"RSS grew by {(peak - before) >> 20} MiB"


async def test_the_tail_cache_releases_big_batches(hc):
    size = 36 << 20        # above glibc's largest mmap threshold, so freed memory leaves the process
    async with Admin(hc.bootstrap) as admin:
        await admin.create_topic("big", assignments=[[1, 2, 3]] * 3, configs={"max.message.bytes": str(40 << 20)})
        await admin.wait_for_leaders("big")
    pids = [broker_pid(hc, b) for b in (1, 2, 3)]
    before = [rss_bytes(p) for p in pids]
    conn = await Connection.open(hc.layout.broker(1).host, hc.layout.broker(1).port, max_frame_bytes=FRAME_LIMIT)
    try:
        for part in range(3):
            resp = await conn.request(ApiKey.PRODUCE, {"acks": -1, "topics": [{"topic": "big", "partitions": [
                {"partition": part, "records": build_batch([os.urandom(size)])}]}]}, timeout_ms=60_000)
            assert resp["topics"][0]["partitions"][0]["error"] == 0
    finally:
        conn.close()
    # Before the fix every broker kept each partition's newest batch: +108 MiB, for good. A follower may
    # still hold the last batch's Fetch answer for a moment after the produce is answered (it sends its
    # next Fetch, which moves the HW, before it lets go of the answer), longer on a loaded machine.
    def grown() -> list[int]:
        return [(rss_bytes(p) - b) >> 20 for p, b in zip(pids, before, strict=True)]
    await until(lambda: max(grown()) < 60, "every broker's RSS growth under 60 MiB", timeout_s=30)


async def test_an_accepted_near_limit_batch_reaches_every_follower(hc):
    limit = max_message_bytes_limit(FRAME_LIMIT)
    async with Admin(hc.bootstrap) as admin:
        with pytest.raises(KafkaError) as exc:
            await admin.create_topic("too-big", assignments=[[1, 2, 3]],
                                     configs={"max.message.bytes": str(FRAME_LIMIT)})
        assert exc.value.code == ErrorCode.INVALID_CONFIG and "socket.request.max.bytes" in exc.value.message
        await admin.create_topic("near", assignments=[[1, 2, 3], [1, 2, 3]],
                                 configs={"max.message.bytes": str(limit)})
        await admin.wait_for_leaders("near")

        async def broker_1_leads() -> bool:      # metadata can name the leader before it has taken over
            status = await admin.replica_status(hc.broker_address(1), ["near"])
            return any(p["partition"] == 0 and p["role"] == "leader" for p in status["partitions"])
        await until(broker_1_leads, "broker 1 leading near-0", timeout_s=30)
    batch = build_batch([os.urandom(limit - 200)])
    assert len(batch) <= limit
    conn = await Connection.open(hc.layout.broker(1).host, hc.layout.broker(1).port, max_frame_bytes=FRAME_LIMIT)
    try:
        resp = await conn.request(ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 30_000, "topics": [{"topic": "near",
                                  "partitions": [{"partition": 0, "records": batch}]}]}, timeout_ms=60_000)
        assert resp["topics"][0]["partitions"][0]["error"] == 0
    finally:
        conn.close()
    async with Producer(hc.bootstrap, {"acks": "all"}) as p:     # the other partition keeps replicating
        await p.send_and_wait("near", b"small", partition=1)

    async def every_follower_has_it() -> bool:
        async with Admin(hc.bootstrap) as admin:
            for b in (2, 3):
                status = await admin.replica_status(hc.broker_address(b), ["near"])
                leos = {p["partition"]: p["leo"] for p in status["partitions"]}
                if leos.get(0, 0) < 1 or leos.get(1, 0) < 1:
                    return False
        return True
    await until(every_follower_has_it, "the near-limit batch on every follower", timeout_s=60)


async def test_7000_partitions_in_one_request_are_refused_naming_the_limit(hc):
    async with Admin(hc.bootstrap) as admin:
        with pytest.raises(KafkaError) as exc:
            await admin.create_topic("many", num_partitions=7000, replication_factor=3)
        assert exc.value.code == ErrorCode.POLICY_VIOLATION
        assert "minibroker.max.partitions.per.broker" in exc.value.message
        with pytest.raises(KafkaError) as exc:
            await admin.create_topic("huge", num_partitions=4_000_000, replication_factor=1)
        assert exc.value.code == ErrorCode.POLICY_VIOLATION
        assert "minibroker.max.partitions.per.request" in exc.value.message
        assert "many" not in await admin.list_topics()


async def test_sasl_timeouts_leave_no_socket_open(hc):
    hc.pause(3)
    try:
        def fds() -> int:
            return len(os.listdir("/proc/self/fd"))
        before = fds()
        spec = hc.layout.broker(3)
        for _ in range(20):
            with pytest.raises(KafkaError) as exc:
                await Connection.open(spec.host, spec.port, secret="whatever", timeout_s=0.2)
            assert exc.value.code == ErrorCode.REQUEST_TIMED_OUT
        await until(lambda: fds() <= before, "every socket closed", timeout_s=10)
    finally:
        hc.resume(3)


async def test_a_failed_authentication_closes_the_connection(hc):
    r, w = await raw(hc)
    w.write(frame({"api": int(ApiKey.SASL_AUTHENTICATE), "v": 0, "id": 1, "client": "evil",
                   "auth_bytes": b"n,,n=evil,r=nonce"}) * 5)
    first = await asyncio.wait_for(read_frame(r), 10)
    assert first["error"] != 0
    assert await asyncio.wait_for(r.read(), 10) == b""      # closed; the other four were never read
    w.close()
