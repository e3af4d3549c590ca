"""Configuration by Kafka's property names, with Kafka's defaults.

Sources, lowest to highest precedence: `DEFAULTS`, a properties file
(`key=value` lines, `#`/`!` comments), environment variables
`MINIBROKER_<NAME>` (the property upper-cased, dots as underscores:
`MINIBROKER_REPLICA_LAG_TIME_MAX_MS` -> `replica.lag.time.max.ms`; the
short forms in `ENV_ALIASES` too, e.g. `MINIBROKER_CLUSTER_SECRET`), then
explicit overrides (`--set key=value`). Values stay strings until read
through a typed getter, which names the property in its error.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

DEFAULTS: dict[str, str] = {
    # identity and networking
    "node.id": "-1",
    "broker.rack": "",
    "listeners": "",
    "advertised.listeners": "",
    "inter.broker.listener.name": "",
    "minibroker.kafka.listener.names": "KAFKA",   # listeners that speak Kafka's wire protocol
    "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
    "socket.request.max.bytes": "104857600",
    "connections.max.idle.ms": "600000",
    "minibroker.connections.first.frame.timeout.ms": "10000",
    "minibroker.max.inflight.requests.per.connection": "8",
    "minibroker.max.partitions.per.request": "10000",
    "minibroker.max.partitions.per.broker": "6000",
    "minibroker.tail.cache.max.bytes": "67108864",
    # No built-in secret: a process without one refuses to start (minibroker.net.credentials).
    "minibroker.cluster.secret": "",
    "minibroker.cluster.secret.file": "",
    "connection.failed.authentication.delay.ms": "100",
    # TLS (listeners named SSL, or mapped to SSL by listener.security.protocol.map): minibroker.net.tls
    "listener.security.protocol.map": "",
    "controller.listener.names": "",          # on a broker: the first name gives the controller's protocol
    "ssl.keystore.location": "",
    "ssl.certificate.location": "",
    "ssl.key.location": "",
    "ssl.key.password": "",
    "ssl.truststore.location": "",
    "ssl.ca.location": "",
    "ssl.endpoint.identification.algorithm": "https",
    "minibroker.semantics": "kafka",          # kafka | lesson
    "minibroker.log.level": "INFO",
    "minibroker.controlled.shutdown.timeout.ms": "30000",
    "minibroker.metadata.fetch.max.wait.ms": "500",
    "metrics.listener": "",                   # HOST:PORT serving GET /metrics (Prometheus); empty = off
    # storage
    "log.dirs": "/tmp/minibroker-logs",
    "metadata.log.dir": "/tmp/minibroker-controller",
    "log.segment.bytes": "1073741824",
    "log.roll.ms": "604800000",
    "log.index.interval.bytes": "4096",
    "log.retention.bytes": "-1",
    "log.retention.ms": "604800000",
    "log.retention.check.interval.ms": "300000",
    "log.segment.delete.delay.ms": "60000",
    "log.flush.interval.messages": "9223372036854775807",
    "log.flush.interval.ms": "9223372036854775807",
    "minibroker.fsync.before.ack": "false",
    "message.max.bytes": "1048588",
    "compression.type": "producer",
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.before.max.ms": "9223372036854775807",
    "log.message.timestamp.after.max.ms": "3600000",        # Kafka 4.0 (KIP-1030); 3.x: unbounded
    "log.cleanup.policy": "delete",
    "replica.high.watermark.checkpoint.interval.ms": "5000",
    # replication
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.min.bytes": "1",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.response.max.bytes": "10485760",
    "replica.fetch.backoff.ms": "1000",
    "replica.socket.timeout.ms": "30000",
    "replica.selector.class": "",
    # replication throttles (KIP-73, docs/rules.md RQ2): the rates are dynamic broker configs
    "leader.replication.throttled.rate": "9223372036854775807",
    "follower.replication.throttled.rate": "9223372036854775807",
    "replication.quota.window.num": "11",
    "replication.quota.window.size.seconds": "1",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "default.replication.factor": "1",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",     # Kafka listener only: Metadata creates unknown topics
    # idempotent producers: how long a producer id's state outlives its last batch (dynamic), how often checked
    "producer.id.expiration.ms": "86400000",
    "producer.id.expiration.check.interval.ms": "600000",
    # group coordinator (Kafka's names and defaults)
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
    "offsets.commit.timeout.ms": "5000",
    "offsets.retention.minutes": "10080",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.initial.rebalance.delay.ms": "3000",
    "group.max.size": "2147483647",
    # controller
    "broker.heartbeat.interval.ms": "2000",
    "broker.session.timeout.ms": "9000",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    "unclean.leader.election.interval.ms": "300000",
    "eligible.leader.replicas.enable": "false",
}

# message.timestamp.type's values, in Kafka's order (its ConfigDef.ValidString).
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

# Topic-level configs and the broker default each one falls back to.
TOPIC_CONFIGS: dict[str, str] = {
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "compression.type": "compression.type",
    "cleanup.policy": "log.cleanup.policy",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
}

# Topic-level configs with no broker default, and their default (RQ1: the throttled replicas).
TOPIC_ONLY_CONFIGS: dict[str, str] = {
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
}

ENV_PREFIX = "MINIBROKER_"
# Environment names that are not the generic MINIBROKER_<PROPERTY> spelling.
ENV_ALIASES: dict[str, str] = {
    "MINIBROKER_CLUSTER_SECRET": "minibroker.cluster.secret",
    "MINIBROKER_CLUSTER_SECRET_FILE": "minibroker.cluster.secret.file",
}


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the property."""


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"{source} line {n}: expected key=value, got {raw!r}")
        out[line[:sep].strip()] = line[sep + 1:].strip()
    return out


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for k, v in environ.items():
        if k in ENV_ALIASES:
            out.setdefault(ENV_ALIASES[k], v)
        elif k.startswith(ENV_PREFIX) and k not in ("MINIBROKER_BOOTSTRAP", "MINIBROKER_HOME",
                                                     "MINIBROKER_COMMAND_CONFIG"):
            out[k[len(ENV_PREFIX):].lower().replace("_", ".")] = v
    return out


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            raise ConfigError(f"override {p!r}: expected key=value")
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip()
    return out


class Config:
    """An immutable view of merged properties with typed getters."""

    def __init__(self, props: Mapping[str, str]) -> None:
        self._props = dict(props)

    @classmethod
    def load(cls, path: str | None = None, overrides: Mapping[str, str] | None = None,
             environ: Mapping[str, str] | None = None) -> Config:
        props = dict(DEFAULTS)
        if path:
            try:
                with open(path, encoding="utf-8") as f:
                    props.update(parse_properties(f.read(), path))
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        props.update(env_overrides(environ))
        if overrides:
            props.update(overrides)
        if props.get("broker.id") and props.get("node.id", "-1") == "-1":
            props["node.id"] = props["broker.id"]
        return cls(props)

    def with_overrides(self, overrides: Mapping[str, str]) -> Config:
        return Config({**self._props, **overrides})

    def get(self, key: str, default: str | None = None) -> str:
        if key in self._props:
            return self._props[key]
        if default is not None:
            return default
        raise ConfigError(f"{key}: not set")

    def get_int(self, key: str) -> int:
        v = self.get(key)
        try:
            return int(v)
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {v!r}") from None

    def get_bool(self, key: str) -> bool:
        v = self.get(key).lower()
        if v in ("true", "1", "yes"):
            return True
        if v in ("false", "0", "no", ""):
            return False
        raise ConfigError(f"{key}: expected true or false, got {v!r}")

    def get_list(self, key: str) -> list[str]:
        return [s.strip() for s in self.get(key, "").split(",") if s.strip()]

    def as_dict(self) -> dict[str, str]:
        return dict(self._props)


def parse_listeners(spec: str, key: str = "listeners") -> dict[str, tuple[str, int]]:
    """`NAME://host:port,...` -> {NAME: (host, port)}; a bare `host:port` is named PLAINTEXT."""
    out: dict[str, tuple[str, int]] = {}
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        name, _, addr = item.rpartition("://")
        name = name or "PLAINTEXT"
        host, sep, port = addr.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(f"{key}: bad listener {item!r}, expected NAME://host:port")
        out[name.upper()] = (host or "0.0.0.0", int(port))
    return out


def parse_hostport(s: str, default_port: int = 9092) -> tuple[str, int]:
    host, sep, port = s.strip().rpartition(":")
    if not sep:
        return s.strip(), default_port
    if not port.isdigit():
        raise ConfigError(f"bad address {s!r}, expected HOST:PORT")
    return host.strip("[]"), int(port)


def topic_config(topic_configs: Mapping[str, str], broker: Config, key: str) -> str:
    """A topic's effective value of `key`: its own override, else the broker default."""
    if key in topic_configs:
        return topic_configs[key]
    if key in TOPIC_ONLY_CONFIGS:
        return TOPIC_ONLY_CONFIGS[key]
    return broker.get(TOPIC_CONFIGS.get(key, key))
