"""The simulated network: asyncio transports between simulated hosts.

Owns: listeners by (host, port), connections as pairs of one-way pipes with
in-order delivery and a latency per pipe per 50 ms of simulated time (a
stable hash of the seed, the pipe and the time, so neither the order in
which one step writes to several pipes nor how a sender chunks its writes
can change when anything arrives), and the faults the network
can suffer: a cut path (one way: what is sent is held, as TCP retransmits,
and arrives once the path heals; connection attempts across a cut hang until
the caller's timeout), connection resets, and what the kernel does when a
process dies (its listeners go, its peers get a reset). A paused process's
connections keep buffering; its callbacks are parked by the loop.

Must not know: what travels on the connections, brokers, or clients.
"""
from __future__ import annotations

import asyncio
import random
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

from minibroker.sim.loop import SimLoop, SimProcess, current_process

_DATA, _EOF, _RST = 0, 1, 2
_BUCKETS_PER_S = 20
_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: a stable 64-bit hash of an int (Python's hash() of str is salted)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class _FakeSocket:
    def __init__(self, addr: tuple[str, int]) -> None:
        self._addr = addr

    def getsockname(self) -> tuple[str, int]:
        return self._addr


class SimServer:
    """A listening address. Invariant: registered in the network while `serving`."""

    def __init__(self, net: SimNetwork, proc: SimProcess | None, factory: Callable[[], asyncio.BaseProtocol],
                 addr: tuple[str, int]) -> None:
        self.net = net
        self.proc = proc
        self.factory = factory
        self.addr = addr
        self.sockets = [_FakeSocket(addr)]
        self.serving = True

    def close(self) -> None:
        if self.serving:
            self.serving = False
            self.net._listeners.pop(self.addr, None)

    def is_serving(self) -> bool:
        return self.serving

    async def wait_closed(self) -> None:
        return None

    async def start_serving(self) -> None:
        return None


class _Pipe:
    """One direction of a connection. Invariant: `queue` is in due-time order."""

    def __init__(self, net: SimNetwork, src: str, dst: SimTransport, serial: int) -> None:
        self.net = net
        self.serial = serial
        self._bucket = -1
        self._latency = 0.0
        self.src = src
        self.dst = dst
        self.queue: deque[tuple[float, int, bytes]] = deque()
        self.last_due = 0.0
        self.pump_at: float | None = None

    def send(self, kind: int, data: bytes = b"") -> None:
        loop = self.net.loop
        now = loop.time()
        bucket = int(now * _BUCKETS_PER_S)
        if bucket != self._bucket:        # one latency per pipe per bucket: how the sender chunks its
            self._bucket = bucket         # writes, or in which order it writes to several pipes, cannot
            self._latency = self.net.latency_for(self.serial, bucket)  # change when anything arrives
        due = max(now + self._latency, self.last_due + 1e-7)
        self.last_due = due
        self.queue.append((due, kind, data))
        self._schedule()

    def _schedule(self) -> None:
        if not self.queue:
            return
        due = self.queue[0][0]
        if self.pump_at is not None and self.pump_at <= due:
            return
        self.pump_at = due
        ctx = self.dst.proc.context if self.dst.proc is not None else None
        self.net.loop.call_at(due, self._pump, due, context=ctx)

    def _pump(self, scheduled_for: float) -> None:
        if self.pump_at != scheduled_for:
            return
        self.pump_at = None
        net, dst = self.net, self.dst
        now = net.loop.time()
        while self.queue and self.queue[0][0] <= now:
            if net.is_cut(self.src, dst.host):
                net.held.add(self)         # resumed by heal()
                return
            if dst.reading_paused:
                return                     # resumed by resume_reading()
            _, kind, data = self.queue.popleft()
            if dst.lost:
                self.queue.clear()
                if kind == _DATA and dst.out is not None and dst.peer is not None and not dst.peer.lost:
                    dst.out.send(_RST)     # the kernel answers a segment for a closed socket with a reset
                return
            if kind == _DATA:
                net.delivered += 1
                if dst.server_side:
                    net.requests += 1
                    path = (self.src, dst.host)
                    net.requests_by[path] = net.requests_by.get(path, 0) + 1
                dst.protocol.data_received(data)  # type: ignore[union-attr]
            else:
                dst._lose(ConnectionResetError("connection reset by peer") if kind == _RST else None)
                self.queue.clear()
                return
        self._schedule()

    def kick(self) -> None:
        self.pump_at = None
        self._schedule()


class SimTransport(asyncio.Transport):
    """One end of a simulated connection. Invariant: once `lost`, the
    protocol has had connection_lost and nothing more is delivered."""

    def __init__(self, net: SimNetwork, proc: SimProcess | None, host: str, sockname: tuple[str, int],
                 peername: tuple[str, int], server_side: bool) -> None:
        super().__init__()
        self.net = net
        self.proc = proc
        self.host = host
        self.sockname = sockname
        self.peername = peername
        self.server_side = server_side
        self.protocol: asyncio.BaseProtocol | None = None
        self.out: _Pipe | None = None            # towards the peer
        self.peer: SimTransport | None = None
        self.closing = False
        self.lost = False
        self.reading_paused = False
        self.serial = 0
        self.write_limits = (64 * 1024, 16 * 1024)   # recorded only: writes leave at once, nothing buffers

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peername, "sockname": self.sockname}.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.write_limits = (high or 64 * 1024, low if low is not None else (high or 64 * 1024) // 4)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.write_limits

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing or self.out is None:
            return
        self.out.send(_DATA, bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        if self.reading_paused:
            self.reading_paused = False
            if self.peer is not None and self.peer.out is not None:
                self.peer.out.kick()

    def is_reading(self) -> bool:
        return not self.reading_paused

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self.out is not None:
            self.out.send(_EOF)
        self._lose_soon(None)

    def abort(self) -> None:
        if self.closing and self.lost:
            return
        self.closing = True
        if self.out is not None:
            self.out.queue.clear()
            self.out.send(_RST)
        self._lose_soon(None)

    def _lose_soon(self, exc: Exception | None) -> None:
        ctx = self.proc.context if self.proc is not None else None
        self.net.loop.call_soon(self._lose, exc, context=ctx)

    def _lose(self, exc: Exception | None) -> None:
        if self.lost:
            return
        self.lost = True
        self.closing = True
        self.net._transports.pop(id(self), None)
        if self.protocol is not None:
            self.protocol.connection_lost(exc)

    def die(self) -> None:
        """The owning process died: the kernel resets the connection; nothing runs on this side."""
        if self.lost:
            return
        self.lost = True
        self.closing = True
        self.net._transports.pop(id(self), None)
        if self.out is not None:
            self.out.queue.clear()
            self.out.send(_RST)


class SimNetwork:
    """Invariant: `_cut` holds the (from host, to host) pairs that drop packets now."""

    def __init__(self, loop: SimLoop, seed: int, *, min_latency_s: float = 0.0002,
                 max_latency_s: float = 0.002) -> None:
        self.loop = loop
        loop.network = self
        self.seed = seed
        self.rng = random.Random(seed)
        self.min_latency_s = min_latency_s
        self.max_latency_s = max_latency_s
        self._listeners: dict[tuple[str, int], SimServer] = {}
        self._transports: dict[int, SimTransport] = {}
        self._cut: set[tuple[str, str]] = set()
        self.held: set[_Pipe] = set()      # pipes stopped by a cut (live or not), kicked on heal
        self._ports: dict[str, int] = {}
        self.delivered = 0
        self.requests = 0
        self._attempts: dict[str, int] = {}
        self.requests_by: dict[tuple[str, str], int] = {}      # (client host, server host) -> requests
        self.connections = 0

    def latency_for(self, key: int, bucket: int) -> float:
        """A latency that depends only on the seed, `key` and the time bucket."""
        x = _mix(_mix(self.seed * 0x9E3779B97F4A7C15 + key) + bucket)
        return self.min_latency_s + (self.max_latency_s - self.min_latency_s) * (x / 2.0 ** 64)

    # -- faults -----------------------------------------------------------------
    def is_cut(self, src: str, dst: str) -> bool:
        return (src, dst) in self._cut

    def cut(self, src: str, dst: str) -> None:
        self._cut.add((src, dst))

    def heal(self, src: str | None = None, dst: str | None = None) -> None:
        """Heal one path, or every path when called without arguments."""
        if src is None:
            self._cut.clear()
        else:
            self._cut.discard((src, dst))  # type: ignore[arg-type]
        held = sorted(self.held, key=lambda p: p.serial)
        self.held.clear()
        for t in self._ordered_transports():
            if t.out is not None:
                t.out.kick()
        for pipe in held:                 # pipes of closed sockets too: a reset held by the cut
            pipe.kick()

    def _ordered_transports(self) -> list[SimTransport]:
        return [self._transports[k] for k in sorted(self._transports, key=lambda k: self._transports[k].serial)]

    def reset_one(self) -> str | None:
        """Reset one open connection, chosen by the seeded RNG; returns its description."""
        ts = [t for t in self._ordered_transports() if not t.server_side and not t.closing]
        if not ts:
            return None
        t = ts[self.rng.randrange(len(ts))]
        t.abort()
        return f"{t.host}:{t.sockname[1]}->{t.peername[0]}:{t.peername[1]}"

    def process_died(self, proc: SimProcess) -> None:
        for addr in sorted(a for a, s in self._listeners.items() if s.proc is proc):
            self._listeners.pop(addr).serving = False
        for t in self._ordered_transports():
            if t.proc is proc:
                t.die()

    # -- the socket seams -------------------------------------------------------
    def listen(self, factory: Callable[[], asyncio.BaseProtocol], host: Any, port: int | None) -> SimServer:
        proc = current_process()
        if isinstance(host, (list, tuple)):
            host = host[0]
        host = str(host or (proc.host if proc else "harness"))
        if host in ("0.0.0.0", "::", ""):
            host = proc.host if proc else "harness"
        port = int(port or 0)
        if port == 0:
            port = self._ports.get(host, 40000) + 1
            self._ports[host] = port
        if (host, port) in self._listeners:
            raise OSError(98, f"address already in use: {host}:{port}")
        srv = SimServer(self, proc, factory, (host, port))
        self._listeners[(host, port)] = srv
        return srv

    async def connect(self, factory: Callable[[], asyncio.BaseProtocol], host: str | None,
                      port: int | None) -> tuple[SimTransport, asyncio.BaseProtocol]:
        proc = current_process()
        src = proc.host if proc is not None else "harness"
        dst = str(host)
        loop = self.loop
        if self.is_cut(src, dst) or self.is_cut(dst, src):
            await loop.create_future()          # the SYN is dropped: the caller's timeout ends this
        route = f"{src}>{dst}:{port}"
        n = self._attempts[route] = self._attempts.get(route, 0) + 1
        key = zlib.crc32(route.encode()) * 65_537 + n
        await asyncio.sleep(2 * self.latency_for(key, int(loop.time() * _BUCKETS_PER_S)))
        srv = self._listeners.get((dst, int(port or 0)))
        if self.is_cut(src, dst) or self.is_cut(dst, src):
            await loop.create_future()
        if srv is None or (srv.proc is not None and not srv.proc.alive):
            raise ConnectionRefusedError(111, f"connection refused: {dst}:{port}")
        self.connections += 1
        eport = self._ports.get(src, 50000) + 1
        self._ports[src] = eport
        client = SimTransport(self, proc, src, (src, eport), (dst, srv.addr[1]), server_side=False)
        server = SimTransport(self, srv.proc, dst, srv.addr, (src, eport), server_side=True)
        client.serial = self.connections * 2
        server.serial = self.connections * 2 + 1
        client.peer, server.peer = server, client
        client.out = _Pipe(self, src, server, client.serial)
        server.out = _Pipe(self, dst, client, server.serial)
        self._transports[id(client)] = client
        self._transports[id(server)] = server
        protocol = factory()
        client.protocol = protocol
        protocol.connection_made(client)

        def accept() -> None:
            if not srv.serving:
                server.die()
                return
            sp = srv.factory()
            server.protocol = sp
            sp.connection_made(server)

        loop.call_soon(accept, context=srv.proc.context if srv.proc is not None else None)
        return client, protocol
