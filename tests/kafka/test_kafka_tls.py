"""A TLS cluster (`cluster up --tls`): its Kafka listener speaks TLS too
(listener.security.protocol.map KAFKA:SSL), for Kafka clients with security.protocol=SSL."""
from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("cryptography")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkatests import consume  # noqa: E402
from minibroker.testing.fixtures import start_cluster  # noqa: E402

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("kafka-tls") / "cluster", tls=True)
    yield c
    c.destroy()


def test_kafka_clients_produce_and_consume_over_tls(tls_cluster):
    c = tls_cluster
    ssl = {"security.protocol": "SSL", "ssl.ca.location": c.layout.ca_file}
    admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap, **ssl})
    admin.create_topics([NewTopic("tls-rt", 1, 3)])["tls-rt"].result(timeout=60)
    p = Producer({"bootstrap.servers": c.kafka_bootstrap, "acks": "all", **ssl})
    for i in range(100):
        p.produce("tls-rt", value=b"secret-%d" % i)
    assert p.flush(60) == 0
    got = consume(c.kafka_bootstrap, "tls-rt", 1, 100, ssl)
    assert [v for (_k, v, _p, _o) in got] == [b"secret-%d" % i for i in range(100)]


def test_a_plaintext_kafka_client_gets_no_metadata_from_a_tls_kafka_listener(tls_cluster):
    admin = AdminClient({"bootstrap.servers": tls_cluster.kafka_bootstrap})
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=5)
