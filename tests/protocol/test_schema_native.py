"""The C validator (minibroker._speedups.check, validate's default) and the
Python one (validate(..., native=False), the decoder thread's and the
fallback without the extension) agree on every value: the same result, field
for field and in the same order, or the same SchemaError. Random specs and
random values, some built to fit their spec and then broken in one place."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.protocol.api import HEADER, REQUESTS
from minibroker.protocol.schema import INT64_MAX, INT64_MIN, MapOf, Nullable, Opt, SchemaError, _node, validate

speedups = pytest.importorskip("minibroker._speedups")

NAMES = ["a", "b", "topics", "partition", "records"]

specs = st.recursive(
    st.sampled_from([int, str, bytes, bool, Any]),
    lambda inner: st.one_of(
        inner.map(lambda t: [t]),
        st.builds(MapOf, st.sampled_from([int, str]), inner),
        st.builds(Opt, inner, st.one_of(st.none(), st.integers(-3, 3), st.just("d"))),
        st.builds(Nullable, inner),
        st.dictionaries(st.sampled_from(NAMES), inner, max_size=4),
    ),
    max_leaves=12,
)

ints = st.one_of(st.integers(-5, 5), st.integers(INT64_MIN - 2, INT64_MIN + 2),
                 st.integers(INT64_MAX - 2, INT64_MAX + 2), st.integers(-(2 ** 70), 2 ** 70))
leaves = st.one_of(st.none(), st.booleans(), ints, st.text(max_size=3), st.binary(max_size=3),
                   st.floats(allow_nan=False))
anything = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(NAMES), st.integers(-2, 2)), inner, max_size=4)),
    max_leaves=16,
)


def fitting(draw: Any, spec: Any, depth: int = 0) -> Any:
    """A value that fits `spec`, except where a draw decides to break it."""
    if draw(st.integers(0, 30)) == 0:
        return draw(anything)
    if isinstance(spec, Opt):
        return None if spec.default is None and draw(st.booleans()) else fitting(draw, spec.type, depth)
    if isinstance(spec, Nullable):
        return None if draw(st.booleans()) else fitting(draw, spec.type, depth)
    if spec is int:
        return draw(ints)
    if spec is str:
        return draw(st.text(max_size=3))
    if spec is bytes:
        return draw(st.binary(max_size=3))
    if spec is bool:
        return draw(st.booleans())
    if spec is Any:
        return draw(anything)
    if isinstance(spec, MapOf):
        keys = st.integers(-3, 3) if spec.key is int else st.text(max_size=2)
        return {draw(keys): fitting(draw, spec.value, depth + 1) for _ in range(draw(st.integers(0, 3)))}
    if isinstance(spec, list):
        return [fitting(draw, spec[0], depth + 1) for _ in range(draw(st.integers(0, 3)))]
    out = {}
    for name, ftype in spec.items():
        if draw(st.integers(0, 8)):            # a field now and then left out
            out[name] = fitting(draw, ftype, depth + 1)
    if draw(st.integers(0, 4)) == 0:
        out["extra"] = draw(anything)          # unknown fields are ignored
    return out


def outcome(value: Any, spec: Any, native: bool) -> tuple[str, Any]:
    try:
        return "ok", validate(value, spec, native=native)
    except SchemaError as exc:
        return "error", str(exc)


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def agree(value: Any, spec: Any) -> None:
    c, py = outcome(value, spec, True), outcome(value, spec, False)
    assert c[0] == py[0] and same(c[1], py[1]), (spec, value, c, py)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, data=st.data())
def test_random_specs_and_values_get_the_same_answer_from_both_validators(spec: Any, data: Any) -> None:
    agree(data.draw(st.composite(lambda d: fitting(d, spec))()), spec)
    agree(data.draw(anything), spec)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_request_spec_gets_the_same_answer_from_both_validators(data: Any) -> None:
    spec = HEADER if data.draw(st.integers(0, 10)) == 0 else REQUESTS[data.draw(st.sampled_from(sorted(REQUESTS)))]
    agree(data.draw(st.composite(lambda d: fitting(d, spec))()), spec)


def test_a_malformed_node_is_refused_when_compiled():
    for bad in [(), (99,), (0, 1), (1, "str"), (5, ((b"name", (0,), True, None),)), (4,), [0]]:
        with pytest.raises(TypeError):
            speedups.check_spec(bad)
    for spec in list(REQUESTS.values()) + [HEADER]:
        speedups.check_spec(_node(spec))


def test_the_c_validator_fails_with_invalid_and_never_with_a_partial_result():
    node = _node({"a": [int], "b": str})
    with pytest.raises(speedups.Invalid):
        speedups.check(node, {"a": [1, 2, 2 ** 63], "b": "x"})
    assert speedups.check(node, {"a": [1, -(2 ** 63)], "b": "x", "c": 1}) == {"a": [1, -(2 ** 63)], "b": "x"}
