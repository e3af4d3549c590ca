"""The SASL exchange on a minibroker connection: SaslHandshake (17) naming the
mechanism, then SaslAuthenticate (36) twice carrying SCRAM-SHA-256 messages,
as Kafka's SASL_PLAINTEXT / SASL_SSL listeners do.

Owns: the per-connection server session (`SaslServerSession`: which step the
exchange is at, the principal once authenticated, whether it failed) and
the client side (`authenticate`, run by `Connection.open` when it is given
a secret). Must not know what privileged APIs exist (the request server
checks `authenticated`), nor sockets (the server and `Connection` carry the
frames). Any failure is final for the connection: the server answers after
`connection.failed.authentication.delay.ms` and closes it.
"""
from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.scram import MECHANISM, ScramClient, ScramCredential, ScramError, ScramServer, ServerStep
from minibroker.protocol.api import ApiKey

if TYPE_CHECKING:
    from minibroker.net.connection import Connection

MECHANISMS = [MECHANISM]
# Frames a client sends on a new connection before its first real request (the
# fault proxy's `hold ... after` counts them): one handshake, two authenticates.
AUTH_FRAMES = 3


def new_nonce() -> str:
    """A fresh nonce for one exchange (24 url-safe characters, never a comma)."""
    return secrets.token_urlsafe(18)


def server_credential(secret: str, iterations: int = 4096) -> ScramCredential:
    """The salted credential a server keeps for `secret` (a fresh random salt per process)."""
    return ScramCredential.derive(secret, secrets.token_bytes(16), iterations)


class SaslServerSession:
    """The server's view of one connection's exchange.
    Invariant: `principal` is set only after a verified proof; `failed` never goes back to False."""

    def __init__(self, credential: ScramCredential | None, nonce: Callable[[], str] = new_nonce) -> None:
        self._credential = credential
        self._nonce = nonce
        self._scram: ScramServer | None = None
        self.principal: str | None = None
        self.failed = False
        self.failure = ""

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def on_handshake(self, body: dict[str, Any]) -> dict[str, Any]:
        """Triggered by SaslHandshake: pick the mechanism (only SCRAM-SHA-256; PLAIN is not offered)."""
        if self._scram is not None or self.authenticated:
            return self._fail(ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake after the exchange began")
        if body["mechanism"] != MECHANISM:
            resp = self._fail(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              f"mechanism {body['mechanism']!r} is not enabled; enabled: {', '.join(MECHANISMS)}")
            resp["mechanisms"] = list(MECHANISMS)
            return resp
        self._scram = ScramServer(self._credential, self._nonce())
        return {"error": 0, "mechanisms": list(MECHANISMS)}

    def on_authenticate(self, body: dict[str, Any]) -> dict[str, Any]:
        """Triggered by each SaslAuthenticate: the client-first, then the client-final message."""
        scram = self._scram
        if scram is None or self.authenticated:
            return self._fail(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate without a SaslHandshake first"
                              if scram is None else "already authenticated")
        try:
            if scram.step is ServerStep.START:
                return {"error": 0, "auth_bytes": scram.server_first(body["auth_bytes"])}
            out = scram.server_final(body["auth_bytes"])
        except ScramError as exc:
            return self._fail(ErrorCode.SASL_AUTHENTICATION_FAILED, f"authentication failed: {exc.reason}")
        self.principal = scram.user
        return {"error": 0, "auth_bytes": out}

    def reject(self, code: ErrorCode, message: str) -> dict[str, Any]:
        """Triggered by a SASL request the server cannot even parse: the exchange fails."""
        return self._fail(code, message)

    def _fail(self, code: ErrorCode, message: str) -> dict[str, Any]:
        self.failed = True
        self.failure = message
        return {"error": int(code), "message": message}


async def authenticate(conn: Connection, user: str, secret: str, timeout_ms: int) -> None:
    """Run the client side of the exchange on a fresh connection; raise a KafkaError
    (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ...) if it fails."""
    resp = await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": MECHANISM}, timeout_ms=timeout_ms)
    _check(resp, f"{conn.address} refused SASL mechanism {MECHANISM}")
    client = ScramClient(user, secret, new_nonce())
    try:
        resp = await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": client.first_message()},
                                  timeout_ms=timeout_ms)
        _check(resp, "authentication failed")
        resp = await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": client.final_message(_bytes(resp))},
                                  timeout_ms=timeout_ms)
        _check(resp, "authentication failed")
        client.verify_server_final(_bytes(resp))
    except ScramError as exc:
        raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, f"{conn.address}: {exc.reason}") from None


def _bytes(resp: dict[str, Any]) -> bytes:
    b = resp.get("auth_bytes")
    if not isinstance(b, bytes):
        raise ScramError("SaslAuthenticate response carries no auth_bytes")
    return b


def _check(resp: dict[str, Any], what: str) -> None:
    code = resp.get("error", 0)
    if code:
        raise KafkaError(code, resp.get("message") or what, remote=True)
