"""TLS for listeners and connections, with the standard library's `ssl`, set
by Kafka's property names (PEM files only; no JKS/PKCS12 keystores).

Owns: which listeners speak TLS (a listener named SSL or SASL_SSL, or one
mapped to SSL/SASL_SSL by `listener.security.protocol.map`, as Kafka's
default map does), the server context (`ssl.keystore.location` holding key
and certificate chain, or `ssl.certificate.location` + `ssl.key.location`)
and the client context (`security.protocol=SSL`, trust from
`ssl.truststore.location` or `ssl.ca.location`, host names checked unless
`ssl.endpoint.identification.algorithm` is empty). Must not know what
travels over the connections; authentication is SCRAM on top (sasl.py).
"""
from __future__ import annotations

import asyncio
import ssl
from typing import Literal

from minibroker.config import Config, ConfigError
from minibroker.errors import ErrorCode, KafkaError

Protocol = Literal["PLAINTEXT", "SSL"]
_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_PLAIN_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT")


def protocol_map(config: Config) -> dict[str, Protocol]:
    """listener name -> PLAINTEXT or SSL. Kafka's default map (each protocol name maps to
    itself) is implied; names not listed (EXTERNAL, INTERNAL, CONTROLLER, ...) are PLAINTEXT."""
    out: dict[str, Protocol] = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "PLAINTEXT", "SSL": "SSL",
                                "SASL_SSL": "SSL"}
    for item in config.get_list("listener.security.protocol.map"):
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or proto not in _TLS_PROTOCOLS + _PLAIN_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: bad entry {item!r}, expected NAME:PROTOCOL "
                              f"with PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
        out[name.strip().upper()] = "SSL" if proto in _TLS_PROTOCOLS else "PLAINTEXT"
    return out


def listener_protocol(config: Config, listener: str) -> Protocol:
    return protocol_map(config).get(listener.upper(), "PLAINTEXT")


def _load_chain(ctx: ssl.SSLContext, config: Config, who: str) -> bool:
    keystore = config.get("ssl.keystore.location", "")
    cert = config.get("ssl.certificate.location", "")
    key = config.get("ssl.key.location", "")
    password = config.get("ssl.key.password", "") or None
    if keystore:
        cert, key, prop = keystore, keystore, "ssl.keystore.location"
    elif cert or key:
        prop = "ssl.certificate.location" if not key else "ssl.key.location"
        if not (cert and key):
            raise ConfigError(f"{prop}: {who} needs both ssl.certificate.location and ssl.key.location")
    else:
        return False
    try:
        ctx.load_cert_chain(cert, key, password)
    except FileNotFoundError as exc:
        raise ConfigError(f"{prop}: {exc.filename}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{prop}: cannot load the certificate/key ({cert}, {key}): {exc}") from None
    return True


def _load_trust(ctx: ssl.SSLContext, config: Config) -> None:
    ca = config.get("ssl.truststore.location", "") or config.get("ssl.ca.location", "")
    if not ca:
        ctx.load_default_certs()
        return
    try:
        ctx.load_verify_locations(cafile=ca)
    except FileNotFoundError:
        raise ConfigError(f"ssl.truststore.location: {ca}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"ssl.truststore.location: cannot load CA certificates from {ca}: {exc}") from None


def server_context(config: Config, listener: str) -> ssl.SSLContext:
    """The context of a TLS listener (TLS 1.2 or later)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not _load_chain(ctx, config, f"TLS listener {listener}"):
        raise ConfigError(f"ssl.keystore.location: listener {listener} speaks SSL but no certificate is set "
                          f"(ssl.keystore.location, or ssl.certificate.location and ssl.key.location, PEM)")
    return ctx


def client_context(config: Config) -> ssl.SSLContext | None:
    """The client side for `security.protocol` (None for PLAINTEXT / SASL_PLAINTEXT)."""
    proto = config.get("security.protocol", "PLAINTEXT").strip().upper()
    if proto in _PLAIN_PROTOCOLS:
        return None
    if proto not in _TLS_PROTOCOLS:
        raise ConfigError(f"security.protocol: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got {proto!r}")
    return _client_context(config)


def peer_context(config: Config, protocol: Protocol) -> ssl.SSLContext | None:
    """What a broker dials another process with, given that listener's protocol."""
    return _client_context(config) if protocol == "SSL" else None


def _client_context(config: Config) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_trust(ctx, config)
    algo = config.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algo not in ("https", ""):
        raise ConfigError(f"ssl.endpoint.identification.algorithm: expected https or empty, got {algo!r}")
    ctx.check_hostname = algo == "https"
    _load_chain(ctx, config, "the client")
    return ctx


def controller_context(config: Config) -> ssl.SSLContext | None:
    """What a broker dials the controller with: the protocol of the first of
    `controller.listener.names` (as Kafka's brokers pick it), PLAINTEXT if none is named."""
    names = config.get_list("controller.listener.names")
    return peer_context(config, listener_protocol(config, names[0]) if names else "PLAINTEXT")


def tls_handshake_failed(host: str, port: int, exc: ssl.SSLError) -> KafkaError:
    """A TLS handshake the client could not complete: not retried (a certificate that is not
    trusted, or a listener that does not speak TLS, stays so), as Kafka's clients treat
    SslAuthenticationException."""
    reason = getattr(exc, "verify_message", "") or exc.reason or str(exc)
    hint = ("is it a PLAINTEXT listener? security.protocol=SSL needs an SSL listener"
            if "WRONG_VERSION" in str(exc).upper() or "EOF" in str(exc).upper() else
            "check ssl.truststore.location (the CA that signed the broker's certificate) and the host name")
    return KafkaError(ErrorCode.INVALID_CONFIG, f"TLS handshake with {host}:{port} failed: {reason} ({hint})")


def plaintext_to_tls(host: str, port: int) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_CONFIG,
                      f"{host}:{port} is an SSL listener and this client speaks PLAINTEXT: set "
                      f"security.protocol=SSL and ssl.truststore.location (CLI: --command-config FILE)")


async def speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether host:port completes a TLS handshake (certificates unchecked: this only tells a
    plaintext client that it dialled a TLS listener, it trusts nothing)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ctx), timeout_s)
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    writer.close()
    return True


def tls_to_plaintext(host: str, port: int) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_CONFIG,
                      f"{host}:{port} is a PLAINTEXT listener and this client speaks SSL: "
                      f"use security.protocol=PLAINTEXT there, or an SSL listener")


async def speaks_plaintext(host: str, port: int, timeout_s: float) -> bool:
    """Whether host:port answers an ApiVersions request in minibroker's plaintext framing."""
    from minibroker.protocol.framing import FrameDecoder, FramingError, encode_frame
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(encode_frame({"api": 18, "v": 0, "id": 1, "client": "tls-probe"}))
        decoder = FrameDecoder(1 << 20)
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), timeout_s)
            if not chunk:
                return False
            if decoder.feed(chunk):
                return True
    except (OSError, TimeoutError, FramingError):
        return False
    finally:
        writer.close()
