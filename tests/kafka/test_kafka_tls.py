"""The Kafka-protocol listener of a `--tls` cluster speaks TLS: real Kafka clients connect
with security.protocol=SSL and the cluster's CA, exactly as they would to Kafka."""
from __future__ import annotations

import pytest
from kafkatests import consume

from minibroker.testing.fixtures import start_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("kafka-tls") / "c", tls=True)
    yield c
    c.destroy()


def _ssl(c) -> dict:
    return {"bootstrap.servers": c.kafka_bootstrap, "security.protocol": "SSL", "ssl.ca.location": c.layout.ca_file}


def test_confluent_kafka_produces_and_consumes_over_tls(tls_cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(_ssl(tls_cluster))
    for f in admin.create_topics([NewTopic("tls-orders", 1, 3)], operation_timeout=30).values():
        f.result(timeout=60)
    p = Producer({**_ssl(tls_cluster), "acks": "all"})
    for i in range(10):
        p.produce("tls-orders", value=b"v%d" % i)
    assert p.flush(60) == 0
    got = consume(tls_cluster.kafka_bootstrap, "tls-orders", 1, 10,
                  {"security.protocol": "SSL", "ssl.ca.location": tls_cluster.layout.ca_file})
    assert [v for _, v, _, _ in got] == [b"v%d" % i for i in range(10)]


def test_kafka_python_creates_and_produces_over_tls_with_the_clusters_ca(tls_cluster):
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    tls = {"bootstrap_servers": tls_cluster.kafka_bootstrap, "security_protocol": "SSL",
           "ssl_cafile": tls_cluster.layout.ca_file}
    admin = KafkaAdminClient(**tls)
    try:
        admin.create_topics([NewTopic("tls-kp", 1, 3)])
    finally:
        admin.close()
    producer = KafkaProducer(acks="all", **tls)
    try:
        assert producer.send("tls-kp", b"over tls").get(timeout=60).offset == 0
    finally:
        producer.close()


def test_a_plaintext_kafka_client_gets_no_metadata_from_the_tls_listener(tls_cluster):
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import KafkaException
    admin = AdminClient({"bootstrap.servers": tls_cluster.kafka_bootstrap})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
