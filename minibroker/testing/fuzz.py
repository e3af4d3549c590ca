"""A seeded frame fuzzer for a live broker (the suite's bounded run and bench/fuzz.py).

Owns: generating hostile frames from a seeded `random.Random` (random bytes,
truncated frames, huge length prefixes, bodies that are not maps, deep
nesting, msgpack ext types, and mutated versions of a valid request for every
API key), sending them in bursts on fresh connections (some abandoned
half-way, slowloris style), and counting what came back. A "crash" is an
UNKNOWN_SERVER_ERROR answer or a broker that stops answering. Must not know
how the broker handles any API: it only looks at error codes.
"""
from __future__ import annotations

import asyncio
import copy
import random
import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack

from minibroker.errors import ErrorCode
from minibroker.protocol.api import ApiKey

KINDS = ("mutated", "mutated", "mutated", "mutated", "random", "truncated", "huge_length", "not_map",
         "deep", "ext", "slowloris", "abandoned")

_BATCH = bytes(61) + b"junk"
TEMPLATES: dict[ApiKey, dict[str, Any]] = {
    ApiKey.PRODUCE: {"acks": 1, "timeout_ms": 1000,
                     "topics": [{"topic": "fuzz", "partitions": [{"partition": 0, "records": _BATCH}]}]},
    ApiKey.FETCH: {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [
        {"topic": "fuzz", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]},
    ApiKey.LIST_OFFSETS: {"topics": [{"topic": "fuzz", "partitions": [{"partition": 0, "timestamp": -1}]}]},
    ApiKey.METADATA: {"topics": ["fuzz"]},
    ApiKey.API_VERSIONS: {},
    ApiKey.CREATE_TOPICS: {"topics": [{"topic": "fuzz-new", "num_partitions": 1, "replication_factor": 1}],
                           "validate_only": True},
    ApiKey.SASL_AUTHENTICATE: {"mechanism": "PLAIN", "secret": "not-the-secret"},
    ApiKey.ELECT_LEADERS: {"election_type": 0, "topics": [{"topic": "fuzz", "partitions": [0]}]},
    ApiKey.DESCRIBE_CLUSTER: {},
    ApiKey.INIT_PRODUCER_ID: {},
    ApiKey.REPLICA_STATUS: {"topics": ["fuzz"]},
    ApiKey.EVENTS: {"from_seq": 0, "max_wait_ms": 0, "max_events": 10},
    ApiKey.ALTER_PARTITION: {"broker_id": 1, "broker_epoch": 1, "topics": []},
    ApiKey.METADATA_FETCH: {"from_offset": 0, "max_wait_ms": 0},
}


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    r = rng.randrange(10 if depth < 3 else 6)
    if r == 0:
        return rng.choice([0, -1, 1, 2 ** 31 - 1, -(2 ** 63), 2 ** 64 - 1, rng.randrange(-1000, 1000)])
    if r == 1:
        return rng.random() * 1e9
    if r == 2:
        return "".join(rng.choice("ab._-~\x00é") for _ in range(rng.randrange(0, 30)))
    if r == 3:
        return rng.randbytes(rng.randrange(0, 100))
    if r == 4:
        return None
    if r == 5:
        return rng.random() < 0.5
    if r in (6, 7):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    return {rng.choice(["topic", "partition", "x", "records", "acks"]): _random_value(rng, depth + 1)
            for _ in range(rng.randrange(0, 5))}


def _mutate(rng: random.Random, value: Any) -> Any:
    """One random change somewhere in a copy of `value`."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(sorted(value, key=str))
        out = dict(value)
        r = rng.random()
        if r < 0.2:
            del out[key]
        elif r < 0.5:
            out[key] = _random_value(rng)
        else:
            out[key] = _mutate(rng, value[key])
        return out
    if isinstance(value, list) and value and rng.random() < 0.8:
        out_l = list(value)
        i = rng.randrange(len(out_l))
        if rng.random() < 0.3:
            out_l.extend([out_l[i]] * rng.randrange(1, 50))
        else:
            out_l[i] = _mutate(rng, out_l[i])
        return out_l
    return _random_value(rng)


def mutated_request(rng: random.Random, cid: int) -> bytes:
    api = rng.choice(sorted(TEMPLATES))
    header: dict[str, Any] = {"api": int(api), "v": 0, "id": cid, "client": "fuzz"}
    body: Any = copy.deepcopy(TEMPLATES[api])
    for _ in range(rng.randrange(1, 4)):
        body = _mutate(rng, body)
    if not isinstance(body, dict):
        body = {"x": body}
    if rng.random() < 0.002:         # a bad header closes the connection: rarely, so bursts get answered
        header = _mutate(rng, header)
        if not isinstance(header, dict):
            header = {"api": header}
    msg = {**body, **header}
    if msg.get("api") == int(ApiKey.CREATE_TOPICS):
        msg["validate_only"] = True          # never create topics as a side effect
    if msg.get("api") == int(ApiKey.ELECT_LEADERS):
        msg["election_type"] = 0             # never an unclean election
    if msg.get("api") == int(ApiKey.PRODUCE) and isinstance(msg.get("acks"), int) and msg["acks"] == 0:
        msg["acks"] = 1
    return _frame(msgpack.packb(msg, use_bin_type=True))


def hostile_burst(rng: random.Random, kind: str, n: int) -> tuple[bytes, int]:
    """The bytes of one connection's burst and how many frames they hold."""
    if kind == "mutated":
        return b"".join(mutated_request(rng, i) for i in range(n)), n
    if kind == "random":
        return rng.randbytes(rng.randrange(1, 4096)), 1
    if kind == "truncated":
        whole = mutated_request(rng, 1)
        return whole[:rng.randrange(1, len(whole))], 1
    if kind == "huge_length":
        return struct.pack(">I", rng.choice([2 ** 32 - 1, 2 ** 31, 200 << 20])) + rng.randbytes(100), 1
    if kind == "not_map":
        return _frame(msgpack.packb(_random_value(rng, 3), use_bin_type=True)), 1
    if kind == "deep":
        v: Any = 1
        for _ in range(rng.randrange(100, 5000)):
            v = [v] if rng.random() < 0.5 else {"x": v}
        try:
            body = msgpack.packb({"api": 18, "v": 0, "id": 1, "client": "fuzz", "x": v})
        except ValueError:
            body = b"\x91" * 10_000
        return _frame(body), 1
    if kind == "ext":
        return _frame(msgpack.packb({"api": msgpack.ExtType(rng.randrange(0, 127), rng.randbytes(8)), "id": 1})), 1
    whole = b"".join(mutated_request(rng, i) for i in range(3))
    return whole[:rng.randrange(1, len(whole))], 3     # slowloris / abandoned: a partial tail, then nothing


@dataclass
class FuzzStats:
    frames: int = 0
    connections: int = 0
    responses: int = 0
    crashes: int = 0
    resets: int = 0
    errors: dict[int, int] = field(default_factory=dict)


async def fuzz_connection(host: str, port: int, rng: random.Random, stats: FuzzStats, *,
                          burst: int = 200, read_timeout_s: float = 2.0) -> None:
    """One connection: one burst of one kind; read answers until EOF or quiet."""
    kind = rng.choice(KINDS)
    data, n = hostile_burst(rng, kind, burst)
    r, w = await asyncio.open_connection(host, port)
    stats.connections += 1
    stats.frames += n
    try:
        if kind == "slowloris":
            for i in range(0, len(data), max(1, len(data) // 5)):
                w.write(data[i:i + max(1, len(data) // 5)])
                await asyncio.sleep(0.01)
        else:
            w.write(data)
        if kind == "abandoned":
            return
        buf = b""
        expected = n if kind == "mutated" else 1
        got = 0
        while got < expected:
            try:
                chunk = await asyncio.wait_for(r.read(1 << 16), read_timeout_s)
            except (TimeoutError, OSError):
                break
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 4:
                (length,) = struct.unpack_from(">I", buf)
                if len(buf) < 4 + length:
                    break
                msg = msgpack.unpackb(buf[4:4 + length], raw=False, strict_map_key=False)
                buf = buf[4 + length:]
                stats.responses += 1
                got += 1
                code = msg.get("error", 0) if isinstance(msg, dict) else 0
                if code:
                    stats.errors[code] = stats.errors.get(code, 0) + 1
                if code == int(ErrorCode.UNKNOWN_SERVER_ERROR):
                    stats.crashes += 1
    except OSError:
        stats.resets += 1           # the broker closed a connection it could not resynchronise
    finally:
        w.transport.abort()
