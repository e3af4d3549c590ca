"""minibroker: a Kafka-style replicated broker for learning and testing."""
__version__ = "0.1.0"
