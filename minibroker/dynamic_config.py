"""Effective configs and where each value comes from, as Kafka's DescribeConfigs reports them.

Pure: from a topic's overrides, the dynamic broker configs (per broker and
cluster default, from the metadata log), the broker's static properties and
the built-in defaults, to `ConfigEntry`s with Kafka's source names and
synonyms (most specific first). Also which broker configs may change at
runtime here, and their validation.

Precedence, as Kafka: DYNAMIC_TOPIC_CONFIG > DYNAMIC_BROKER_CONFIG >
DYNAMIC_DEFAULT_BROKER_CONFIG > STATIC_BROKER_CONFIG > DEFAULT_CONFIG.
Simplified: a static value counts as STATIC_BROKER_CONFIG only when it
differs from the built-in default (the merged properties do not remember
which file set them).

Must not know: the metadata image, sockets, the controller.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from minibroker.config import DEFAULTS, TOPIC_CONFIGS, TOPIC_ONLY_CONFIGS


class ConfigSource(enum.IntEnum):
    """DescribeConfigs' ConfigSource ids."""
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ResourceType(enum.IntEnum):
    """ConfigResource.Type ids on the wire."""
    TOPIC = 2
    BROKER = 4


# The broker-wide defaults of the topic configs (log.retention.ms for retention.ms, ...), by broker name:
# dynamic, as Kafka's DynamicLogConfig, and checked as the topic config they stand for.
LOG_CONFIG_SYNONYMS: dict[str, str] = {broker: topic for topic, broker in TOPIC_CONFIGS.items()
                                       if broker not in ("min.insync.replicas", "unclean.leader.election.enable")}
# Broker configs an alter may change at runtime, and how each is checked ("log": as its topic config).
# All take effect at once: min.insync.replicas on every leader of a topic without its own override,
# unclean.leader.election.enable at the controller, the log configs on every log of a topic without
# its own override (from their next use: the next append, roll, retention pass), producer.id.expiration.ms
# at the next expiration check.
DYNAMIC_BROKER_CONFIGS: dict[str, str] = {
    "min.insync.replicas": "int>=1",
    "producer.id.expiration.ms": "int>=1",
    "unclean.leader.election.enable": "bool",
    "leader.replication.throttled.rate": "long>=0",
    "follower.replication.throttled.rate": "long>=0",
    **dict.fromkeys(sorted(LOG_CONFIG_SYNONYMS), "log"),
}


# The LIST-typed configs, whose values IncrementalAlterConfigs may APPEND to and SUBTRACT from.
LIST_CONFIGS = frozenset({"cleanup.policy", "log.cleanup.policy", "leader.replication.throttled.replicas",
                          "follower.replication.throttled.replicas"})


def topic_default(name: str) -> str:
    """A topic config's value without an override (its broker default's built-in value)."""
    if name in TOPIC_ONLY_CONFIGS:
        return TOPIC_ONLY_CONFIGS[name]
    return DEFAULTS.get(TOPIC_CONFIGS.get(name, name), "")


@dataclass(frozen=True)
class ConfigEntry:
    """Invariant: `synonyms[0]` is (source, name, value) of the effective value."""
    name: str
    value: str
    source: ConfigSource
    synonyms: tuple[tuple[ConfigSource, str, str], ...]
    read_only: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


def _broker_synonyms(key: str, broker_dynamic: Mapping[str, str], default_dynamic: Mapping[str, str],
                     static: Mapping[str, str]) -> list[tuple[ConfigSource, str, str]]:
    out: list[tuple[ConfigSource, str, str]] = []
    if key in broker_dynamic:
        out.append((ConfigSource.DYNAMIC_BROKER_CONFIG, key, broker_dynamic[key]))
    if key in default_dynamic:
        out.append((ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, key, default_dynamic[key]))
    if key in static and static[key] != DEFAULTS.get(key):
        out.append((ConfigSource.STATIC_BROKER_CONFIG, key, static[key]))
    if key in DEFAULTS:
        out.append((ConfigSource.DEFAULT_CONFIG, key, DEFAULTS[key]))
    return out


def _entry(name: str, synonyms: list[tuple[ConfigSource, str, str]], read_only: bool = False) -> ConfigEntry:
    src, _, value = synonyms[0]
    return ConfigEntry(name, value, src, tuple(synonyms), read_only)


def topic_entries(topic_configs: Mapping[str, str], broker_dynamic: Mapping[str, str],
                  default_dynamic: Mapping[str, str], static: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config minibroker knows, by name, with its effective value and synonyms."""
    out = []
    for name in sorted({*TOPIC_CONFIGS, *TOPIC_ONLY_CONFIGS}):
        syn: list[tuple[ConfigSource, str, str]] = []
        if name in topic_configs:
            syn.append((ConfigSource.DYNAMIC_TOPIC_CONFIG, name, topic_configs[name]))
        if name in TOPIC_ONLY_CONFIGS:
            syn.append((ConfigSource.DEFAULT_CONFIG, name, TOPIC_ONLY_CONFIGS[name]))
        else:
            syn += _broker_synonyms(TOPIC_CONFIGS[name], broker_dynamic, default_dynamic, static)
        if syn:
            out.append(_entry(name, syn))
    return out


def broker_entries(broker_dynamic: Mapping[str, str], default_dynamic: Mapping[str, str],
                   static: Mapping[str, str]) -> list[ConfigEntry]:
    """A broker's configs by name (secrets left out), each with its synonyms; only the
    DYNAMIC_BROKER_CONFIGS are writable."""
    names = sorted((set(static) | set(DEFAULTS) | set(broker_dynamic) | set(default_dynamic))
                   - {k for k in set(static) | set(DEFAULTS) if "secret" in k or "password" in k})
    out = []
    for name in names:
        syn = _broker_synonyms(name, broker_dynamic, default_dynamic, static)
        if not syn and name in static:
            syn = [(ConfigSource.STATIC_BROKER_CONFIG, name, static[name])]
        if syn:
            out.append(_entry(name, syn, read_only=name not in DYNAMIC_BROKER_CONFIGS))
    return out


def default_entries(default_dynamic: Mapping[str, str]) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults (kafka-configs --entity-default)."""
    return [_entry(k, [(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, k, v)]) for k, v in sorted(default_dynamic.items())]


def broker_config_error(configs: Mapping[str, str | None],
                        log_value_error: Callable[[Mapping[str, str]], str | None] | None = None) -> str | None:
    """Why these dynamic broker configs cannot be set, or None. A None value (a DELETE) is checked for
    its name only. A log config's value is checked by `log_value_error` (the topic config check) as the
    topic config it stands for, and its message names the broker config."""
    fixed = sorted(k for k in configs if k not in DYNAMIC_BROKER_CONFIGS)
    if fixed:
        return (f"Cannot update these configs dynamically: {', '.join(fixed)} "
                f"(dynamic here: {', '.join(sorted(DYNAMIC_BROKER_CONFIGS))})")
    for k, v in configs.items():
        if v is None:
            continue
        kind = DYNAMIC_BROKER_CONFIGS[k]
        if kind == "log":
            topic_key = LOG_CONFIG_SYNONYMS[k]
            err = log_value_error({topic_key: v}) if log_value_error is not None else None
            if err is not None:
                return err.replace(f"configuration {topic_key}:", f"configuration {k}:", 1)
            continue
        if kind == "bool" and v.strip().lower() not in ("true", "false"):
            return f"Invalid value {v} for configuration {k}: Expected value to be either true or false"
        if kind == "long>=0":
            try:
                n = int(v.strip())
            except ValueError:
                return f"Invalid value {v} for configuration {k}: Not a number of type LONG"
            if n >= 1 << 63:
                return f"Invalid value {v} for configuration {k}: Not a number of type LONG"
            if n < 0:
                return f"Invalid value {v} for configuration {k}: Value must be at least 0"
            continue
        if kind == "int>=1":
            try:
                n = int(v.strip())
            except ValueError:
                return f"Invalid value {v} for configuration {k}: Not a number of type INT"
            if n < 1:
                return f"Invalid value {v} for configuration {k}: Value must be at least 1"
    return None


def entry_to_wire(e: ConfigEntry) -> dict[str, Any]:
    return {"name": e.name, "value": e.value, "source": int(e.source), "read_only": e.read_only,
            "is_sensitive": False,
            "synonyms": [{"name": n, "value": v, "source": int(s)} for s, n, v in e.synonyms]}


def entry_from_wire(d: Mapping[str, Any]) -> ConfigEntry:
    syn = tuple((ConfigSource(s["source"]), s["name"], s["value"]) for s in d.get("synonyms") or ())
    return ConfigEntry(d["name"], d["value"], ConfigSource(d["source"]),
                       syn or ((ConfigSource(d["source"]), d["name"], d["value"]),), bool(d.get("read_only")))
