"""FrameDecoder.feed's lone-frame shortcut (one whole frame, nothing buffered) against its general
path (push, pop_raw, decode_body): the same messages, and the same FramingError for a bad body."""
from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.protocol.framing import FrameDecoder, FramingError, decode_body

leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(allow_nan=False),
                   st.binary(max_size=40), st.text(max_size=10))
values = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.text(max_size=4), inner, max_size=4)),
                      max_leaves=12)


def _general(frame: bytes) -> list[dict]:
    d = FrameDecoder()
    d.push(frame)
    out = []
    while (body := d.pop_raw()) is not None:
        out.append(decode_body(body))
    return out


def _outcome(fn, frame: bytes):  # type: ignore[no-untyped-def]
    try:
        return fn(frame)
    except FramingError as exc:
        return ("FramingError", str(exc))


@settings(max_examples=300, deadline=None)
@given(st.one_of(values, st.dictionaries(st.text(max_size=4), values, max_size=5)), st.binary(max_size=3))
def test_a_lone_frame_decodes_as_the_general_path_decodes_it(value: object, junk: bytes) -> None:
    body = msgpack.packb(value, use_bin_type=True)
    for b in (body, body + junk, body[:-1] if len(body) > 1 else body):
        frame = len(b).to_bytes(4, "big") + b
        assert _outcome(FrameDecoder().feed, frame) == _outcome(_general, frame)


@pytest.mark.parametrize("body", [b"\xc1", b"\x93\x01\x02\x03", b"\x81\xa1k\xd4\x01\x02", b"\x81\x01\x02", b""])
def test_odd_lone_bodies_fail_or_decode_as_the_general_path(body: bytes) -> None:
    frame = len(body).to_bytes(4, "big") + body
    assert _outcome(FrameDecoder().feed, frame) == _outcome(_general, frame)
