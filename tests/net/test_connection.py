"""The client Connection against a scripted server: answers matched by correlation id,
per-request timeouts from one shared timer, every pending request failed when the
connection goes, for awaited requests (`request`) and callback ones (`send_request`)."""
import asyncio

import msgpack
import pytest

from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import Connection
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import FrameDecoder, encode_frame


class ScriptedServer:
    """Answers a request whose body has "answer": true at once (echoing "n"), holds the
    others until `release(n)`; can drop the connection."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.held: dict[int, dict] = {}
        self.seen = asyncio.Queue()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        dec = FrameDecoder()
        while data := await reader.read(65536):
            for msg in dec.feed(data):
                await self.seen.put(msg)
                if msg.get("answer"):
                    writer.write(encode_frame({"id": msg["id"], "n": msg["n"]}))
                else:
                    self.held[msg["n"]] = msg

    def release(self, n: int) -> None:
        msg = self.held.pop(n)
        self.writers[0].write(encode_frame({"id": msg["id"], "n": n}))

    def drop(self) -> None:
        for w in self.writers:
            w.transport.abort()

    def close(self) -> None:
        self.server.close()


@pytest.fixture
async def server():
    s = ScriptedServer()
    s.port = await s.start()
    yield s
    s.close()


def collector():
    got: list = []
    return got, lambda resp, err: got.append((resp, err))


async def until(cond, what: str) -> None:
    try:
        async with asyncio.timeout(10):
            while not cond():
                await asyncio.sleep(0)
    except TimeoutError:
        raise AssertionError(f"not within 10 s: {what}") from None


async def test_answers_reach_the_request_they_belong_to_whatever_their_order(server):
    c = await Connection.open("127.0.0.1", server.port)
    got, cb = collector()
    c.send_request(ApiKey.METADATA, {"n": 1}, cb)
    waiting = asyncio.ensure_future(c.request(ApiKey.METADATA, {"n": 2}))
    c.send_request(ApiKey.METADATA, {"n": 3}, cb)
    await until(lambda: len(server.held) == 3, "three requests held")
    server.release(3)
    server.release(2)
    server.release(1)
    assert (await waiting)["n"] == 2
    await until(lambda: len(got) == 2, "both callbacks")
    assert [(r["n"], e) for r, e in got] == [(3, None), (1, None)]
    assert not c._pending
    c.close()


async def test_each_request_times_out_at_its_own_deadline_and_a_late_answer_is_dropped(server):
    c = await Connection.open("127.0.0.1", server.port)
    got, cb = collector()
    c.send_request(ApiKey.METADATA, {"n": 1}, cb, timeout_ms=60_000)
    with pytest.raises(KafkaError) as err:        # a shorter timeout after a longer one still fires first
        await c.request(ApiKey.METADATA, {"n": 2}, timeout_ms=50)
    assert err.value.code == ErrorCode.REQUEST_TIMED_OUT and "50 ms" in str(err.value)
    c.send_request(ApiKey.METADATA, {"n": 3}, cb, timeout_ms=50)
    await until(lambda: got, "the callback request's timeout")
    assert got[0][0] is None and got[0][1].code == ErrorCode.REQUEST_TIMED_OUT
    await until(lambda: len(server.held) == 3, "all held")
    server.release(3)                                   # answered after its timeout: dropped
    server.release(1)
    await until(lambda: len(got) == 2, "the long request's answer")
    assert got[1][0]["n"] == 1 and got[1][1] is None
    assert (await c.request(ApiKey.METADATA, {"n": 4, "answer": True}))["n"] == 4
    assert len(got) == 2 and not c._pending
    c.close()


async def test_a_lost_connection_fails_every_pending_request_retriably(server):
    c = await Connection.open("127.0.0.1", server.port)
    got, cb = collector()
    c.send_request(ApiKey.METADATA, {"n": 1}, cb)
    waiting = asyncio.ensure_future(c.request(ApiKey.METADATA, {"n": 2}))
    c.send_request(ApiKey.METADATA, {"n": 3}, cb)
    await until(lambda: len(server.held) == 3, "three requests held")
    server.drop()
    with pytest.raises(KafkaError) as err:
        await waiting
    assert err.value.code == ErrorCode.NETWORK_EXCEPTION and err.value.retriable
    await until(lambda: len(got) == 2, "both callbacks failed")
    assert all(r is None and e.code == ErrorCode.NETWORK_EXCEPTION for r, e in got)
    assert c.closed and "connection lost" in c.close_reason
    with pytest.raises(KafkaError) as err:
        c.send_request(ApiKey.METADATA, {"n": 4}, cb)
    assert err.value.code == ErrorCode.NETWORK_EXCEPTION


async def test_a_failure_reaches_a_callback_in_a_later_loop_turn_not_inside_close(server):
    c = await Connection.open("127.0.0.1", server.port)
    got, cb = collector()
    c.send_request(ApiKey.METADATA, {"n": 1}, cb)
    c.close()
    assert got == []
    await until(lambda: got, "the callback")
    assert got[0][1].code == ErrorCode.NETWORK_EXCEPTION and "closed by client" in str(got[0][1])


async def test_a_callback_that_raises_is_reported_and_the_connection_keeps_reading(server):
    loop = asyncio.get_running_loop()
    reported: list = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
    c = await Connection.open("127.0.0.1", server.port)

    def broken(resp, err):
        raise RuntimeError("caller bug")
    c.send_request(ApiKey.METADATA, {"n": 1, "answer": True}, broken)
    assert (await c.request(ApiKey.METADATA, {"n": 2, "answer": True}))["n"] == 2
    assert [type(r["exception"]) for r in reported] == [RuntimeError]
    assert not c.closed
    c.close()


async def test_requests_carry_the_header_and_body_as_one_msgpack_map(server):
    c = await Connection.open("127.0.0.1", server.port, client_id="me")
    await c.request(ApiKey.PRODUCE, {"answer": True, "n": 7, "records": b"\x00\x01"})
    msg = await server.seen.get()
    assert msg == {"api": int(ApiKey.PRODUCE), "v": 0, "id": 1, "client": "me", "answer": True, "n": 7,
                   "records": b"\x00\x01"}
    assert msgpack.packb(msg, use_bin_type=True)       # bytes stayed bytes (bin type)
    c.close()


async def test_answers_split_across_reads_or_sharing_one_are_all_delivered():
    c = Connection("h", 1, "t", 1 << 20)
    got, cb = collector()
    for cid in (1, 2, 3):
        c._track(cid, 30_000, None, cb)
    frames = [encode_frame({"id": cid, "n": cid}) for cid in (1, 2, 3)]
    c._on_data(frames[0][:3])                       # not even a whole length
    c._on_data(frames[0][3:9])
    c._on_data(frames[0][9:] + frames[1])           # the end of one and a whole other
    c._on_data(frames[2])                           # whole again
    assert [r["n"] for r, _ in got] == [1, 2, 3]
    c._fail_all("done")
