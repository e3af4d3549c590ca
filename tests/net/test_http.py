"""The small HTTP server: one bounded request head per connection, GET routes, streams."""
import asyncio

from minibroker.net.http import MAX_HEAD_BYTES, HttpServer, Response


async def request(addr, raw: bytes) -> bytes:
    r, w = await asyncio.open_connection(*addr)
    w.write(raw)
    await w.drain()
    data = await asyncio.wait_for(r.read(), 5)
    w.close()
    return data


async def test_routes_answer_get_and_unknown_paths_are_404():
    async def hello():
        return Response(200, b"hi")
    s = HttpServer({"/hello": hello})
    addr = await s.start("127.0.0.1", 0)
    try:
        ok = await request(addr, b"GET /hello?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK") and ok.endswith(b"\r\n\r\nhi")
        assert (await request(addr, b"GET /nope HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
        assert (await request(addr, b"POST /hello HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
        assert (await request(addr, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
    finally:
        await s.close()


async def test_an_oversized_request_head_is_refused_without_reading_it_all():
    s = HttpServer({})
    addr = await s.start("127.0.0.1", 0)
    try:
        resp = await request(addr, b"GET / HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES * 4) + b"\r\n\r\n")
        assert resp.startswith(b"HTTP/1.1 431")
    finally:
        await s.close()


async def test_a_stream_route_sends_chunks_until_it_ends():
    async def events():
        async def gen():
            for i in range(3):
                yield b"data: %d\n\n" % i
        return gen()
    s = HttpServer({"/events": events})
    addr = await s.start("127.0.0.1", 0)
    try:
        resp = await request(addr, b"GET /events HTTP/1.1\r\n\r\n")
        assert b"text/event-stream" in resp and resp.endswith(b"data: 0\n\ndata: 1\n\ndata: 2\n\n")
    finally:
        await s.close()
