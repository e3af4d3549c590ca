import asyncio
import struct

import msgpack
import pytest

from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import Connection
from minibroker.net.server import Dispatcher, HandlerSpec, serve
from minibroker.protocol.api import ApiKey


async def _echo_server(handlers=None):
    async def metadata(ctx, body):
        return {"topics": body["topics"], "who": ctx.client_id}

    async def slow(ctx, body):
        await asyncio.sleep(body["from_seq"] / 1000)
        return {"next_seq": body["from_seq"]}

    d = Dispatcher(handlers or {
        ApiKey.METADATA: HandlerSpec(metadata),
        ApiKey.EVENTS: HandlerSpec(slow),
        ApiKey.ALTER_PARTITION: HandlerSpec(metadata, privileged=True),
    }, secret="s3cret", role="broker", max_frame_bytes=1024)
    srv = await serve(d, "127.0.0.1", 0, "PLAINTEXT")
    return srv, srv.sockets[0].getsockname()[1]


async def test_request_roundtrip_echoes_correlation_id():
    srv, port = await _echo_server()
    c = await Connection.open("127.0.0.1", port, client_id="t")
    resp = await c.request(ApiKey.METADATA, {"topics": ["a"]})
    assert resp["topics"] == ["a"] and resp["who"] == "t"
    c.close()
    srv.close()


async def test_responses_come_back_in_request_order_even_when_handlers_finish_out_of_order():
    srv, port = await _echo_server()
    c = await Connection.open("127.0.0.1", port)
    order = []
    async def call(ms):
        r = await c.request(ApiKey.EVENTS, {"from_seq": ms})
        order.append(r["next_seq"])
    await asyncio.gather(call(50), call(0))
    assert order == [50, 0]
    c.close()
    srv.close()


async def test_wrong_field_type_gets_invalid_request_and_connection_survives():
    srv, port = await _echo_server()
    c = await Connection.open("127.0.0.1", port)
    resp = await c.request(ApiKey.METADATA, {"topics": "notalist"})
    assert resp["error"] == ErrorCode.INVALID_REQUEST and "topics" in resp["message"]
    assert (await c.request(ApiKey.METADATA, {"topics": None}))["topics"] is None
    c.close()
    srv.close()


async def test_unknown_api_key_is_unsupported_version():
    srv, port = await _echo_server()
    c = await Connection.open("127.0.0.1", port)
    resp = await c.request(4242, {})
    assert resp["error"] == ErrorCode.UNSUPPORTED_VERSION
    c.close()
    srv.close()


async def test_privileged_api_refused_without_secret_and_allowed_with_it():
    srv, port = await _echo_server()
    plain = await Connection.open("127.0.0.1", port)
    resp = await plain.request(ApiKey.ALTER_PARTITION, {"broker_id": 1, "broker_epoch": 1, "topics": []})
    assert resp["error"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(KafkaError) as e:
        await Connection.open("127.0.0.1", port, secret="wrong")
    assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    auth = await Connection.open("127.0.0.1", port, secret="s3cret")
    resp = await auth.request(ApiKey.ALTER_PARTITION, {"broker_id": 1, "broker_epoch": 1, "topics": []})
    assert resp.get("error", 0) == 0
    plain.close()
    auth.close()
    srv.close()


@pytest.mark.parametrize("garbage", [
    b"\xff\xff\xff\xff",                                   # absurd length prefix
    struct.pack(">I", 3) + b"\xc1\xc1\xc1",                # not msgpack
    struct.pack(">I", 2) + msgpack.packb([1]),              # not a map
    struct.pack(">I", 4) + msgpack.packb({"api": "x"}),     # bad header types
])
async def test_garbage_closes_only_that_connection(garbage):
    srv, port = await _echo_server()
    good = await Connection.open("127.0.0.1", port)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(garbage)
    await w.drain()
    assert await asyncio.wait_for(r.read(), 5) == b""     # server closed it
    assert (await good.request(ApiKey.METADATA, {"topics": []}))["topics"] == []
    good.close()
    w.close()
    srv.close()


async def test_pending_requests_fail_retriably_when_connection_closes():
    srv, port = await _echo_server()
    c = await Connection.open("127.0.0.1", port)
    fut = asyncio.ensure_future(c.request(ApiKey.EVENTS, {"from_seq": 5000}))
    await asyncio.sleep(0)                      # let the request be sent (one loop step, no timing)
    c.close()
    with pytest.raises(KafkaError) as e:
        await fut
    assert e.value.code == ErrorCode.NETWORK_EXCEPTION and e.value.retriable
    srv.close()


async def test_request_timeout_is_request_timed_out():
    srv, port = await _echo_server()
    c = await Connection.open("127.0.0.1", port)
    with pytest.raises(KafkaError) as e:
        await c.request(ApiKey.EVENTS, {"from_seq": 5000}, timeout_ms=50)
    assert e.value.code == ErrorCode.REQUEST_TIMED_OUT
    c.close()
    srv.close()


async def test_a_connection_lost_before_a_handler_ran_closes_the_handler_quietly():
    """A request whose handler task is cancelled before its first step (its connection went in the
    same turn) leaves no 'coroutine was never awaited' behind: the handler's coroutine is closed."""
    import gc
    import socket
    import warnings

    from minibroker.net.server import ServerConnection
    from minibroker.protocol.framing import encode_frame

    started = []

    async def handler(ctx, body):
        started.append(body)
        return {"next_seq": 0}

    d = Dispatcher({ApiKey.EVENTS: HandlerSpec(handler)}, secret="s3cret", role="broker")
    a, b = socket.socketpair()
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(lambda: ServerConnection(d, "PLAINTEXT"), sock=a)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        conn.data_received(encode_frame({"api": int(ApiKey.EVENTS), "v": 0, "id": 1, "client": "t", "from_seq": 0}))
        conn.connection_lost(None)
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
    assert started == []
    assert not [w for w in caught if "never awaited" in str(w.message)]
    conn.transport.close()
    b.close()
