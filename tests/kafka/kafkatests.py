"""Shared helpers for the Kafka-listener tests: real Kafka clients against a
real 3-broker local cluster (one per module, fast timings)."""
from __future__ import annotations

import shutil
import pytest

from minibroker.testing.cluster import LocalCluster


KCAT = shutil.which("kcat") or shutil.which("kafkacat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (Debian: apt-get install -y kcat)")


def consume(bs: str, topic: str, partitions: int, expect: int, conf: dict | None = None) -> list:
    """Read `expect` records from every partition's start with confluent-kafka's
    assign() (no group): [(key, value, partition, offset)] in arrival order."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from minibroker.testing.wait import until_sync
    c = Consumer({"bootstrap.servers": bs, "group.id": "assign-only", "enable.auto.commit": False,
                  "enable.partition.eof": False, **(conf or {})})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: list = []

    def more():
        for m in c.consume(num_messages=10_000, timeout=0.5):
            assert m.error() is None, m.error()
            got.append((m.key(), m.value(), m.partition(), m.offset()))
        return len(got) >= expect
    try:
        until_sync(more, f"{expect} records from {topic}", timeout_s=120, interval_s=0)
    finally:
        c.close()
    return got


def create_topic(c: LocalCluster, name: str, partitions: int = 1, rf: int = 3,
                 configs: dict[str, str] | None = None) -> None:
    """Create a topic through confluent-kafka's AdminClient on the Kafka listener, then wait
    until every broker's Metadata shows each partition with a leader: as in Kafka, CreateTopics
    answers once the controller has the topic, and the brokers learn of it a moment later (the
    way Kafka's own TestUtils.createTopic waits for propagation)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})
    fs = admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})], operation_timeout=30)
    for f in fs.values():
        f.result(timeout=60)
    wait_for_topic(c, name, partitions)


def wait_for_topic(c: LocalCluster, name: str, partitions: int) -> None:
    """Until every running broker's Metadata shows `name` with a leader for each partition (after a
    client's CreateTopics, before a test reads what it created from whichever broker a client picks)."""
    from minibroker.testing.wait import until_sync
    until_sync(lambda: all(_has_leaders(addr, name, partitions) for addr in c.kafka_bootstrap.split(",")),
               f"every broker to know topic {name} with a leader for each partition", timeout_s=30)


def wait_every_broker_listed(c: LocalCluster, timeout_s: float = 60) -> None:
    """Until every broker's Metadata lists every broker: after a pause long enough to fence one, the
    cluster is whole again only once each broker has seen it unfenced. librdkafka drops the handle of
    a broker that a Metadata response leaves out, failing what it had in flight (_DESTROY_BROKER), so
    a test that fenced a broker waits for this before the next test's clients start."""
    from minibroker.testing.wait import until_sync
    want = set(c.broker_ids)

    def listed(addr: str) -> bool:
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse
        try:
            with RawKafka(addr, timeout_s=2.0) as k:
                k.send(MetadataRequest[12](topics=[], allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
                return {b.node_id for b in k.recv(MetadataResponse, 12).brokers} == want
        except OSError:                    # not answering (yet): not whole
            return False
    until_sync(lambda: all(listed(addr) for addr in c.kafka_bootstrap.split(",")),
               f"every broker's Metadata to list brokers {sorted(want)}", timeout_s=timeout_s)


def metadata(addr: str, topic: str):
    """One topic's Metadata (v12) from the Kafka listener at `addr`."""
    with RawKafka(addr) as k:
        return _metadata_on(k, topic)


def _metadata_on(k: RawKafka, topic: str):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    k.send(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=None)],
                               allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return k.recv(MetadataResponse, 12)


def _has_leaders(addr: str, topic: str, partitions: int) -> bool:
    try:
        k = RawKafka(addr, timeout_s=5.0)
    except OSError:
        return True                        # a broker the test stopped: nothing to wait for there
    with k:
        md = _metadata_on(k, topic)
    leaders = {p.partition_index for t in md.topics if t.name == topic and not t.error_code
               for p in t.partitions if p.leader_id >= 0 and not p.error_code}
    return leaders == set(range(partitions))


class RawKafka:
    """A blocking Kafka-protocol connection built on kafka-python's message
    classes (the client side of the same generated codec), for rules that
    need exact requests: versions, replica ids, acks=0, pipelining."""

    def __init__(self, addr: str, timeout_s: float = 30.0) -> None:
        import socket
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.cid = 0

    def send(self, req) -> int:
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id="raw-test")
        self.sock.sendall(bytes(req.encode(header=True, framed=True)))
        return self.cid

    def recv(self, resp_cls, version: int):
        import struct
        size = struct.unpack(">i", self._read(4))[0]
        return resp_cls.decode(self._read(size), version=version, header=True)

    def closed_by_peer(self) -> bool:
        """True once the broker closed the connection (EOF), False if it answered."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
