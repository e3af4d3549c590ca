"""Strict validation of decoded messages against declarative field specs.

A spec is a dict of field name -> type, where a type is `int`, `str`,
`bytes`, `bool`, a nested spec dict, `MapOf(k, v)`, a one-element list `[type]` (a list of
that type), or `Opt(type, default)` / `Nullable(type)`. `validate` returns a
new dict holding only the spec's fields (unknown fields are ignored, as
Kafka ignores tagged fields it does not know), with defaults filled in, or
raises `SchemaError` naming the path of the first bad field.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INT64_MIN = -(2 ** 63)
INT64_MAX = 2 ** 63 - 1
_MISSING = object()


class SchemaError(ValueError):
    """A well-framed message whose fields have the wrong shape or type."""


@dataclass(frozen=True)
class Opt:
    type: Any
    default: Any = None


@dataclass(frozen=True)
class Nullable:
    type: Any


@dataclass(frozen=True)
class MapOf:
    """A map with keys of one type and values of another (configs and the like)."""
    key: Any
    value: Any


def validate(value: Any, spec: Any, path: str = "") -> Any:
    if isinstance(spec, Opt):
        if value is None and spec.default is None:
            return None
        return validate(value, spec.type, path)
    if isinstance(spec, Nullable):
        return None if value is None else validate(value, spec.type, path)
    if spec is int:
        if type(value) is not int:
            raise SchemaError(f"{path or 'value'}: expected int, got {type(value).__name__}")
        if not INT64_MIN <= value <= INT64_MAX:
            raise SchemaError(f"{path or 'value'}: integer out of int64 range")
        return value
    if spec is str:
        if type(value) is not str:
            raise SchemaError(f"{path or 'value'}: expected str, got {type(value).__name__}")
        return value
    if spec is bytes:
        if type(value) is not bytes:
            raise SchemaError(f"{path or 'value'}: expected bytes, got {type(value).__name__}")
        return value
    if spec is bool:
        if type(value) is not bool:
            raise SchemaError(f"{path or 'value'}: expected bool, got {type(value).__name__}")
        return value
    if spec is Any:
        return value
    if isinstance(spec, MapOf):
        if type(value) is not dict:
            raise SchemaError(f"{path or 'value'}: expected map, got {type(value).__name__}")
        return {validate(k, spec.key, f"{path}<key>"): validate(v, spec.value, f"{path}[{k!r}]")
                for k, v in value.items()}
    if isinstance(spec, list):
        if type(value) is not list:
            raise SchemaError(f"{path or 'value'}: expected list, got {type(value).__name__}")
        item = spec[0]
        return [validate(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(spec, dict):
        if type(value) is not dict:
            raise SchemaError(f"{path or 'value'}: expected map, got {type(value).__name__}")
        out: dict[str, Any] = {}
        for name, ftype in spec.items():
            v = value.get(name, _MISSING)
            fpath = f"{path}.{name}" if path else name
            if v is _MISSING:
                if isinstance(ftype, Opt):
                    out[name] = ftype.default
                    continue
                if isinstance(ftype, Nullable):
                    out[name] = None
                    continue
                raise SchemaError(f"{fpath}: missing")
            out[name] = validate(v, ftype, fpath)
        return out
    raise TypeError(f"bad spec at {path}: {spec!r}")
