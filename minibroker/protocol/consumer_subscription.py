"""Kafka's consumer embedded protocol: the bytes both sides of a "consumer" group read.

Owns: the ConsumerProtocolSubscription prefix every version shares (version,
topics, user data), its reader, and the protocol type's name. The client side
(minibroker.client.consumer_protocol: assignments, the range assignor) and the
group coordinator (which topics a group's members subscribe to, for
OffsetDelete) both read subscriptions through this module.

Must not know: groups, the network, the client library.
"""
from __future__ import annotations

import struct

PROTOCOL_TYPE = "consumer"
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")


def encode_string(s: str) -> bytes:
    b = s.encode()
    return INT16.pack(len(b)) + b


def encode_subscription(topics: list[str], user_data: bytes = b"") -> bytes:
    return INT16.pack(0) + INT32.pack(len(topics)) + b"".join(encode_string(t) for t in topics) + \
        INT32.pack(len(user_data)) + user_data


class Reader:
    """Reads the embedded protocol's big-endian fields; ValueError on bytes that end too soon."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated consumer protocol bytes")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i16(self) -> int:
        return int(INT16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(INT32.unpack(self.take(4))[0])

    def string(self) -> str:
        return self.take(self.i16()).decode()


def decode_subscription(data: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (any version: later fields are ignored)."""
    r = Reader(data)
    r.i16()
    return [r.string() for _ in range(r.i32())]
