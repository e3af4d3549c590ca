"""The request server's per-request shortcuts against their general paths: the RequestContext a
handler gets is the one RequestContext(...) builds, and `_pump`'s early stop after a frame leaves the
budget's rule (PUMP_BUDGET frames admitted per turn, then reading paused until the next) as it was."""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from minibroker.net.reply import Reply
from minibroker.net.server import PUMP_BUDGET, Dispatcher, HandlerSpec, RequestContext, ServerConnection
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import FrameDecoder, encode_frame


class _Transport:
    def __init__(self) -> None:
        self.responses: list[dict] = []
        self.reading = True
        self._decoder = FrameDecoder()

    def writelines(self, parts: list[bytes]) -> None:
        self.responses += self._decoder.feed(b"".join(parts))

    def write(self, data: bytes) -> None:
        self.responses += self._decoder.feed(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _open(handler: Any, max_inflight: int = 8) -> tuple[ServerConnection, _Transport]:
    d = Dispatcher({ApiKey.METADATA: HandlerSpec(handler)}, "", "broker", max_inflight=max_inflight)
    conn = ServerConnection(d, "PLAINTEXT")
    t = _Transport()
    conn.connection_made(t)  # type: ignore[arg-type]
    return conn, t


def _metadata(cid: int, client: str = "c1") -> bytes:
    return encode_frame({"api": int(ApiKey.METADATA), "v": 0, "id": cid, "client": client, "topics": None})


async def test_the_handler_gets_the_context_requestcontext_builds() -> None:
    # _on_request builds the context without RequestContext's __init__: it must stay the plain field
    # assignment of these five fields (no defaults, no __post_init__), or the shortcut is wrong.
    fields = dataclasses.fields(RequestContext)
    assert [f.name for f in fields] == ["conn", "api", "version", "correlation_id", "client_id"]
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in fields)
    assert not hasattr(RequestContext, "__post_init__")
    got: list[RequestContext] = []

    def handler(ctx: RequestContext, body: dict) -> Reply:
        got.append(ctx)
        return Reply.of({"topics": []})
    conn, t = _open(handler)
    conn.data_received(_metadata(7, "someone"))
    conn.data_received(encode_frame({"api": int(ApiKey.METADATA), "v": 0, "id": 8, "topics": None}))  # no client
    assert got == [RequestContext(conn, ApiKey.METADATA, 0, 7, "someone"),
                   RequestContext(conn, ApiKey.METADATA, 0, 8, "")]
    assert type(got[0].api) is ApiKey and not got[0].authenticated and got[0].listener == "PLAINTEXT"
    assert [r["id"] for r in t.responses] == [7, 8]


async def test_a_full_budget_of_frames_pauses_reading_until_the_next_turn_and_fewer_do_not() -> None:
    for frames in (PUMP_BUDGET - 1, PUMP_BUDGET, PUMP_BUDGET + 1):
        conn, t = _open(lambda ctx, body: Reply.of({"topics": []}), max_inflight=4 * PUMP_BUDGET)
        conn.data_received(b"".join(_metadata(i) for i in range(frames)))
        assert len(t.responses) == min(frames, PUMP_BUDGET)
        assert t.reading is (frames < PUMP_BUDGET)        # the budget spent: the rest waits a turn
        deadline = asyncio.get_running_loop().time() + 10
        while not t.reading or len(t.responses) < frames:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0)
        assert [r["id"] for r in t.responses] == list(range(frames))
        conn.connection_lost(None)
