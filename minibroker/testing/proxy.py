"""The fault proxy: forwards every inter-process path of a local cluster and
cuts chosen ones, so a broker can be isolated without root or namespaces.

Owns: one listening socket per `Route`, the live forwarded connections per
route, and the set of blocked (src, dst) pairs. A blocked route refuses
new connections (accepted and reset at once) and its live connections are
aborted when the block starts, so both sides see the path die, as with a
partition that outlasts TCP timeouts. `isolate(n)` blocks every route from
or to node n; `heal(n)` lifts them. A held route keeps its connections but
stops delivering one direction (`requests`: from src to dst, `responses`:
back), buffering the bytes until `release`, as a path that delays packets
without dropping them; new connections on it are held the same way. Holds
act on whole frames (the 4-byte length prefix of our protocol): a hold
with `after` N lets N more frames through on each connection first (on a
new connection the first requests and answers are the SASL exchange, so
`after: minibroker.net.sasl.AUTH_FRAMES` holds everything after
authentication). Holds need frame boundaries, so a TLS cluster refuses them
(blocks and isolation work on any bytes).

Control: newline-delimited JSON on `proxy_control`
  {"op": "isolate"|"heal", "node": N}
  {"op": "block"|"unblock", "src": A, "dst": B}
  {"op": "hold", "src": A, "dst": B, "direction": "requests"|"responses"|"both", "after": N}
  {"op": "release", "src": A, "dst": B}
  {"op": "status"}
each answered with {"ok": true, "blocked": [[src, dst], ...], "held": [[src, dst, direction], ...],
"connections": {route: n}}
or {"ok": false, "error": "..."}.

Run as a process: `python -m minibroker.testing.proxy STATE_FILE`.
"""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import struct
import sys
from typing import Any

from minibroker.testing.layout import ClusterLayout, Route

log = logging.getLogger("minibroker.proxy")

HIGH_WATER = 4 * 1024 * 1024


def _reset(transport: asyncio.BaseTransport) -> None:
    """Close with RST (SO_LINGER 0), as a dropped path looks to the peer."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


class _Side(asyncio.Protocol):
    """One end of a forwarded connection; writes what it reads to its peer."""

    def __init__(self, pipe: _Pipe) -> None:
        self.pipe = pipe
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.early: list[bytes] = []     # read before the peer connected (some loops read before resume)
        self.held: list[bytes] = []      # read while the route holds this side's direction
        # Frame tracking (only boundaries): bytes of a partial length prefix, bytes left in the
        # current frame, and frames still allowed through under a hold (None: not yet set).
        self._prefix = bytearray()
        self._left = 0
        self.quota: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=HIGH_WATER)  # type: ignore[attr-defined]

    @property
    def direction(self) -> str:
        """What this side reads: requests (the src's side) or responses (the dst's side)."""
        return "requests" if self is self.pipe.inbound else "responses"

    def data_received(self, data: bytes) -> None:
        if self.held:
            self.held.append(data)
            return
        n = self._passable(data)
        if n < len(data):
            self.held.append(data[n:])
            data = data[:n]
        if not data:
            return
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.early.append(data)

    def _passable(self, data: bytes) -> int:
        """How many leading bytes of `data` go through now: all, unless this direction is
        held and its frame quota is spent, then up to the next frame boundary."""
        proxy, route = self.pipe.proxy, self.pipe.route
        after = proxy.hold_after(route, self.direction)
        if after is not None and self.quota is None:
            self.quota = after
        i, n = 0, len(data)
        while i < n:
            if self._left == 0 and not self._prefix and after is not None and self.quota is not None \
                    and self.quota <= 0:
                return i
            if self._left == 0:
                take = min(4 - len(self._prefix), n - i)
                self._prefix += data[i:i + take]
                i += take
                if len(self._prefix) < 4:
                    continue
                self._left = int.from_bytes(self._prefix, "big")
                self._prefix.clear()
                if self._left > 0:
                    continue
            else:
                take = min(self._left, n - i)
                i += take
                self._left -= take
                if self._left > 0:
                    continue
            if after is not None and self.quota is not None:
                self.quota -= 1
        return n

    def release(self) -> None:
        """The hold ended: pass what was held (in order) as if it had just arrived."""
        self.quota = None
        chunks, self.held = self.held, []
        for chunk in chunks:
            self.data_received(chunk)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.pipe.close(abort=exc is not None)


class _Pipe:
    def __init__(self, proxy: FaultProxy, route: Route) -> None:
        self.proxy = proxy
        self.route = route
        self.inbound = _Side(self)
        self.outbound = _Side(self)
        self.inbound.peer, self.outbound.peer = self.outbound, self.inbound
        self.closed = False

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: self.outbound, *self.route.target)
        except OSError as exc:
            log.info("%s: target %s:%d unreachable: %s", self.route.name, *self.route.target, exc)
            self.close(abort=True)
            return
        if self.closed:
            if self.outbound.transport is not None:
                self.outbound.transport.abort()
            return
        assert self.inbound.transport is not None and self.outbound.transport is not None
        for chunk in self.inbound.early:
            self.outbound.transport.write(chunk)
        self.inbound.early.clear()
        self.inbound.transport.resume_reading()

    def close(self, abort: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self.proxy.pipes[self.route.name].discard(self)
        for side in (self.inbound, self.outbound):
            if side.transport is not None and not side.transport.is_closing():
                if abort:
                    _reset(side.transport)
                else:
                    side.transport.close()


class _Acceptor(asyncio.Protocol):
    def __init__(self, proxy: FaultProxy, route: Route) -> None:
        self.proxy = proxy
        self.route = route

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.proxy.is_blocked(self.route):
            log.info("%s: refused (path cut)", self.route.name)
            _reset(transport)
            return
        pipe = _Pipe(self.proxy, self.route)
        self.proxy.pipes[self.route.name].add(pipe)
        pipe.inbound.connection_made(transport)
        transport.pause_reading()  # type: ignore[attr-defined]
        self.proxy.spawn(pipe.connect())
        self.pipe = pipe

    def data_received(self, data: bytes) -> None:
        self.pipe.inbound.data_received(data)

    def pause_writing(self) -> None:
        self.pipe.inbound.pause_writing()

    def resume_writing(self) -> None:
        self.pipe.inbound.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        pipe = getattr(self, "pipe", None)
        if pipe is not None:
            pipe.close(abort=exc is not None)


class FaultProxy:
    """Invariant: no pipe in `pipes[r]` exists while route r is blocked; a side
    holds bytes only while its direction of its route is held (or until released)."""

    def __init__(self, routes: tuple[Route, ...] | list[Route], tls: bool = False) -> None:
        self.tls = tls
        self.routes = {r.name: r for r in routes}
        self.pipes: dict[str, set[_Pipe]] = {r.name: set() for r in routes}
        self.blocked: set[tuple[int, int]] = set()
        self.held: dict[tuple[int, int], dict[str, int]] = {}     # (src, dst) -> direction -> after
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Any) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def is_blocked(self, route: Route) -> bool:
        return (route.src, route.dst) in self.blocked

    def hold_after(self, route: Route, direction: str) -> int | None:
        """Frames still let through per connection when `direction` of `route` is held, else None."""
        return self.held.get((route.src, route.dst), {}).get(direction)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for r in self.routes.values():
            srv = await loop.create_server(lambda r=r: _Acceptor(self, r), r.listen[0], r.listen[1],
                                           reuse_address=True)
            self._servers.append(srv)

    def block(self, src: int, dst: int) -> None:
        self.blocked.add((src, dst))
        for r in self.routes.values():
            if (r.src, r.dst) == (src, dst):
                for pipe in list(self.pipes[r.name]):
                    pipe.close(abort=True)
                log.info("%s: cut", r.name)

    def unblock(self, src: int, dst: int) -> None:
        if (src, dst) in self.blocked:
            self.blocked.discard((src, dst))
            log.info("b%s->%s: restored", src, dst)

    def hold(self, src: int, dst: int, direction: str = "both", after: int = 0) -> None:
        if direction not in ("requests", "responses", "both"):
            raise ValueError(f"direction: expected requests, responses or both, got {direction!r}")
        if self.tls:
            raise ValueError("holds count frames, which TLS hides: not available on a --tls cluster")
        if not any((r.src, r.dst) == (src, dst) for r in self.routes.values()):
            raise ValueError(f"no route {src}->{dst}")
        dirs = {"requests", "responses"} if direction == "both" else {direction}
        for d in dirs:
            self.held.setdefault((src, dst), {})[d] = max(0, after)
        for r in self.routes.values():
            if (r.src, r.dst) == (src, dst):
                for pipe in self.pipes[r.name]:
                    for side in (pipe.inbound, pipe.outbound):
                        if side.direction in dirs:
                            side.quota = None
        log.info("b%s->%s: holding %s after %d frame(s)", src, dst, direction, after)

    def release(self, src: int, dst: int) -> None:
        self.held.pop((src, dst), None)
        for r in self.routes.values():
            if (r.src, r.dst) == (src, dst):
                for pipe in list(self.pipes[r.name]):
                    pipe.inbound.release()
                    pipe.outbound.release()
        log.info("b%s->%s: released", src, dst)

    def _pairs_of(self, node: int) -> list[tuple[int, int]]:
        return sorted({(r.src, r.dst) for r in self.routes.values() if node in (r.src, r.dst)})

    def isolate(self, node: int) -> None:
        pairs = self._pairs_of(node)
        if not pairs:
            raise ValueError(f"no proxied path touches node {node}")
        for src, dst in pairs:
            self.block(src, dst)

    def heal(self, node: int) -> None:
        for src, dst in self._pairs_of(node):
            self.unblock(src, dst)

    def status(self) -> dict[str, Any]:
        return {"ok": True, "blocked": sorted([list(p) for p in self.blocked]),
                "held": sorted([[s, d, x] for (s, d), xs in self.held.items() for x in sorted(xs)]),
                "connections": {name: len(p) for name, p in self.pipes.items()}}

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        try:
            if op == "isolate":
                self.isolate(int(req["node"]))
            elif op == "heal":
                self.heal(int(req["node"]))
            elif op == "block":
                self.block(int(req["src"]), int(req["dst"]))
            elif op == "unblock":
                self.unblock(int(req["src"]), int(req["dst"]))
            elif op == "hold":
                self.hold(int(req["src"]), int(req["dst"]), str(req.get("direction", "both")),
                          int(req.get("after", 0)))
            elif op == "release":
                self.release(int(req["src"]), int(req["dst"]))
            elif op != "status":
                return {"ok": False, "error": f"unknown op {op!r}"}
        except (KeyError, ValueError, TypeError) as exc:
            return {"ok": False, "error": f"bad request {req!r}: {exc}"}
        return self.status()

    async def serve_control(self, host: str, port: int) -> None:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while line := await reader.readline():
                    try:
                        req = json.loads(line)
                        resp = self.handle(req) if isinstance(req, dict) else {"ok": False, "error": "not an object"}
                    except json.JSONDecodeError as exc:
                        resp = {"ok": False, "error": f"not JSON: {exc}"}
                    writer.write(json.dumps(resp).encode() + b"\n")
                    await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()
        self._servers.append(await asyncio.start_server(on_client, host, port, reuse_address=True))

    async def close(self) -> None:
        for s in self._servers:
            s.close()
        for pipes in self.pipes.values():
            for p in list(pipes):
                p.close(abort=True)


async def control(addr: tuple[str, int], req: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
    """Send one control request to a running proxy and return its answer."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(*addr), timeout_s)
    try:
        writer.write(json.dumps(req).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout_s)
    finally:
        writer.close()
    if not line:
        raise ConnectionError(f"fault proxy at {addr[0]}:{addr[1]} closed the control connection")
    return json.loads(line)


async def _main(state_file: str) -> None:
    with open(state_file, encoding="utf-8") as f:
        layout = ClusterLayout.from_dict(json.load(f)["layout"])
    assert layout.proxy_control is not None
    proxy = FaultProxy(layout.routes, tls=layout.tls)
    await proxy.start()
    await proxy.serve_control(*layout.proxy_control)
    log.info("fault proxy: %d routes, control on %s:%d", len(layout.routes), *layout.proxy_control)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await proxy.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m minibroker.testing.proxy STATE_FILE", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop
        uvloop.run(_main(args[0]))
    except ImportError:  # pragma: no cover
        asyncio.run(_main(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
