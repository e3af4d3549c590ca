import pytest

from minibroker.protocol.api import REQUESTS, ApiKey
from minibroker.protocol.schema import MapOf, Nullable, Opt, SchemaError, validate


def test_optional_field_with_none_default_accepts_explicit_none():
    assert validate({"a": None}, {"a": Opt([int], None)}) == {"a": None}


def test_optional_field_with_a_default_refuses_explicit_none():
    with pytest.raises(SchemaError, match="a: expected int"):
        validate({"a": None}, {"a": Opt(int, 5)})


def test_bool_is_not_an_int():
    with pytest.raises(SchemaError, match="acks: expected int, got bool"):
        validate({"acks": True, "topics": []}, REQUESTS[ApiKey.PRODUCE])


def test_integer_beyond_int64_is_refused():
    with pytest.raises(SchemaError, match="out of int64"):
        validate(2 ** 64, int)


def test_error_names_the_nested_path():
    body = {"acks": -1, "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": "text"}]}]}
    with pytest.raises(SchemaError, match=r"topics\[0\]\.partitions\[0\]\.records: expected bytes, got str"):
        validate(body, REQUESTS[ApiKey.PRODUCE])


def test_nullable_and_mapof():
    assert validate(None, Nullable([str])) is None
    assert validate({"k": "v"}, MapOf(str, str)) == {"k": "v"}
    with pytest.raises(SchemaError):
        validate({"k": 1}, MapOf(str, str))


def test_unknown_fields_are_dropped_and_defaults_filled():
    out = validate({"topics": None, "extra": 1}, REQUESTS[ApiKey.METADATA])
    assert out == {"topics": None}
