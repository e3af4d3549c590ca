"""`minibroker watch --web`: the live picture of the cluster in a browser.

Owns: turning each watch frame (the same `Frame` and event lines the
terminal view draws) into one JSON document, and serving the page
(watch_page.html: vanilla JS drawing SVG, nothing fetched from elsewhere),
the current document (`/state`) and a server-sent event stream (`/events`)
that pushes every new frame. Must not know how frames are made
(client/observe.py) or how they are drawn (the page).
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import click

from minibroker import clock
from minibroker.cli.watch import Watch, shown
from minibroker.client.network import now_ms
from minibroker.client.observe import EventLine, Frame
from minibroker.net.http import HttpServer, Response

MAX_EVENTS = 200


def frame_document(frame: Frame, lines: list[EventLine], all_events: bool, controller: bool) -> dict[str, Any]:
    """A frame as plain JSON values: brokers (with rack and state), partitions, events."""
    leaders: dict[int, int] = {}
    for v in frame.views:
        if v.leader is not None:
            leaders[v.leader] = leaders.get(v.leader, 0) + 1
    return {
        "time_ms": clock.now_ms(),
        "controller": controller,
        "brokers": [{"id": b.node_id, "host": b.address[0], "port": b.address[1], "rack": b.rack,
                     "state": b.state, "detail": b.detail, "process": b.process,
                     "fenced": b.node_id is not None and b.node_id not in frame.registered and b.state == "ok",
                     "leaders": leaders.get(b.node_id or -1, 0)} for b in frame.brokers],
        "partitions": [{"topic": v.topic, "partition": v.partition, "leader": v.leader, "epoch": v.leader_epoch,
                        "isr": list(v.isr), "elr": None if v.elr is None else list(v.elr), "hw": v.hw,
                        "log_start": v.log_start, "note": v.note,
                        "replicas": [{"id": r.broker_id, "leo": r.leo, "lag": r.lag, "in_isr": r.in_isr,
                                      "caught_up": r.caught_up, "stuck": r.stuck,
                                      "throttled": r.throttled} for r in v.replicas]}
                       for v in frame.views],
        "events": [dict(line.event, source=line.source) for line in shown(lines, all_events)[-MAX_EVENTS:]],
    }


class Publisher:
    """Invariant: `document` is the latest frame's JSON; `version` counts frames, and
    every waiter is woken once per new frame."""

    def __init__(self) -> None:
        self.document = b"{}"
        self.version = 0
        self._changed = asyncio.Event()

    def publish(self, doc: dict[str, Any]) -> None:
        self.document = json.dumps(doc, default=str, separators=(",", ":")).encode()
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def stream(self) -> AsyncIterator[bytes]:
        """Every frame from now on, as server-sent events (a comment line keeps idle proxies open)."""
        seen = -1
        yield b"retry: 1000\n\n"
        while True:
            if self.version != seen:
                seen = self.version
                yield b"data: " + self.document + b"\n\n"
            waiter = self._changed
            try:
                await asyncio.wait_for(waiter.wait(), 15)
            except TimeoutError:
                yield b": idle\n\n"


def page() -> bytes:
    return resources.files("minibroker.cli").joinpath("watch_page.html").read_bytes()


async def serve_web(w: Watch, interval_ms: int, all_events: bool, host: str, port: int) -> None:
    pub = Publisher()
    html = page()

    async def index() -> Response:
        return Response(200, html, "text/html; charset=utf-8")

    async def state() -> Response:
        return Response(200, pub.document, "application/json")

    async def events() -> AsyncIterator[bytes]:
        return pub.stream()

    server = HttpServer({"/": index, "/state": state, "/events": events})
    h, p = await server.start(host, port)
    click.echo(f"minibroker watch --web: open http://{h}:{p}/  (Ctrl-C to stop)", err=False)
    w.observer.start(interval_ms)
    try:
        while True:
            w.follow()
            frame = w.observer.frame(now_ms())
            pub.publish(frame_document(frame, list(w.follower.lines), all_events, w.controller is not None))
            await asyncio.sleep(interval_ms / 1000)
    finally:
        await server.close()
        await w.close()
        await w.admin.close()
