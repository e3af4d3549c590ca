"""Shared helpers for the Kafka-listener tests: real Kafka clients against a
real 3-broker local cluster (one per module, fast timings)."""
from __future__ import annotations

import shutil
import pytest

from minibroker.testing.cluster import LocalCluster


KCAT = shutil.which("kcat") or shutil.which("kafkacat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (Debian: apt-get install -y kcat)")


def create_topic(c: LocalCluster, name: str, partitions: int = 1, rf: int = 3,
                 configs: dict[str, str] | None = None) -> None:
    """Create a topic through confluent-kafka's AdminClient on the Kafka listener."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})
    fs = admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})], operation_timeout=30)
    for f in fs.values():
        f.result(timeout=60)
