"""SCRAM-SHA-256 (RFC 5802, RFC 7677) as sans-IO state machines.

Owns: the message formats, the key derivation and the proofs of one
exchange, client side (`ScramClient`) and server side (`ScramServer`), and
the salted credential a server keeps instead of the secret
(`ScramCredential`). Must not know: sockets, frames, API keys, clocks or
random numbers (nonces and salts come in from the caller, so a test can
replay an exchange byte for byte).

What it gives: the secret never crosses the wire; the server nonce makes
every exchange unique, so a recorded exchange cannot be replayed on a new
connection; the server proves it holds the credential too (the client
checks the server signature). Channel binding is not offered (gs2 header
`n,,`), as Kafka does not offer it. Passwords are used as UTF-8 bytes
without SASLprep (minibroker's secrets are generated ASCII).
"""
from __future__ import annotations

import base64
import enum
import functools
import hashlib
import hmac
from dataclasses import dataclass

MECHANISM = "SCRAM-SHA-256"
MIN_ITERATIONS = 4096          # RFC 7677's minimum, and Kafka's for SCRAM-SHA-256
_GS2_HEADER = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode()).decode()   # "biws"


class ScramError(Exception):
    """The exchange failed; `reason` is safe to log (it never holds key material)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


@functools.lru_cache(maxsize=16)
def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) = PBKDF2-HMAC-SHA-256 (deterministic, so cached: a broker
    reconnecting to the same server does not pay the 4096 iterations again)."""
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)


@dataclass(frozen=True)
class ScramCredential:
    """What a server stores: enough to check a proof and to sign its answer,
    not enough to authenticate as a client (RFC 5802 section 3).
    Invariant: `iterations >= MIN_ITERATIONS`; the keys are 32 bytes."""
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def derive(cls, password: str, salt: bytes, iterations: int = MIN_ITERATIONS) -> ScramCredential:
        if iterations < MIN_ITERATIONS:
            raise ValueError(f"SCRAM-SHA-256 needs at least {MIN_ITERATIONS} iterations, got {iterations}")
        if not password:
            raise ValueError("empty SCRAM password")
        sp = salted_password(password, salt, iterations)
        return cls(salt, iterations, _h(_hmac(sp, b"Client Key")), _hmac(sp, b"Server Key"))


def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise ScramError("bad user name encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1 or key in out:
            raise ScramError(f"malformed {what}")
        out[key] = value
    return out


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ScramError(f"{what} is not base64") from None


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None


class ClientStep(enum.Enum):
    START = "start"
    SENT_FIRST = "sent-first"
    SENT_FINAL = "sent-final"
    DONE = "done"


class ScramClient:
    """One client exchange: `first_message()`, then `final_message(server_first)`,
    then `verify_server_final(server_final)`; each step once, in that order.
    Invariant: `step` names the last message sent (or DONE once the server is verified)."""

    def __init__(self, user: str, password: str, nonce: str) -> None:
        if not nonce or "," in nonce:
            raise ValueError("client nonce must be printable and comma-free")
        self.user = user
        self._password = password
        self._nonce = nonce
        self._bare = f"n={_escape_name(user)},r={nonce}"
        self._server_signature = b""
        self.step = ClientStep.START

    def first_message(self) -> bytes:
        """client-first-message: `n,,n=<user>,r=<client nonce>`."""
        self._expect(ClientStep.START)
        self.step = ClientStep.SENT_FIRST
        return (_GS2_HEADER + self._bare).encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        """client-final-message with the proof, from the server's salt, iterations and nonce."""
        self._expect(ClientStep.SENT_FIRST)
        text = _text(server_first, "server-first-message")
        attrs = _attributes(text, "server-first-message")
        nonce, salt_b64, iter_s = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if "m" in attrs:
            raise ScramError("server asks for an unsupported SCRAM extension")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise ScramError("server nonce does not extend the client nonce")
        if not iter_s.isdigit() or int(iter_s) < MIN_ITERATIONS:
            raise ScramError(f"server asks for {iter_s or 'no'} iterations (at least {MIN_ITERATIONS} needed)")
        salt = _b64decode(salt_b64, "salt")
        sp = salted_password(self._password, salt, int(iter_s))
        without_proof = f"c={_CHANNEL_BINDING},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = _hmac(sp, b"Client Key")
        proof = _xor(client_key, _hmac(_h(client_key), auth_message))
        self._server_signature = _hmac(_hmac(sp, b"Server Key"), auth_message)
        self.step = ClientStep.SENT_FINAL
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's signature (mutual authentication); raise ScramError if it is wrong."""
        self._expect(ClientStep.SENT_FINAL)
        attrs = _attributes(_text(server_final, "server-final-message"), "server-final-message")
        if "e" in attrs:
            raise ScramError(f"server refused the proof: {attrs['e']}")
        if not hmac.compare_digest(_b64decode(attrs.get("v", ""), "server signature"), self._server_signature):
            raise ScramError("server signature does not match: the server does not hold the cluster credential")
        self.step = ClientStep.DONE

    def _expect(self, step: ClientStep) -> None:
        if self.step is not step:
            raise ScramError(f"SCRAM client step out of order (at {self.step.value})")


class ServerStep(enum.Enum):
    START = "start"
    SENT_FIRST = "sent-first"
    DONE = "done"
    FAILED = "failed"


class ScramServer:
    """One server exchange: `server_first(client_first)`, then `server_final(client_final)`.
    Either raises ScramError, after which the exchange is FAILED for good.
    Invariant: `user` is set once the exchange is DONE, and only then."""

    def __init__(self, credential: ScramCredential | None, nonce: str) -> None:
        if not nonce or "," in nonce:
            raise ValueError("server nonce must be printable and comma-free")
        self._credential = credential
        self._server_nonce = nonce
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._user = ""
        self.user: str | None = None
        self.step = ServerStep.START

    def server_first(self, client_first: bytes) -> bytes:
        """Triggered by the first SaslAuthenticate: answer with salt, iterations, combined nonce."""
        self._expect(ServerStep.START)
        try:
            text = _text(client_first, "client-first-message")
            if not text.startswith(_GS2_HEADER):
                raise ScramError("channel binding and authzid are not supported (gs2 header must be 'n,,')")
            bare = text[len(_GS2_HEADER):]
            attrs = _attributes(bare, "client-first-message")
            if set(attrs) != {"n", "r"} or not attrs["r"] or not attrs["n"]:
                raise ScramError("client-first-message needs exactly n= and r=")
            self._user = _unescape_name(attrs["n"])
            if self._credential is None:
                raise ScramError("no credential configured on this server")
        except ScramError:
            self.step = ServerStep.FAILED
            raise
        c = self._credential
        self._client_first_bare = bare
        self._nonce = attrs["r"] + self._server_nonce
        self._server_first = f"r={self._nonce},s={base64.b64encode(c.salt).decode()},i={c.iterations}"
        self.step = ServerStep.SENT_FIRST
        return self._server_first.encode("utf-8")

    def server_final(self, client_final: bytes) -> bytes:
        """Triggered by the second SaslAuthenticate: check the proof, answer with the server signature."""
        self._expect(ServerStep.SENT_FIRST)
        try:
            text = _text(client_final, "client-final-message")
            without_proof, sep, proof_part = text.rpartition(",p=")
            if not sep:
                raise ScramError("client-final-message has no proof")
            attrs = _attributes(without_proof, "client-final-message")
            if attrs.get("c") != _CHANNEL_BINDING:
                raise ScramError("channel binding data does not match the gs2 header")
            if not hmac.compare_digest(attrs.get("r", "").encode(), self._nonce.encode()):
                raise ScramError("nonce does not match this exchange (a replayed message?)")
            proof = _b64decode(proof_part, "proof")
            assert self._credential is not None
            c = self._credential
            auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
            signature = _hmac(c.stored_key, auth_message)
            if len(proof) != len(signature) or not hmac.compare_digest(_h(_xor(proof, signature)), c.stored_key):
                raise ScramError("invalid proof (wrong secret)")
        except ScramError:
            self.step = ServerStep.FAILED
            raise
        self.step = ServerStep.DONE
        self.user = self._user
        return f"v={base64.b64encode(_hmac(c.server_key, auth_message)).decode()}".encode()

    def _expect(self, step: ServerStep) -> None:
        if self.step is not step:
            at = self.step
            self.step = ServerStep.FAILED
            raise ScramError(f"SCRAM message out of order (exchange at {at.value})")
