"""minibroker's client library: Producer, Consumer, Admin (Kafka's names and defaults)."""
from minibroker.client.admin import Admin, ClusterDescription, NewTopic
from minibroker.client.consumer import Consumer
from minibroker.client.describe import BrokerDescription, PartitionDescription, TopicDescription
from minibroker.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from minibroker.client.producer import Producer, RecordFuture
from minibroker.client.types import ConsumerRecord, RecordMetadata, TopicPartition
from minibroker.errors import ErrorCode, KafkaError

__all__ = [
    "Admin", "BrokerDescription", "ClusterDescription", "Consumer", "ConsumerRecord", "EARLIEST_TIMESTAMP",
    "ErrorCode", "KafkaError", "LATEST_TIMESTAMP", "NewTopic", "PartitionDescription", "Producer",
    "RecordFuture", "RecordMetadata", "TopicDescription", "TopicPartition",
]
