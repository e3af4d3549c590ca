"""SCRAM-SHA-256 over SaslHandshake/SaslAuthenticate on a real socket: only a client
that proves the secret in this very exchange gets a privileged connection."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import Connection
from minibroker.net.sasl import AUTH_FRAMES
from minibroker.net.scram import ScramClient
from minibroker.net.server import Dispatcher, HandlerSpec, serve
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import FrameDecoder, encode_frame

SECRET = "sasl-test-secret-0123456789"


@pytest.fixture
async def server():
    async def privileged(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        return {"error": 0, "principal": ctx.conn.sasl.principal}

    d = Dispatcher({ApiKey.ALTER_PARTITION: HandlerSpec(privileged, privileged=True)},
                   secret=SECRET, role="controller", failed_auth_delay_ms=20)
    srv = await serve(d, "127.0.0.1", 0, "CONTROLLER")
    yield d, srv.sockets[0].getsockname()[1]
    srv.close()


class Raw(asyncio.Protocol):
    """A hand-driven connection: frames out, frames in, end of stream (FIN or reset) seen."""

    def __init__(self) -> None:
        self.dec, self.inbox, self.cid = FrameDecoder(), [], 0
        self.changed = asyncio.Event()
        self.ended = False

    @classmethod
    async def open(cls, port: int) -> Raw:
        _, proto = await asyncio.get_running_loop().create_connection(cls, "127.0.0.1", port)
        return proto

    def connection_made(self, transport: Any) -> None:
        self.w = transport

    def data_received(self, data: bytes) -> None:
        self.inbox.extend(self.dec.feed(data))
        self.changed.set()

    def eof_received(self) -> None:
        self.ended = True
        self.changed.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.changed.set()

    def send(self, api: ApiKey, **body: Any) -> None:
        self.cid += 1
        self.w.write(encode_frame({"api": int(api), "v": 0, "id": self.cid, "client": "raw", **body}))

    async def recv(self) -> dict[str, Any] | None:
        """The next response, or None once the server ended the stream."""
        while not self.inbox and not self.ended:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 10)
        return self.inbox.pop(0) if self.inbox else None

    async def call(self, api: ApiKey, **body: Any) -> dict[str, Any] | None:
        self.send(api, **body)
        return await self.recv()

    def close(self) -> None:
        self.w.close()


ALTER = {"broker_id": 1, "broker_epoch": 1, "topics": []}


async def test_scram_exchange_authenticates_and_names_the_principal(server):
    _, port = server
    conn = await Connection.open("127.0.0.1", port, client_id="broker-7-lifecycle", secret=SECRET)
    resp = await conn.request(ApiKey.ALTER_PARTITION, ALTER)
    assert resp["error"] == 0 and resp["principal"] == "broker-7-lifecycle"
    conn.close()


async def test_the_secret_never_crosses_the_wire(server):
    _, port = server
    raw = await Raw.open(port)
    assert (await raw.call(ApiKey.SASL_HANDSHAKE, mechanism="SCRAM-SHA-256"))["error"] == 0
    c = ScramClient("b", SECRET, "client-nonce-1")
    first = c.first_message()
    resp = await raw.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=first)
    final = c.final_message(resp["auth_bytes"])
    assert SECRET.encode() not in first + final + resp["auth_bytes"]
    resp = await raw.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=final)
    c.verify_server_final(resp["auth_bytes"])
    assert (await raw.call(ApiKey.ALTER_PARTITION, **ALTER))["error"] == 0
    raw.close()


async def test_plain_is_refused_with_unsupported_sasl_mechanism_and_the_connection_closed(server):
    _, port = server
    raw = await Raw.open(port)
    resp = await raw.call(ApiKey.SASL_HANDSHAKE, mechanism="PLAIN")
    assert resp["error"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM and resp["mechanisms"] == ["SCRAM-SHA-256"]
    assert await raw.recv() is None
    raw.close()


async def test_the_old_plain_secret_request_gets_no_privilege(server):
    _, port = server
    raw = await Raw.open(port)
    resp = await raw.call(ApiKey.SASL_AUTHENTICATE, mechanism="PLAIN", secret=SECRET)
    assert resp["error"] != 0
    assert await raw.recv() is None
    raw.close()


async def test_a_replayed_exchange_cannot_authenticate_a_new_connection(server):
    _, port = server
    # A network observer records one legitimate exchange...
    raw = await Raw.open(port)
    await raw.call(ApiKey.SASL_HANDSHAKE, mechanism="SCRAM-SHA-256")
    c = ScramClient("broker-1", SECRET, "recorded-client-nonce")
    recorded_first = c.first_message()
    resp = await raw.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=recorded_first)
    recorded_final = c.final_message(resp["auth_bytes"])
    assert (await raw.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=recorded_final))["error"] == 0
    raw.close()
    # ...and replays it byte for byte on its own connection.
    thief = await Raw.open(port)
    await thief.call(ApiKey.SASL_HANDSHAKE, mechanism="SCRAM-SHA-256")
    assert (await thief.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=recorded_first))["error"] == 0
    resp = await thief.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=recorded_final)
    assert resp["error"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert await thief.recv() is None          # and it is disconnected
    thief.close()


async def test_a_failed_guess_answers_once_then_closes_so_pipelined_guesses_get_nothing(server):
    _, port = server
    raw = await Raw.open(port)
    raw.send(ApiKey.SASL_HANDSHAKE, mechanism="SCRAM-SHA-256")
    c = ScramClient("x", "a-wrong-guess-0000", "nonce-a")
    raw.send(ApiKey.SASL_AUTHENTICATE, auth_bytes=c.first_message())
    assert (await raw.recv())["error"] == 0
    resp = await raw.recv()
    raw.send(ApiKey.SASL_AUTHENTICATE, auth_bytes=c.final_message(resp["auth_bytes"]))
    for _ in range(5000):                     # 5,000 more guesses in one burst
        raw.send(ApiKey.SASL_HANDSHAKE, mechanism="SCRAM-SHA-256")
        raw.send(ApiKey.ALTER_PARTITION, **ALTER)
    assert (await raw.recv())["error"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert await raw.recv() is None
    raw.close()


async def test_authenticate_before_handshake_is_an_illegal_sasl_state(server):
    _, port = server
    raw = await Raw.open(port)
    resp = await raw.call(ApiKey.SASL_AUTHENTICATE, auth_bytes=b"n,,n=a,r=b")
    assert resp["error"] == ErrorCode.ILLEGAL_SASL_STATE
    assert await raw.recv() is None
    raw.close()


async def test_a_wrong_secret_fails_connection_open_and_privileged_calls_stay_refused(server):
    _, port = server
    with pytest.raises(KafkaError) as e:
        await Connection.open("127.0.0.1", port, secret="not-the-secret-000000")
    assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    plain = await Connection.open("127.0.0.1", port)
    assert (await plain.request(ApiKey.ALTER_PARTITION, ALTER))["error"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    plain.close()


async def test_a_server_that_does_not_hold_the_secret_is_detected_by_the_client():
    d = Dispatcher({}, secret="some-other-cluster-secret", role="controller", failed_auth_delay_ms=0)
    srv = await serve(d, "127.0.0.1", 0, "CONTROLLER")
    with pytest.raises(KafkaError) as e:
        await Connection.open("127.0.0.1", srv.sockets[0].getsockname()[1], secret=SECRET)
    assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    srv.close()


def test_the_dispatcher_keeps_only_the_salted_credential():
    d = Dispatcher({}, secret=SECRET, role="broker")
    assert d.secret == "" and d.credential is not None
    assert SECRET.encode() not in d.credential.stored_key + d.credential.server_key + d.credential.salt


def test_the_handshake_takes_the_frames_the_fault_proxy_lets_through():
    assert AUTH_FRAMES == 3
