"""FrameDecoder: whatever way the stream is cut into reads, the same frames come out, a frame that
lies in one read is not copied, and an oversized length is refused before its bytes arrive."""
from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.protocol.framing import FrameDecoder, FramingError, encode_frame, frame_parts

values = st.one_of(st.integers(-2**63, 2**63 - 1), st.binary(max_size=300), st.text(max_size=20))
messages = st.lists(st.dictionaries(st.text(max_size=5), values, max_size=4), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(messages, st.lists(st.integers(1, 400), min_size=1, max_size=40))
def test_any_cut_of_the_stream_gives_the_frames_in_order(msgs: list[dict], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(m) for m in msgs)
    fed, popped = FrameDecoder(), FrameDecoder()
    got_fed: list[dict] = []
    got_popped: list[dict] = []
    pos, i = 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        i += 1
        piece = stream[pos:pos + step]
        pos += step
        got_fed += fed.feed(piece)
        popped.push(piece)
        while (body := popped.pop_raw()) is not None:
            got_popped.append(msgpack.unpackb(body))
    assert got_fed == msgs and got_popped == msgs
    assert fed.buffered == 0 and popped.buffered == 0


def test_a_frame_inside_one_read_is_a_view_of_it_and_one_across_reads_is_joined_once() -> None:
    d = FrameDecoder()
    one = encode_frame({"a": b"x" * 1000})
    d.push(one + one[:10])
    body = d.pop_raw()
    assert isinstance(body, memoryview) and body.obj is not None and bytes(body) == one[4:]
    assert d.pop_raw() is None and d.buffered == 10
    d.push(one[10:500])
    assert d.pop_raw() is None
    d.push(one[500:])
    assert bytes(d.pop_raw()) == one[4:] and d.buffered == 0


def test_an_oversized_length_is_refused_before_its_body_arrives() -> None:
    d = FrameDecoder(max_frame_bytes=100)
    d.push((101).to_bytes(4, "big") + b"x")
    with pytest.raises(FramingError, match="exceeds socket.request.max.bytes=100"):
        d.pop_raw()
    d = FrameDecoder(max_frame_bytes=100)
    d.push((101).to_bytes(4, "big")[:2])                 # the length itself split across reads
    assert d.pop_raw() is None
    d.push((101).to_bytes(4, "big")[2:])
    with pytest.raises(FramingError):
        d.pop_raw()


def test_frame_parts_is_encode_frame_in_two_pieces() -> None:
    m = {"id": 7, "records": b"r" * 5000}
    assert b"".join(frame_parts(m)) == encode_frame(m)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 300_000), min_size=1, max_size=4))
def test_a_response_with_large_batches_is_framed_around_them_byte_for_byte(sizes: list[int]) -> None:
    """A Fetch response carrying 64 KiB or more of batches goes out as the msgpack around each
    batch and the batch object itself: the same bytes as encode_frame, and the batch not copied."""
    batches = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    m = {"error": 0, "session_id": 9, "topics": [{"topic": "t", "partitions": [
        {"partition": i, "high_watermark": 5, "diverging_epoch": None, "records": b} for i, b in enumerate(batches)]}],
        "id": 3}
    parts = frame_parts(m)
    assert b"".join(parts) == encode_frame(m)
    if sum(sizes) >= 64 * 1024:
        assert all(any(p is b for p in parts) for b in batches if len(b) >= 4096), "each large batch as it is"


def test_framing_around_batches_leaves_no_reference_to_them_once_dropped() -> None:
    """The buffers are freed when the transport drops them, without the cyclic GC (a recursive
    closure held every batch of every response until it ran: 216 MiB on a leader after three
    36 MiB batches)."""
    import gc
    import sys
    batch = b"b" * (1 << 20)
    base = sys.getrefcount(batch)
    gc.disable()
    try:
        parts = frame_parts({"topics": [{"topic": "t", "partitions": [{"partition": 0, "records": batch}]}]})
        assert sys.getrefcount(batch) == base + 1
        del parts
        assert sys.getrefcount(batch) == base
    finally:
        gc.enable()
