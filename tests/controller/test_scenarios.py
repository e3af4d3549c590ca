"""Data-driven scenarios for the controller core (testdata/*.txt, etcd raft's
testdata style, minibroker.testing.datadriven; MINIBROKER_REWRITE=1 rewrites
the golden output), on the manual-clock Harness.

Commands:
  start brokers=1,2,3 [racks=1:0,...]   register broker= [incarnation=]
  heartbeat broker= [offset=] [want-fence] [want-shutdown]   advance ms=
  beat-all [except=1,2]   tick   create topic= assignment=1,2,3/2,3,1 [min-isr=] [unclean]
  alter broker= isr= [topic=] [partition=] [le=] [pe=]
  elect type=preferred|unclean [topic=] [partition=]   partition [topic=] [p=]
  reassign replicas=2,3|cancel [topic=] [partition=]   reassignments (ListPartitionReassignments)
Each command prints the records it wrote, its events and its response.
"""
from __future__ import annotations

import glob
import os
from typing import Any

import pytest

from minibroker.controller.state import Outcome
from minibroker.errors import error_name
from minibroker.metadata import BrokerRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from minibroker.testing.datadriven import Command, ScenarioError, event_line, ids, run_file, value

from .harness import Harness

HERE = os.path.join(os.path.dirname(__file__), "testdata")
ELECTION = {"preferred": 0, "unclean": 1}


def record_line(rec: Any) -> str:
    if isinstance(rec, BrokerRecord):
        return (f"record broker {rec.broker_id} epoch={rec.broker_epoch} fenced={rec.fenced} "
                f"shutting-down={rec.in_controlled_shutdown}")
    if isinstance(rec, PartitionRecord):
        return partition_line(rec, "record partition")
    if isinstance(rec, TopicRecord):
        return f"record topic {rec.topic} partitions={rec.num_partitions}"
    if isinstance(rec, RemoveTopicRecord):
        return f"record remove-topic {rec.topic}"
    return f"record {rec!r}"


def partition_line(p: PartitionRecord, prefix: str = "partition") -> str:
    return (f"{prefix} {p.name} leader={p.leader} le={p.leader_epoch} pe={p.partition_epoch} "
            f"replicas={ids(p.replicas)} isr={ids(p.isr)} elr={ids(p.elr)}"
            + (f" adding={ids(p.adding_replicas)} removing={ids(p.removing_replicas)}" if p.reassigning else "")
            + (f" ({p.reason})" if p.reason else ""))


def outcome_lines(out: Outcome, response: bool = True) -> list[str]:
    lines = [record_line(r) for _, r in out.records]
    lines += [event_line(e) for e in out.events]
    if response and out.response.get("error", 0):
        lines.append(f"response error={error_name(out.response['error'])} {out.response.get('message', '')}".rstrip())
    return lines


class ControllerScenario:
    def __init__(self) -> None:
        self.h = Harness()

    def run(self, c: Command) -> str:
        h = self.h
        if c.name == "start":
            racks = dict(c.pairs("racks"))
            before = len(h.log)
            h.start(*c.nums("brokers"), racks={b: f"rack-{r}" for b, r in racks.items()})
            return "\n".join(line for o in h.log[before:] for line in outcome_lines(o))
        if c.name == "register":
            return "\n".join(outcome_lines(h.register(c.num("broker"), incarnation=c.text("incarnation", "") or None)))
        if c.name == "heartbeat":
            kw: dict[str, Any] = {"want_fence": c.flag("want-fence"), "want_shut_down": c.flag("want-shutdown")}
            out = h.heartbeat(c.num("broker"), offset=c.num("offset") if c.has("offset") else None, **kw)
            r = out.response
            return "\n".join([*outcome_lines(out, response=False),
                              f"response error={error_name(r.get('error', 0))} fenced={r.get('is_fenced')} "
                              f"caught-up={r.get('is_caught_up')} shut-down={r.get('should_shut_down')}"])
        if c.name == "advance":
            h.advance(c.num("ms"))
            return f"now {h.now}"
        if c.name == "beat-all":
            h.beat_all(*c.nums("except", []))
            return "ok"
        if c.name == "tick":
            return "\n".join(line for o in h.tick() for line in outcome_lines(o)) or "nothing due"
        if c.name == "create":
            assignment = [[int(x) for x in part.split(",")] for part in c.text("assignment").split("/")]
            configs = {}
            if c.has("min-isr"):
                configs["min.insync.replicas"] = c.text("min-isr")
            if c.has("unclean"):
                configs["unclean.leader.election.enable"] = "true"
            out = h.create(c.text("topic"), assignment, configs)
            return "\n".join(outcome_lines(out))
        if c.name == "alter":
            kw = {k: c.num(k) for k in ("le", "pe") if c.has(k)}
            res = h.alter(c.num("broker"), c.nums("isr"), c.text("topic", "t"), c.num("partition", 0), **kw)
            out = h.log[-1]
            return "\n".join([*outcome_lines(out, response=False),
                              f"response error={error_name(res.get('error', 0))} isr={ids(res.get('isr', []))} "
                              f"pe={res.get('partition_epoch')} le={res.get('leader_epoch')}"])
        if c.name == "elect":
            topics = None
            if c.has("topic"):
                topics = [{"topic": c.text("topic"), "partitions": [c.num("partition", 0)]}]
            out = h._keep(h.state.elect_leaders(h.now, ELECTION[c.text("type")], topics))
            results = [f"result {t['topic']}-{p['partition']} error={error_name(p['error'])}"
                       for t in out.response.get("results", []) for p in t.get("partitions", [])]
            return "\n".join([*outcome_lines(out), *results])
        if c.name == "reassign":
            target = None if c.text("replicas") == "cancel" else c.nums("replicas")
            topics = [{"topic": c.text("topic", "t"), "partitions": [{"partition": c.num("partition", 0),
                                                                       "replicas": target}]}]
            out = h._keep(h.state.alter_partition_reassignments(h.now, topics))
            results = [f"result {t['topic']}-{p['partition']} error={error_name(p['error'])} {p['message']}".rstrip()
                       for t in out.response["topics"] for p in t["partitions"]]
            return "\n".join([*outcome_lines(out), *results])
        if c.name == "reassignments":
            listed = h.state.list_partition_reassignments(None)["topics"]
            return "\n".join(f"reassigning {t['topic']}-{p['partition']} replicas={ids(p['replicas'])} "
                             f"adding={ids(p['adding_replicas'])} removing={ids(p['removing_replicas'])}"
                             for t in listed for p in t["partitions"]) or "none"
        if c.name == "partition":
            return partition_line(h.p(c.text("topic", "t"), c.num("p", 0)))
        raise ScenarioError(f"{c.where}: unknown controller command {c.name}")


FILES = sorted(glob.glob(os.path.join(HERE, "*.txt")))


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_controller_scenario(path: str) -> None:
    run_file(path, ControllerScenario().run)


def test_there_are_controller_scenarios() -> None:
    assert FILES
