"""Prometheus metrics with Kafka's names (as the JMX exporter's usual Kafka rules spell them).

`families` computes every metric from the state the ReplicaStatus API and
the controller already hold, `counts` counts the structured events the logs
and `watch` show, and `server` serves the text format on the event loop.
"""
