"""The replication quota core (minibroker.replication.throttle, docs/rules.md RQ1-RQ5): data-driven
scenarios in testdata/throttle_*.txt (MINIBROKER_REWRITE=1 rewrites the golden output), and the
config checks in Kafka's words.

Commands:
  new [bound=] [windows=] [window-ms=] [broker=]   lists leader=TOPIC:LIST;...   (';'-separated, '-' for none)
  record bytes= now=   rate now=   throttled topic= partition=
  throttle topic= partition= in-sync=true|false now=
"""
from __future__ import annotations

import glob
import os

import pytest

from minibroker.replication.throttle import (UNLIMITED, ReplicationQuota, parse_rate, throttled_partitions,
                                             throttled_replicas_error)
from minibroker.testing.datadriven import Command, ScenarioError, run_file

HERE = os.path.join(os.path.dirname(__file__), "testdata")


class ThrottleScenario:
    def __init__(self) -> None:
        self.q: ReplicationQuota | None = None
        self.broker = 1

    def quota(self) -> ReplicationQuota:
        if self.q is None:
            raise ScenarioError("`new` first")
        return self.q

    def run(self, c: Command) -> str:
        if c.name == "new":
            self.broker = c.num("broker", 1)
            bound = c.text("bound", "unlimited")
            self.q = ReplicationQuota(UNLIMITED if bound == "unlimited" else int(bound), c.num("windows", 11),
                                      c.num("window-ms", 1000))
            return self.state(0)
        q = self.quota()
        if c.name == "lists":
            spec = c.text("leader")
            lists = {} if spec == "-" else dict(item.split("=", 1) for item in spec.split(";"))
            q.set_throttled(lists, self.broker)
            return self.state(None)
        if c.name == "record":
            q.record(c.num("bytes"), c.num("now"))
            return self.state(c.num("now"))
        if c.name == "rate":
            return self.state(c.num("now"))
        if c.name == "throttled":
            return f"throttled={str(q.is_throttled(c.text('topic'), c.num('partition'))).lower()}"
        if c.name == "throttle":
            now = c.num("now")
            held = q.maybe_throttle(c.text("topic"), c.num("partition"), c.flag("in-sync"), now)
            return f"throttle={str(held).lower()} exceeded={str(q.is_exceeded(now)).lower()}"
        raise ScenarioError(f"unknown command {c.name}")

    def state(self, now: int | None) -> str:
        q = self.quota()
        bound = "unlimited" if q.bound >= UNLIMITED else str(q.bound)
        lists = " ".join(f"{t}:{'*' if ps is None else ','.join(map(str, sorted(ps)))}"
                         for t, ps in q.throttled.items()) or "-"
        line = f"bound={bound} active={str(q.active).lower()} throttled={lists}"
        if now is not None:
            line += f" rate={q.rate(now):.1f} exceeded={str(q.is_exceeded(now)).lower()}"
        return line


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(HERE, "throttle_*.txt"))), ids=os.path.basename)
def test_throttle_scenario(path: str) -> None:
    run_file(path, ThrottleScenario().run)


def test_there_are_throttle_scenarios() -> None:
    assert glob.glob(os.path.join(HERE, "throttle_*.txt"))


@pytest.mark.parametrize("value", ["", "*", " * ", "0:1", "0:1,1:2", " 0:1 , 10:2 ", "0:1,"])
def test_valid_throttled_replica_lists(value: str) -> None:
    assert throttled_replicas_error("leader.replication.throttled.replicas", value) is None


@pytest.mark.parametrize("value", ["x", "0", "0:1,*", "*,*", "0:a", "-1:2", "0-1"])
def test_invalid_throttled_replica_lists_say_why_in_kafkas_words(value: str) -> None:
    err = throttled_replicas_error("follower.replication.throttled.replicas", value)
    assert err is not None
    assert err.startswith("Invalid value [")
    assert err.endswith("follower.replication.throttled.replicas must be the literal '*' or a list of replicas in "
                        "the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


def test_a_list_names_only_this_brokers_partitions() -> None:
    assert throttled_partitions("0:1,1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions("*", 3) is None
    assert throttled_partitions("bad", 1) == frozenset()


@pytest.mark.parametrize("raw,expected", [("100", 100), ("0", 0), (" 5 ", 5), ("-1", UNLIMITED), ("x", UNLIMITED),
                                          (None, UNLIMITED), (str(UNLIMITED), UNLIMITED)])
def test_parse_rate(raw: str | None, expected: int) -> None:
    assert parse_rate(raw) == expected
