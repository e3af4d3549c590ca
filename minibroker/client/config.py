"""Client configuration by Kafka's property names, with Kafka's defaults.

Producers, consumers and admin clients take a mapping of Kafka property
names (`{"acks": "all", "linger.ms": 5}`) and/or keyword arguments with
underscores for dots (`linger_ms=5`). Values are read through
`minibroker.config.Config`'s typed getters, so a bad value names its property.

Security settings (`security.protocol`, `ssl.*`) may also come from a
properties file named by `MINIBROKER_COMMAND_CONFIG` (what the CLI's
`--command-config FILE` sets, as Kafka's tools take one); properties given
to the client explicitly win over the file.
"""
from __future__ import annotations

import os
from typing import Any
from collections.abc import Mapping

from minibroker.config import Config, ConfigError, parse_hostport, parse_properties

COMMAND_CONFIG_ENV = "MINIBROKER_COMMAND_CONFIG"

COMMON_DEFAULTS: dict[str, str] = {
    "bootstrap.servers": "127.0.0.1:9092",
    "client.id": "minibroker-client",
    "request.timeout.ms": "30000",
    "metadata.max.age.ms": "300000",
    "retry.backoff.ms": "100",
    "retry.backoff.max.ms": "1000",
    "reconnect.backoff.ms": "50",
    "reconnect.backoff.max.ms": "1000",
    "socket.connection.setup.timeout.ms": "10000",
    "default.api.timeout.ms": "60000",
    # TLS (minibroker.net.tls): PLAINTEXT or SSL (SASL_* accepted as their transport)
    "security.protocol": "PLAINTEXT",
    "ssl.truststore.location": "",
    "ssl.ca.location": "",
    "ssl.certificate.location": "",
    "ssl.key.location": "",
    "ssl.keystore.location": "",
    "ssl.key.password": "",
    "ssl.endpoint.identification.algorithm": "https",
}
# Keys a --command-config file may set; others in it are ignored, as Kafka's tools ignore
# settings that do not apply to the client they build.
SECURITY_KEYS = tuple(k for k in COMMON_DEFAULTS if k.startswith(("security.", "ssl.")))

PRODUCER_DEFAULTS: dict[str, str] = {
    **COMMON_DEFAULTS,
    "acks": "all",
    "linger.ms": "5",                       # KIP-1030: 5 since Kafka 4.0
    "batch.size": "16384",
    "buffer.memory": "33554432",
    "max.request.size": "1048576",
    "max.block.ms": "60000",
    "retries": "2147483647",
    "delivery.timeout.ms": "120000",
    "max.in.flight.requests.per.connection": "5",
    "partitioner.ignore.keys": "false",
    "compression.type": "none",             # none, gzip, snappy, lz4, zstd (Kafka's names)
    "enable.idempotence": "true",           # KIP-679: the default since Kafka 3.0
}

CONSUMER_DEFAULTS: dict[str, str] = {
    **COMMON_DEFAULTS,
    "auto.offset.reset": "latest",
    "client.rack": "",
    "fetch.min.bytes": "1",
    "fetch.max.wait.ms": "500",
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "1048576",
    "max.poll.records": "500",
    # consumer groups (GroupConsumer; Kafka's names and defaults)
    "group.id": "",
    "group.instance.id": "",                # a static member (KIP-345) when set
    "session.timeout.ms": "45000",
    "heartbeat.interval.ms": "3000",
    "max.poll.interval.ms": "300000",
    "enable.auto.commit": "true",
    "auto.commit.interval.ms": "5000",
}

ADMIN_DEFAULTS: dict[str, str] = dict(COMMON_DEFAULTS)


def client_config(defaults: Mapping[str, str], config: Mapping[str, Any] | None,
                  kwargs: Mapping[str, Any], bootstrap_servers: str | list[str] | None = None) -> Config:
    """Merge defaults, a Kafka-named mapping and underscore keyword arguments.
    `bootstrap_servers` (a client constructor's first argument, `host:port,...`
    or a list) stands for `bootstrap.servers` in the mapping."""
    props = dict(defaults)
    props.update(command_config())
    named = dict(config or {})
    if bootstrap_servers is not None:
        named["bootstrap.servers"] = bootstrap_servers if isinstance(bootstrap_servers, str) \
            else ",".join(bootstrap_servers)
    for source in named, {k.replace("_", "."): v for k, v in kwargs.items()}:
        for k, v in source.items():
            if k not in defaults:
                raise ConfigError(f"{k}: unknown client property")
            props[k] = _to_str(v)
    return Config(props)


def command_config(path: str | None = None) -> dict[str, str]:
    """The security properties of `path` (default: the file in $MINIBROKER_COMMAND_CONFIG, if any)."""
    path = path or os.environ.get(COMMAND_CONFIG_ENV, "")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read(), path)
    except OSError as exc:
        raise ConfigError(f"--command-config: cannot read {path}: {exc.strerror}") from None
    return {k: v for k, v in props.items() if k in SECURITY_KEYS}


def _to_str(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def parse_bootstrap(spec: str | list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    """`host:port,host:port` (or a list of them) -> [(host, port)]."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = [parse_hostport(s) for s in (i.strip() for i in items) if s]
    if not out:
        raise ConfigError("bootstrap.servers: no address given")
    return out


def parse_acks(v: str | int) -> int:
    s = str(v).strip().lower()
    if s in ("all", "-1"):
        return -1
    if s in ("0", "1"):
        return int(s)
    raise ConfigError(f"acks: expected all, -1, 0 or 1, got {v!r}")
