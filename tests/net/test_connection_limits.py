"""Connection limits of the request server (issue 10): the in-flight window,
the first-frame deadline, the idle timeout, large frames decoded off the loop,
and the frame decoder's chunked path."""
from __future__ import annotations

import asyncio
import random
import struct

import msgpack

from minibroker.net.server import Dispatcher, HandlerSpec, serve
from minibroker.testing.wait import until
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import decode_body, decode_body_chunked, encode_frame, encode_frame_chunked


def frame(msg: dict) -> bytes:
    body = msgpack.packb(msg, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


async def server(**limits):
    started: list[int] = []
    release = asyncio.Event()

    async def park(ctx, body):
        started.append(body["from_seq"])
        await release.wait()
        return {"next_seq": body["from_seq"]}

    async def metadata(ctx, body):
        return {"n": len(body["topics"] or [])}

    d = Dispatcher({ApiKey.EVENTS: HandlerSpec(park), ApiKey.METADATA: HandlerSpec(metadata)},
                   secret="s", role="broker", max_frame_bytes=64 << 20)
    for k, v in limits.items():
        setattr(d, k, v)
    srv = await serve(d, "127.0.0.1", 0, "PLAINTEXT")
    return srv, srv.sockets[0].getsockname()[1], started, release


async def read_frame(r: asyncio.StreamReader) -> dict:
    (n,) = struct.unpack(">I", await r.readexactly(4))
    return msgpack.unpackb(await r.readexactly(n), raw=False)


async def test_no_more_than_the_window_of_requests_is_read_until_one_is_answered():
    srv, port, started, release = await server(max_inflight=3)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"".join(frame({"api": int(ApiKey.EVENTS), "v": 0, "id": i, "client": "c", "from_seq": i,
                            "max_wait_ms": 0, "max_events": 1}) for i in range(10)))
    await until(lambda: len(started) >= 3, "the window's three requests to start", timeout_s=30, interval_s=0.01)
    await asyncio.sleep(0.1)             # an absence check: nothing beyond the window starts
    assert started == [0, 1, 2]
    release.set()
    got = [(await read_frame(r))["id"] for _ in range(10)]
    assert got == list(range(10)) and started == list(range(10))
    w.close()
    srv.close()


async def test_a_connection_without_a_complete_first_frame_is_closed_at_the_deadline():
    srv, port, _, _ = await server(first_frame_ms=200)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"\x00\x00\x00\x10abc")       # slowloris: a frame that never completes
    assert await asyncio.wait_for(r.read(), 5) == b""
    w.close()
    srv.close()


async def test_an_idle_connection_is_closed_after_connections_max_idle_ms():
    srv, port, _, _ = await server(idle_ms=300, first_frame_ms=0)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(frame({"api": int(ApiKey.METADATA), "v": 0, "id": 1, "client": "c", "topics": None}))
    assert (await read_frame(r))["id"] == 1
    assert await asyncio.wait_for(r.read(), 5) == b""
    w.close()
    srv.close()


async def test_a_large_frame_is_decoded_off_the_loop_and_answered():
    srv, port, _, _ = await server()
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(frame({"api": int(ApiKey.METADATA), "v": 0, "id": 7, "client": "c", "topics": ["t"] * 200_000}))
    resp = await asyncio.wait_for(read_frame(r), 30)
    assert resp == {"id": 7, "n": 200_000}
    w.write(frame({"api": int(ApiKey.METADATA), "v": 0, "id": 8, "client": "c", "topics": 5, "pad": bytes(100_000)}))
    assert (await read_frame(r))["error"] != 0   # a bad large-path body is still INVALID_REQUEST
    w.close()
    srv.close()


def test_chunked_decoding_and_encoding_match_the_plain_ones():
    rng = random.Random(3)
    for _ in range(12):
        msg = {"id": 1, "topics": [{"topic": f"t{i}", "partitions": [
            {"partition": j, "records": rng.randbytes(rng.randrange(0, 400))} for j in range(rng.randrange(0, 80))]}
            for i in range(rng.randrange(0, 80))], "blob": rng.randbytes(rng.randrange(0, 200_000))}
        f = encode_frame(msg)
        assert encode_frame_chunked(msg) == f
        assert decode_body_chunked(f[4:]) == decode_body(f[4:]) == msg
