"""A connection's `callback_failed` hook: a failed callback request goes to the hook (in a later loop
turn), an answered one straight to its callback; without a hook the callback gets the failure."""
import asyncio

from minibroker.errors import ErrorCode
from minibroker.net.connection import Connection
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import FrameDecoder, encode_frame


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        pass


def open_fake() -> tuple[Connection, FakeTransport]:
    conn = Connection("h", 1, "me", 1 << 20)
    t = FakeTransport()
    conn._transport = t  # type: ignore[assignment]
    conn._loop = asyncio.get_running_loop()
    return conn, t


async def test_failures_go_to_the_hook_in_a_later_turn_answers_to_the_callback() -> None:
    conn, t = open_fake()
    got: list = []
    failed = asyncio.get_running_loop().create_future()

    def cb(resp, err):
        got.append((resp, err))
    conn.callback_failed = lambda on_done, err: failed.set_result((on_done, err))
    conn.send_request(ApiKey.METADATA, {"n": 1}, cb)
    conn.send_request(ApiKey.PRODUCE, (1, (b"\xa1n", b"\x02")), cb)
    sent = [m for frame in t.written for m in FrameDecoder().feed(frame)]
    assert sent == [{"api": int(ApiKey.METADATA), "v": 0, "id": 1, "client": "me", "n": 1},
                    {"api": int(ApiKey.PRODUCE), "v": 0, "id": 2, "client": "me", "n": 2}]
    assert t.written[1] == encode_frame(sent[1])
    conn._on_data(encode_frame({"id": 2, "ok": True}))
    assert got == [({"id": 2, "ok": True}, None)]
    conn.close()
    assert not failed.done()                         # not inside close
    on_done, err = await asyncio.wait_for(failed, 10)
    assert on_done is cb and err.code == ErrorCode.NETWORK_EXCEPTION
    assert got == [({"id": 2, "ok": True}, None)]


async def test_without_a_hook_the_callback_gets_the_failure() -> None:
    conn, _ = open_fake()
    got = asyncio.get_running_loop().create_future()
    conn.send_request(ApiKey.METADATA, {"n": 1}, lambda resp, err: got.set_result((resp, err)))
    conn.close()
    resp, err = await asyncio.wait_for(got, 10)
    assert resp is None and err.code == ErrorCode.NETWORK_EXCEPTION
