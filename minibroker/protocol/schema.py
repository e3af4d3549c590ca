"""Strict validation of decoded messages against declarative field specs.

A spec is a dict of field name -> type, where a type is `int`, `str`,
`bytes`, `bool`, a nested spec dict, `MapOf(k, v)`, a one-element list `[type]` (a list of
that type), or `Opt(type, default)` / `Nullable(type)`. `validate` returns a
new dict holding only the spec's fields (unknown fields are ignored, as
Kafka ignores tagged fields it does not know), with defaults filled in, or
raises `SchemaError` naming the path of the first bad field. `validator(spec)`
is `validate` against one spec as a function of the value, bound to the
spec's compiled validator once (for callers on the per-request path).

Three validators agree on every value (tests/protocol/test_schema_native.py):
minibroker._speedups.check walks a spec compiled to nested tuples (`_node`)
in one C call, for messages small enough to decode on the event loop; the
Python closures of `_compile` are the fallback without the C extension and
the validator of large messages on the decoder thread (the interpreter hands
the GIL back between its steps); `_interpret` runs only after a failure, to
name the bad field.
"""
from __future__ import annotations

from collections.abc import Callable
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


class _Fail(Exception):
    pass


_check: Any = None
try:
    from minibroker._speedups import Invalid as _Invalid
    from minibroker._speedups import check as _check
    from minibroker._speedups import check_spec as _check_spec
except ImportError:  # pragma: no cover - the C extension was not built
    _Invalid = _Fail  # type: ignore[assignment,misc]

# Invariant: id(spec) -> (spec, compiled Python validator, C node or None); the spec is kept so its id stays unique.
_COMPILED: dict[int, tuple[Any, Any, Any]] = {}


def _entry(spec: Any) -> tuple[Any, Any, Any]:
    """`spec`'s compiled validators, made on first use."""
    entry = _COMPILED.get(id(spec))
    if entry is None or entry[0] is not spec:
        node = None
        if _check is not None:
            node = _node(spec)
            _check_spec(node)
        entry = (spec, _compile(spec), node)
        _COMPILED[id(spec)] = entry
    return entry


def validate(value: Any, spec: Any, path: str = "", *, native: bool = True) -> Any:
    """Validate `value` against `spec` (see the module docstring).

    Runs a validator compiled once per spec (in C with `native`, where it was
    built); only on failure does it re-walk the value with the interpreting
    validator to name the bad field's path. Pass native=False for a value too
    big to validate without handing the GIL back.
    """
    entry = _COMPILED.get(id(spec))
    if entry is None or entry[0] is not spec:
        entry = _entry(spec)
    try:
        if native and entry[2] is not None:
            return _check(entry[2], value)
        return entry[1](value)
    except (_Fail, _Invalid):
        _interpret(value, spec, path)
        raise SchemaError(f"{path or 'value'}: invalid") from None


def validator(spec: Any) -> Callable[[Any], Any]:
    """`validate(value, spec)` as a function of the value alone, for a caller that validates against
    one spec many times (the request server: each request's header and body): the spec's compiled
    validator (in C where built) is bound once, so a call looks nothing up. The same result, and the
    same SchemaError on a bad value."""
    _, compiled, node = _entry(spec)
    if node is None:
        def run_compiled(value: Any) -> Any:
            try:
                return compiled(value)
            except _Fail:
                _interpret(value, spec)
                raise SchemaError("value: invalid") from None
        return run_compiled
    check = _check

    def run_native(value: Any) -> Any:
        try:
            return check(node, value)
        except _Invalid:
            _interpret(value, spec)
            raise SchemaError("value: invalid") from None
    return run_native


# The node kinds of minibroker._speedups.check.
_INT, _EXACT, _ANY, _MAP, _LIST, _DICT, _NONE_OR = range(7)


def _node(spec: Any) -> tuple[Any, ...]:
    """`spec` as the nested tuples minibroker._speedups.check walks; the same rules as `_compile`."""
    if isinstance(spec, Opt):
        inner = _node(spec.type)
        return (_NONE_OR, inner) if spec.default is None else inner
    if isinstance(spec, Nullable):
        return (_NONE_OR, _node(spec.type))
    if spec is int:
        return (_INT,)
    if spec in (str, bytes, bool):
        return (_EXACT, spec)
    if spec is Any:
        return (_ANY,)
    if isinstance(spec, MapOf):
        return (_MAP, _node(spec.key), _node(spec.value))
    if isinstance(spec, list):
        return (_LIST, _node(spec[0]))
    if isinstance(spec, dict):
        return (_DICT, tuple((name, _node(ftype), not isinstance(ftype, (Opt, Nullable)),
                              ftype.default if isinstance(ftype, Opt) else None) for name, ftype in spec.items()))
    raise TypeError(f"bad spec: {spec!r}")


def _compile(spec: Any) -> Any:
    if isinstance(spec, Opt):
        inner = _compile(spec.type)
        if spec.default is None:
            return lambda v: None if v is None else inner(v)
        return inner
    if isinstance(spec, Nullable):
        inner = _compile(spec.type)
        return lambda v: None if v is None else inner(v)
    if spec is int:
        def check_int(v: Any) -> Any:
            if type(v) is not int or not INT64_MIN <= v <= INT64_MAX:
                raise _Fail
            return v
        return check_int
    if spec in (str, bytes, bool):
        t = spec

        def check_type(v: Any) -> Any:
            if type(v) is not t:
                raise _Fail
            return v
        return check_type
    if spec is Any:
        return lambda v: v
    if isinstance(spec, MapOf):
        kf, vf = _compile(spec.key), _compile(spec.value)

        def check_map(v: Any) -> Any:
            if type(v) is not dict:
                raise _Fail
            return {kf(k): vf(x) for k, x in v.items()}
        return check_map
    if isinstance(spec, list):
        item = _compile(spec[0])

        def check_list(v: Any) -> Any:
            if type(v) is not list:
                raise _Fail
            return [item(x) for x in v]
        return check_list
    if isinstance(spec, dict):
        fields = []
        for name, ftype in spec.items():
            required = not isinstance(ftype, (Opt, Nullable))
            default = ftype.default if isinstance(ftype, Opt) else None
            fields.append((name, _compile(ftype), required, default))

        def check_dict(v: Any) -> Any:
            if type(v) is not dict:
                raise _Fail
            out = {}
            get = v.get
            for name, fn, required, default in fields:
                x = get(name, _MISSING)
                if x is _MISSING:
                    if required:
                        raise _Fail
                    out[name] = default
                else:
                    out[name] = fn(x)
            return out
        return check_dict
    raise TypeError(f"bad spec: {spec!r}")


def _interpret(value: Any, spec: Any, path: str = "") -> Any:
    if isinstance(spec, Opt):
        if value is None and spec.default is None:
            return None
        return _interpret(value, spec.type, path)
    if isinstance(spec, Nullable):
        return None if value is None else _interpret(value, spec.type, path)
    if spec is int:
        if type(value) is not int:
            raise SchemaError(f"{path or 'value'}: expected int, got {type(value).__name__}")
        if not INT64_MIN <= value <= INT64_MAX:
            raise SchemaError(f"{path or 'value'}: integer out of int64 range")
        return value
    if spec is str or spec is bytes or spec is bool:
        if type(value) is not spec:
            raise SchemaError(f"{path or 'value'}: expected {spec.__name__}, got {type(value).__name__}")
        return value
    if spec is Any:
        return value
    if isinstance(spec, MapOf):
        if type(value) is not dict:
            raise SchemaError(f"{path or 'value'}: expected map, got {type(value).__name__}")
        return {_interpret(k, spec.key, f"{path}<key>"): _interpret(v, spec.value, f"{path}[{k!r}]")
                for k, v in value.items()}
    if isinstance(spec, list):
        if type(value) is not list:
            raise SchemaError(f"{path or 'value'}: expected list, got {type(value).__name__}")
        item = spec[0]
        return [_interpret(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
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
            out[name] = _interpret(v, ftype, fpath)
        return out
    raise TypeError(f"bad spec at {path}: {spec!r}")
