"""confluent-kafka (librdkafka) through the brokers' Kafka listener: acks=all batched throughput.

The same count and record size as minibroker's own batched run, to a fresh RF=3
topic, with the run's linger.ms and batch.size. Timed from the first produce() to
the end of flush(), as the minibroker producer is. Optional: without
confluent_kafka importable the caller prints that it was skipped.
"""
from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping
from typing import Any


def available() -> bool:
    return importlib.util.find_spec("confluent_kafka") is not None


def produce_batched(kafka_bootstrap: str, topic: str, count: int, size: int,
                    producer_cfg: Mapping[str, Any]) -> tuple[int, int, float]:
    """(acknowledged, failed, seconds) of `count` records; blocking (run it in a thread)."""
    from confluent_kafka import Producer
    failed = 0

    def report(err: Any, _msg: Any) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    # delivery.report.only.error: librdkafka calls back only for failed records, so the run times
    # librdkafka and the brokers, not a million Python callbacks; every other record was acked. The
    # callback is the producer's (`on_delivery` in its config), not one per produce() call, and
    # produce() takes its arguments by position: each saves the call some of its 1 us on this VM.
    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap, "acks": "all",
                            "linger.ms": int(producer_cfg.get("linger.ms", 5)),
                            "queue.buffering.max.messages": 1_000_000, "delivery.report.only.error": True,
                            "on_delivery": report}
    if "batch.size" in producer_cfg:
        conf["batch.size"] = int(producer_cfg["batch.size"])
    p = Producer(conf)
    p.list_topics(topic, timeout=30)                     # connections and metadata before the clock starts
    value = b"c" * size
    # One acknowledged record first, as minibroker's batched run sends one: the topic is new, and
    # until every broker has applied its metadata a produce may meet NOT_LEADER_OR_FOLLOWER, which
    # librdkafka answers with a metadata refresh and retry.backoff.ms; that wait is not throughput.
    warm_failed = []
    p.produce(topic, value, partition=0, on_delivery=lambda err, _m: warm_failed.append(err) if err else None)
    if p.flush(30) or warm_failed:
        raise RuntimeError(f"confluent-kafka could not write its first record: {warm_failed or 'timed out'}")
    produce, poll = p.produce, p.poll
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                produce(topic, value, None, 0)              # (topic, value, key, partition)
                break
            except BufferError:
                poll(0.005)
        if i % 10_000 == 0:
            poll(0)
    left = p.flush(300)
    elapsed = time.perf_counter() - start
    acked = count - failed - left
    return acked, failed + left, elapsed
