"""Serving metrics: `GET /metrics` in Prometheus' text format, on the process's event loop.

Owns: the metrics listener (`metrics.listener`, HOST:PORT) and turning
`Family` lists into prometheus-client metric families at each scrape.
Scrapes run on the event loop itself, so they read the broker's or the
controller's in-memory state between two events, never while it changes
(no locks, no thread sees a half-applied update); a scrape is one pass over
the hosted partitions. Must not know what a metric means (`families` does).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from minibroker.config import ConfigError, parse_hostport
from minibroker.metrics.families import Family
from minibroker.net.http import HttpServer, Response

log = logging.getLogger("minibroker.metrics")


class _FamiliesCollector(Collector):
    def __init__(self, collect: Callable[[], list[Family]]) -> None:
        self._collect = collect

    def collect(self) -> Iterator[Metric]:
        for f in self._collect():
            names = [k for k, _ in f.samples[0][0]] if f.samples else []
            m: GaugeMetricFamily | CounterMetricFamily
            if f.kind == "counter":
                m = CounterMetricFamily(f.name, f.help, labels=names)
            else:
                m = GaugeMetricFamily(f.name, f.help, labels=names)
            for labels, value in f.samples:
                m.add_metric([v for _, v in labels], value)
            yield m


def render(collect: Callable[[], list[Family]]) -> bytes:
    """The text exposition of what `collect` returns now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_FamiliesCollector(collect))
    return generate_latest(registry)


class MetricsServer:
    """Invariant: `address` is the bound (host, port) once `start` returned."""

    def __init__(self, collect: Callable[[], list[Family]]) -> None:
        self.collect = collect
        self.http = HttpServer({"/metrics": self._metrics, "/": self._index})
        self.address: tuple[str, int] | None = None

    async def start(self, spec: str) -> tuple[str, int]:
        host, port = parse_metrics_listener(spec)
        self.address = await self.http.start(host, port)
        log.info("metrics on http://%s:%d/metrics", *self.address)
        return self.address

    async def close(self) -> None:
        await self.http.close()

    async def _metrics(self) -> Response:
        return Response(200, render(self.collect), CONTENT_TYPE_LATEST)

    async def _index(self) -> Response:
        return Response(200, b"minibroker metrics: GET /metrics\n")


def parse_metrics_listener(spec: str) -> tuple[str, int]:
    """`metrics.listener`: HOST:PORT (port 0 = any free port)."""
    host, port = parse_hostport(spec.strip().removeprefix("http://"), -1)
    if port < 0 or not host:
        raise ConfigError(f"metrics.listener: expected HOST:PORT, got {spec!r}")
    return host, port
