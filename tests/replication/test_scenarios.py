"""Data-driven scenarios for the replication cores (testdata/leader_*.txt for the
partition leader, testdata/follower_*.txt for the follower core), in etcd raft's
testdata style (minibroker.testing.datadriven). MINIBROKER_REWRITE=1 rewrites
the golden output.

Leader commands (kafka profile unless profile=lesson):
  new replicas=1,2,3 [isr=..] [leo= hw= lag= min-isr= epoch= pe= profile= now=]
  fetch r= offset= now= [broker-epoch=]   append leo= now=   check acks=
  wait offset= token= now=   shrink now=   committed isr= pe= now= [le=]
  alter-error code=NAME now=   metadata isr= pe= le= now= [replicas=]
  eligibility r= eligible=true|false epoch= now=   log-start offset=   state
Follower commands:
  new leader= epoch= [backoff=]   log leo= [start=] [epochs=e:s,...]
  send   answer now= [error=NAME] [hw=] [log-start=] [records] [diverging=e:o]
  truncated now= leo= [start=] [epochs=]   appended bytes= now=
  leader-leo value= now=   leader-start value= leo= now=   transport-error now=   phase now=
"""
from __future__ import annotations

import glob
import os
from typing import Any

import pytest

from minibroker.errors import ErrorCode, error_name
from minibroker.events import Event
from minibroker.replication.follower_core import FetchAnswer, LogView, PartitionFollower
from minibroker.replication.leader import Decision, PartitionLeader
from minibroker.replication.profile import profile_by_name
from minibroker.testing.datadriven import Command, ScenarioError, event_line, ids, run_file, value

HERE = os.path.join(os.path.dirname(__file__), "testdata")


def _code(name: str) -> int:
    try:
        return int(ErrorCode[name])
    except KeyError:
        raise ScenarioError(f"unknown error code {name}") from None


class LeaderScenario:
    def __init__(self) -> None:
        self.lead: PartitionLeader | None = None

    def core(self) -> PartitionLeader:
        if self.lead is None:
            raise ScenarioError("`new` first")
        return self.lead

    def run(self, c: Command) -> str:
        if c.name == "new":
            replicas = c.nums("replicas")
            self.lead = PartitionLeader(
                "t-0", replicas, replicas[0], leader_epoch=c.num("epoch", 0), partition_epoch=c.num("pe", 0),
                isr=c.nums("isr", replicas), leo=c.num("leo", 0), hw=c.num("hw", 0), lag_max_ms=c.num("lag", 100),
                min_isr=c.num("min-isr", 1), profile=profile_by_name(c.text("profile", "kafka")),
                now_ms=c.num("now", 0))
            return self.state() + "\n" + self.decision(self.lead.initial_decision)
        lead = self.core()
        now = c.num("now", 0)
        if c.name == "fetch":
            return self.decision(lead.on_follower_fetch(c.num("r"), c.num("offset"), now,
                                                        broker_epoch=c.num("broker-epoch", -1)))
        if c.name == "append":
            return self.decision(lead.on_append(c.num("leo"), now))
        if c.name == "check":
            return error_name(lead.check_produce(c.num("acks")))
        if c.name == "wait":
            return self.decision(lead.add_waiter(c.num("offset"), c.text("token"), now))
        if c.name == "shrink":
            return self.decision(lead.maybe_shrink_isr(now))
        if c.name == "committed":
            le = c.num("le") if c.has("le") else None
            return self.decision(lead.apply_committed_isr(c.nums("isr"), c.num("pe"), now, leader_epoch=le))
        if c.name == "alter-error":
            return self.decision(lead.on_alter_partition_error(_code(c.text("code")), now))
        if c.name == "metadata":
            return self.decision(lead.on_metadata(c.nums("isr"), c.num("pe"), c.num("le"),
                                                  c.nums("replicas", list(lead.replicas)), now))
        if c.name == "eligibility":
            return self.decision(lead.set_replica_eligibility(c.num("r"), c.flag("eligible", True),
                                                              c.num("epoch", -1), now))
        if c.name == "log-start":
            lead.on_log_start_offset(c.num("offset"))
            return self.state()
        if c.name == "state":
            return self.state()
        raise ScenarioError(f"{c.where}: unknown leader command {c.name}")

    def state(self) -> str:
        lead = self.core()
        p = lead.pending
        pending = "-" if p is None else f"{p.kind} {ids(p.isr)}"
        return (f"leader epoch={lead.leader_epoch} pe={lead.partition_epoch} isr={ids(lead.isr)} "
                f"maximal={ids(lead.maximal_isr)} pending={pending} leo={lead.leo} hw={lead.hw} "
                f"log-start={lead.log_start_offset} waiting={lead.waiting}")

    @staticmethod
    def decision(d: Decision) -> str:
        out = []
        if d.error != ErrorCode.NONE:
            out.append(f"error {d.error.name}")
        if d.hw_moved:
            out.append(f"hw {d.old_hw} -> {d.new_hw}")
        if d.isr_proposal is not None:
            out.append(f"propose isr {ids(d.isr_proposal)}")
        if d.isr_changed:
            out.append("isr changed")
        for token, code in d.completed:
            out.append(f"completed {token} {ErrorCode(code).name}")
        out += [event_line(e) for e in d.events if e.kind != "follower_fetch"]
        return "\n".join(out)


class FollowerScenario:
    def __init__(self) -> None:
        self.core: PartitionFollower | None = None
        self.events: list[Event] = []
        self.log = LogView(0, 0)

    def run(self, c: Command) -> str:
        if c.name == "new":
            self.core = PartitionFollower("t-0", c.num("leader"), c.num("epoch"), c.num("backoff", 1000),
                                          self.events.append)
            return self.phase(0)
        if c.name == "log":
            self.log = self._view(c)
            return f"log leo={self.log.leo} start={self.log.log_start_offset} epochs={self._epochs(self.log)}"
        core = self.core
        if core is None:
            raise ScenarioError(f"{c.where}: `new` first")
        now = c.num("now", 0)
        if c.name == "send":
            p = core.next_position(self.log)
            return (f"fetch offset={p.fetch_offset} last-epoch={p.last_fetched_epoch} "
                    f"leader-epoch={p.current_leader_epoch} log-start={p.log_start_offset}")
        if c.name == "answer":
            div = c.pairs("diverging")
            answer = FetchAnswer(error=_code(c.text("error")) if c.has("error") else 0,
                                 high_watermark=c.num("hw", -1), log_start_offset=c.num("log-start", -1),
                                 has_records=c.has("records"), diverging_epoch=div[0] if div else None)
            return self.actions(core.on_fetch_answer(answer, self.log, now), now)
        if c.name == "truncated":
            before, self.log = self.log, self._view(c)
            core.on_truncated(before, self.log, now)
            return self.actions([], now)
        if c.name == "appended":
            core.on_appended(c.num("bytes"), now)
            return self.actions([], now)
        if c.name == "leader-leo":
            return self.actions(core.on_leader_log_end(c.num("value"), self.log, now), now)
        if c.name == "leader-start":
            return self.actions(core.on_leader_log_start(c.num("value"), c.num("leo"), self.log, now), now)
        if c.name == "transport-error":
            core.on_transport_error(now)
            return self.actions([], now)
        if c.name == "phase":
            return self.phase(now)
        raise ScenarioError(f"{c.where}: unknown follower command {c.name}")

    def _view(self, c: Command) -> LogView:
        return LogView(c.num("leo"), c.num("start", 0), tuple(c.pairs("epochs")))

    @staticmethod
    def _epochs(log: LogView) -> str:
        return ",".join(f"{e}:{s}" for e, s in log.epochs) or "-"

    def actions(self, acts: list[Any], now: int) -> str:
        out = []
        for a in acts:
            names = a._fields if isinstance(a, tuple) else a.__slots__     # a NamedTuple or a slots dataclass
            fields = " ".join(f"{k}={getattr(a, k)}" for k in names if k != "reason")
            reason = getattr(a, "reason", "")
            out.append(f"action {type(a).__name__}" + (f" {fields}" if fields else "")
                       + (f": {reason}" if reason else ""))
        out += [event_line(e) for e in self.events]
        self.events.clear()
        out.append(self.phase(now))
        return "\n".join(out)

    def phase(self, now: int) -> str:
        core = self.core
        assert core is not None
        st = core.status(now)
        stuck = f" stuck={st['stuck_count']}" if st["stuck"] else ""
        return (f"phase {st['phase']} delayed-until={core.delayed_until_ms} "
                f"last-error={error_name(core.last_error) if core.last_error else '-'}{stuck}")


def _files(prefix: str) -> list[str]:
    return sorted(glob.glob(os.path.join(HERE, f"{prefix}_*.txt")))


@pytest.mark.parametrize("path", _files("leader"), ids=os.path.basename)
def test_leader_scenario(path: str) -> None:
    run_file(path, LeaderScenario().run)


@pytest.mark.parametrize("path", _files("follower"), ids=os.path.basename)
def test_follower_scenario(path: str) -> None:
    run_file(path, FollowerScenario().run)


def test_there_are_scenarios_for_both_cores() -> None:
    assert _files("leader") and _files("follower")
