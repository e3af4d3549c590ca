#!/usr/bin/env python3
"""Read a topic back with confluent-kafka (librdkafka), from offset 0 to each partition's high watermark.

    python docs/examples/read_back.py BOOTSTRAP TOPIC

Prints how many records it read, how many distinct values, and the first and
last value. No consumer group: it assigns every partition itself, so nothing
is committed.
"""
from __future__ import annotations

import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition


def main() -> None:
    bootstrap, topic = sys.argv[1], sys.argv[2]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-back", "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        end = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        todo = {p for p, hw in end.items() if hw > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(todo)])
        values: list[str] = []
        while todo:
            msg = consumer.poll(10)
            if msg is None:
                raise SystemExit(f"no record for 10 s; still reading partitions {sorted(todo)}")
            if msg.error():
                raise KafkaException(msg.error())
            values.append(msg.value().decode())
            if msg.offset() + 1 >= end[msg.partition()]:
                todo.discard(msg.partition())
        first, last = (values[0], values[-1]) if values else ("-", "-")
        print(f"read {len(values)} records, {len(set(values))} distinct, first {first}, last {last}")
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
