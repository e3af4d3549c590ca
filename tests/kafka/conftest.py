"""Kafka-listener tests: real Kafka clients against one real 3-broker local
cluster per module (helpers in kafkatests.py)."""
from minibroker.testing.fixtures import cluster_factory, shared_cluster  # noqa: F401
