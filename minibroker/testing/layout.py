"""Where every process of a local cluster listens, and the configs that say so.

Pure: addresses, ports, listener names and property maps; no processes,
no sockets (free ports are chosen by the caller and passed in).

Fault injection by proxies (so `isolate` needs no root and no namespaces):
every path between processes that is not a client path goes through the
fault proxy, one listening address per (source, destination) pair:

  broker i -> controller   controller.quorum.bootstrap.servers of broker i
                           points at route "b{i}->ctl"
  broker i -> broker j     broker j has one internal listener per peer,
                           INTERNAL_B{i}, advertised at route "b{i}->b{j}";
                           broker i's inter.broker.listener.name is INTERNAL_B{i},
                           so it dials every peer through its own routes

Clients use each broker's EXTERNAL listener directly: an isolated broker is
still reachable by clients, as a broker cut off from its cluster is in a
real network partition (the interesting case: an isolated leader that
still takes writes). With `proxied=False` brokers share one INTERNAL
listener and dial each other and the controller directly.

Secrets: the configs name the cluster secret's file (`secret_file`, 0600,
written by LocalCluster), never the secret itself. With `tls`, every
listener speaks TLS with the certificates under `tls_dir` (local_ca.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

CONTROLLER_ID = 0
KAFKA_PORT = 9094           # each broker's Kafka-protocol listener, on its own 127.0.0.N
RACKS = ("zone-a", "zone-b", "zone-c", "zone-d", "zone-e", "zone-f")
Addr = tuple[str, int]


@dataclass(frozen=True)
class Route:
    """One proxied path: connections to `listen` are forwarded to `target`
    unless the (src, dst) pair is blocked. Node 0 is the controller."""
    name: str
    src: int
    dst: int
    listen: Addr
    target: Addr


@dataclass(frozen=True)
class BrokerSpec:
    node_id: int
    host: str
    port: int                                   # EXTERNAL (clients)
    rack: str
    internal: dict[str, Addr] = field(default_factory=dict)    # listener name -> bind address
    kafka_port: int | None = None               # KAFKA listener (Kafka's wire protocol, clients)
    metrics: Addr | None = None                 # metrics.listener (GET /metrics)

    @property
    def name(self) -> str:
        return f"broker-{self.node_id}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def kafka_address(self) -> str | None:
        return f"{self.host}:{self.kafka_port}" if self.kafka_port else None


@dataclass(frozen=True)
class ClusterLayout:
    data_dir: str
    controller: Addr
    brokers: tuple[BrokerSpec, ...]
    routes: tuple[Route, ...]
    proxy_control: Addr | None
    secret_file: str
    broker_overrides: dict[str, str] = field(default_factory=dict)
    controller_overrides: dict[str, str] = field(default_factory=dict)
    controller_metrics: Addr | None = None
    tls: bool = False

    @property
    def tls_dir(self) -> str:
        return f"{self.data_dir}/tls"

    @property
    def ca_file(self) -> str:
        return f"{self.tls_dir}/ca.pem"

    @property
    def client_properties_file(self) -> str:
        """Kafka-style client settings for this cluster (--command-config), written with the certificates."""
        return f"{self.tls_dir}/client.properties"

    def hosts(self) -> list[str]:
        """Every address a process of this cluster is dialled at (the server certificate's names)."""
        out = {self.controller[0]} | {b.host for b in self.brokers} | {r.listen[0] for r in self.routes}
        out |= {h for b in self.brokers for h, _ in b.internal.values()}
        return sorted(out)

    def client_properties(self) -> dict[str, str]:
        if not self.tls:
            return {}
        return {"security.protocol": "SSL", "ssl.truststore.location": self.ca_file}

    def _tls_props(self, listeners: list[str]) -> dict[str, str]:
        if not self.tls:
            return {}
        return {
            "listener.security.protocol.map": ",".join(f"{n}:SSL" for n in listeners),
            "ssl.certificate.location": f"{self.tls_dir}/server.pem",
            "ssl.key.location": f"{self.tls_dir}/server.key",
            "ssl.truststore.location": self.ca_file,
        }

    @property
    def proxied(self) -> bool:
        return self.proxy_control is not None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def kafka_bootstrap(self) -> str:
        """The brokers' Kafka-protocol listeners, for Kafka clients ("" for a layout without them)."""
        return ",".join(a for a in (b.kafka_address for b in self.brokers) if a)

    def broker(self, node_id: int) -> BrokerSpec:
        for b in self.brokers:
            if b.node_id == node_id:
                return b
        raise KeyError(f"no broker {node_id} in this cluster (brokers: "
                       f"{', '.join(str(b.node_id) for b in self.brokers)})")

    def route(self, src: int, dst: int) -> Route:
        for r in self.routes:
            if r.src == src and r.dst == dst:
                return r
        raise KeyError(f"no route {src}->{dst}")

    def metrics_urls(self) -> list[tuple[str, str]]:
        """(process name, http://HOST:PORT/metrics) of every process that serves metrics."""
        out = [("controller", self.controller_metrics)] + [(b.name, b.metrics) for b in self.brokers]
        return [(n, f"http://{a[0]}:{a[1]}/metrics") for n, a in out if a is not None]

    def node_dir(self, name: str) -> str:
        return f"{self.data_dir}/{name}"

    # -- configs ------------------------------------------------------------------

    def controller_config(self) -> dict[str, str]:
        props = {
            "node.id": str(CONTROLLER_ID),
            "listeners": f"CONTROLLER://{self.controller[0]}:{self.controller[1]}",
            "metadata.log.dir": f"{self.node_dir('controller')}/metadata",
            "minibroker.cluster.secret.file": self.secret_file,
            **self._tls_props(["CONTROLLER"]),
        }
        if self.controller_metrics is not None:
            props["metrics.listener"] = f"{self.controller_metrics[0]}:{self.controller_metrics[1]}"
        props.update(self.broker_overrides)       # cluster-wide settings (min ISR, timeouts) matter to both
        props.update(self.controller_overrides)
        return props

    def broker_config(self, node_id: int) -> dict[str, str]:
        b = self.broker(node_id)
        listeners = [f"EXTERNAL://{b.host}:{b.port}"]
        advertised = [f"EXTERNAL://{b.host}:{b.port}"]
        if b.kafka_port:
            listeners.append(f"KAFKA://{b.host}:{b.kafka_port}")
            advertised.append(f"KAFKA://{b.host}:{b.kafka_port}")
        for name, (h, p) in b.internal.items():
            listeners.append(f"{name}://{h}:{p}")
            if self.proxied:
                src = int(name.removeprefix("INTERNAL_B"))
                if src == node_id:
                    advertised.append(f"{name}://{h}:{p}")
                else:
                    lh, lp = self.route(src, node_id).listen
                    advertised.append(f"{name}://{lh}:{lp}")
            else:
                advertised.append(f"{name}://{h}:{p}")
        if self.proxied:
            ch, cp = self.route(node_id, CONTROLLER_ID).listen
            inter = f"INTERNAL_B{node_id}"
        else:
            ch, cp = self.controller
            inter = "INTERNAL"
        props = {
            "node.id": str(node_id),
            "broker.rack": b.rack,
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "inter.broker.listener.name": inter,
            "controller.quorum.bootstrap.servers": f"{ch}:{cp}",
            "log.dirs": f"{self.node_dir(b.name)}/data",
            "minibroker.cluster.secret.file": self.secret_file,
        }
        if b.metrics is not None:
            props["metrics.listener"] = f"{b.metrics[0]}:{b.metrics[1]}"
        if self.tls:
            kafka = ["KAFKA"] if b.kafka_port else []
            props.update(self._tls_props(["EXTERNAL", *b.internal, "CONTROLLER", *kafka]))
            props["controller.listener.names"] = "CONTROLLER"
        props.update(self.broker_overrides)
        return props

    # -- state file form ------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClusterLayout:
        return cls(
            data_dir=d["data_dir"], controller=tuple(d["controller"]),  # type: ignore[arg-type]
            brokers=tuple(BrokerSpec(b["node_id"], b["host"], b["port"], b["rack"],
                                     {k: tuple(v) for k, v in b["internal"].items()},  # type: ignore[misc]
                                     b.get("kafka_port"),
                                     tuple(b["metrics"]) if b.get("metrics") else None)  # type: ignore[arg-type]
                          for b in d["brokers"]),
            routes=tuple(Route(r["name"], r["src"], r["dst"], tuple(r["listen"]), tuple(r["target"]))  # type: ignore[arg-type]
                         for r in d["routes"]),
            proxy_control=tuple(d["proxy_control"]) if d.get("proxy_control") else None,  # type: ignore[arg-type]
            secret_file=d.get("secret_file") or f"{d['data_dir']}/cluster.secret",
            broker_overrides=dict(d.get("broker_overrides") or {}),
            controller_overrides=dict(d.get("controller_overrides") or {}),
            controller_metrics=tuple(d["controller_metrics"]) if d.get("controller_metrics") else None,  # type: ignore[arg-type]
            tls=bool(d.get("tls", False)))


def properties_text(props: dict[str, str], header: str) -> str:
    lines = [f"# {header}"] + [f"{k}={v}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


PortFor = Any   # Callable[[str, int], int]: (host, default port) -> port to use


def plan(data_dir: str, *, brokers: int = 3, hosts: list[str], controller_host: str,
         port_for: PortFor, proxied: bool = True, secret_file: str | None = None, tls: bool = False,
         racks: tuple[str, ...] | None = None,
         broker_overrides: dict[str, str] | None = None,
         controller_overrides: dict[str, str] | None = None) -> ClusterLayout:
    """Lay out a cluster: broker i on hosts[i-1] (EXTERNAL default port 9092, KAFKA 9094),
    controller on controller_host:9093, metrics on each broker's host:9404 and
    the controller's host:9400; `port_for(host, default)` picks each port
    (the default itself for the well-known layout, a free one for tests). `racks` are
    cycled over the brokers in id order (`--racks a,b,c` with 6 brokers: 2 per rack);
    by default each broker has its own zone. Raises ValueError if two listeners or
    routes would share an address."""
    if brokers < 1 or brokers > len(hosts):
        raise ValueError(f"brokers: expected 1..{len(hosts)}, got {brokers}")
    rack_names = tuple(racks) if racks else RACKS
    if any(not r.strip() for r in rack_names):
        raise ValueError(f"racks: expected non-empty names, got {','.join(rack_names)!r}")
    ids = list(range(1, brokers + 1))
    controller = (controller_host, port_for(controller_host, 9093))
    specs: list[BrokerSpec] = []
    routes: list[Route] = []
    for i in ids:
        host = hosts[i - 1]
        if proxied:
            internal = {f"INTERNAL_B{k}": (host, port_for(host, 9100 + k)) for k in ids}
        else:
            internal = {"INTERNAL": (host, port_for(host, 9101))}
        specs.append(BrokerSpec(i, host, port_for(host, 9092), rack_names[(i - 1) % len(rack_names)], internal,
                                port_for(host, KAFKA_PORT), (host, port_for(host, 9404))))
    proxy_control: Addr | None = None
    if proxied:
        for b in specs:
            routes.append(Route(f"b{b.node_id}->ctl", b.node_id, CONTROLLER_ID,
                                (b.host, port_for(b.host, 9193)), controller))
            for k in ids:
                if k != b.node_id:
                    routes.append(Route(f"b{k}->b{b.node_id}", k, b.node_id,
                                        (b.host, port_for(b.host, 9200 + k)), b.internal[f"INTERNAL_B{k}"]))
        proxy_control = (controller_host, port_for(controller_host, 9199))
    controller_metrics = (controller_host, port_for(controller_host, 9400))
    _check_distinct(controller, specs, routes, proxy_control, controller_metrics)
    return ClusterLayout(data_dir, controller, tuple(specs), tuple(routes), proxy_control,
                         secret_file or f"{data_dir}/cluster.secret",
                         dict(broker_overrides or {}), dict(controller_overrides or {}),
                         controller_metrics=controller_metrics, tls=tls)


def _check_distinct(controller: Addr, specs: list[BrokerSpec], routes: list[Route], proxy_control: Addr | None,
                    controller_metrics: Addr | None) -> None:
    named: list[tuple[str, Addr | None]] = [("controller", controller), ("controller metrics", controller_metrics),
                                            ("proxy control", proxy_control)]
    for b in specs:
        named += [(b.name, (b.host, b.port)), (f"{b.name} KAFKA", (b.host, b.kafka_port) if b.kafka_port else None),
                  (f"{b.name} metrics", b.metrics)]
        named += [(f"{b.name} {n}", a) for n, a in b.internal.items()]
    named += [(f"route {r.name}", r.listen) for r in routes]
    seen: dict[Addr, str] = {}
    for what, addr in named:
        if addr is None:
            continue
        if addr in seen:
            raise ValueError(f"{what} and {seen[addr]} would both listen on {addr[0]}:{addr[1]}")
        seen[addr] = what
