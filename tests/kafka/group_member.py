"""A confluent-kafka group member run as its own process by test_consumer_groups.py
(so a test can SIGKILL it): prints `assigned P,P`, `revoked` and `record P OFFSET VALUE`
lines, commits each record synchronously after printing it (at least once). A fifth argument
makes it a static member (KIP-345) with that `group.instance.id`."""
from __future__ import annotations

import sys


def main(bootstrap: str, group: str, topic: str, session_ms: str, instance: str = "") -> None:
    from confluent_kafka import Consumer

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": int(session_ms),
                  "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range",
                  **({"group.instance.id": instance} if instance else {})})
    c.subscribe([topic], on_assign=lambda _c, ps: out("assigned " + ",".join(str(p.partition) for p in ps)),
                on_revoke=lambda _c, ps: out("revoked"))
    while True:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            out(f"error {m.error()}")
            continue
        out(f"record {m.partition()} {m.offset()} {m.value().decode()}")
        c.commit(message=m, asynchronous=False)


if __name__ == "__main__":
    main(*sys.argv[1:6])
