"""Data-driven scenarios for the classic group core (testdata/*.txt, etcd raft's
testdata style, minibroker.testing.datadriven; MINIBROKER_REWRITE=1 rewrites
the golden output).

Commands (every time is `now=` ms; tokens number the requests, printed as #N):
  group [delay=] [min-session=]        a new Empty group (initial rebalance delay, default 0)
  join now= [member=] [new-id=] [client=] [session=] [rebalance=] [protocols=range:a,roundrobin:b]
       [instance=] [v3] [v9] [type=consumer]        (v3: no MEMBER_ID_REQUIRED round trip; v9: skip_assignment served;
                                     instance=: a static member's group instance id, KIP-345)
  sync now= member= gen= [assign=m1:x,m2:y] [instance=]
  heartbeat now= member= gen= [instance=]     tick now=
  leave now= members=a,b@i,@j     (member@instance; @instance alone: removal by instance id)
  commit member= gen= [instance=]    delete now=                state
  store-failed now= [error=]       (the driver could not write the group's metadata)
  commit-offsets now= tps=t/0,t/1   (stored: the group's committed offsets, as the driver applies them)
  delete-offsets topics=t:0+1,u:0 [stored=no]   (OffsetDelete; its tombstones stored unless stored=no)
A protocol's metadata written sub/t+u is a ConsumerProtocolSubscription of topics t and u.
Each command prints the decisions the core returned, then the group's state.
"""
from __future__ import annotations

import glob
import os

import pytest

from minibroker.coordinator.group import (CommittedOffset, Decision, Group, GroupEvent, GroupSettings, JoinResponse,
                                          StoreGroup, SyncResponse)
from minibroker.protocol.consumer_subscription import decode_subscription, encode_subscription
from minibroker.testing.datadriven import Command, ScenarioError, run_file

HERE = os.path.join(os.path.dirname(__file__), "testdata")


def _pairs(raw: str) -> list[tuple[str, bytes]]:
    if raw in ("", "-"):
        return []
    out = []
    for item in raw.split(","):
        name, _, val = item.partition(":")
        out.append((name, encode_subscription(val[4:].split("+")) if val.startswith("sub/") else val.encode()))
    return out


def _meta(raw: bytes) -> str:
    """Metadata as a scenario writes it: sub/t+u for a subscription, else the bytes as text."""
    try:
        return raw.decode() if raw.isascii() and raw.decode().isprintable() else "sub/" + "+".join(
            decode_subscription(raw))
    except ValueError:
        return repr(raw)


def decision_line(d: Decision) -> str:
    if isinstance(d, JoinResponse):
        s = f"join-response #{d.token} {d.error.name}"
        if d.member_id:
            s += f" member={d.member_id}"
        if d.generation_id >= 0:
            s += f" gen={d.generation_id} protocol={d.protocol_name} leader={d.leader}"
        if d.members:
            s += " members=" + ",".join(f"{m}{'@' + i if i else ''}:{_meta(meta)}" for m, i, meta in d.members)
        if d.skip_assignment:
            s += " skip-assignment"
        return s
    if isinstance(d, SyncResponse):
        s = f"sync-response #{d.token} {d.error.name}"
        return s + (f" assignment={d.assignment.decode()}" if d.assignment else "")
    if isinstance(d, StoreGroup):
        return f"store-group gen={d.generation_id}"
    assert isinstance(d, GroupEvent)
    return f"event {d.kind} {d.before or '-'} -> {d.after or '-'}: {d.reason}"


class Scenario:
    def __init__(self) -> None:
        self.group: Group | None = None
        self.token = 0

    def _g(self, cmd: Command) -> Group:
        if self.group is None:
            raise ScenarioError(f"{cmd.where}: `group` first")
        return self.group

    def state_line(self) -> str:
        g = self.group
        assert g is not None
        members = ",".join(m + (f"@{x.group_instance_id}" if x.group_instance_id else "")
                           for m, x in g.members.items()) or "-"
        return (f"state {g.state.value} gen={g.generation_id} leader={g.leader or '-'} members={members}"
                + (f" pending={','.join(g.pending)}" if g.pending else "")
                + (f" offsets={','.join(f'{t}/{p}' for t, p in sorted(g.offsets))}" if g.offsets else ""))

    def __call__(self, cmd: Command) -> str:
        if cmd.name == "group":
            self.group = Group("g", GroupSettings(min_session_timeout_ms=cmd.num("min-session", 1000),
                                                  initial_rebalance_delay_ms=cmd.num("delay", 0)))
            return self.state_line()
        g = self._g(cmd)
        now = cmd.num("now", 0)
        out: list[str] = []
        decisions: list[Decision] = []
        instance = cmd.text("instance", "") or None
        if cmd.name == "join":
            self.token += 1
            decisions = g.maybe_join(self.token, cmd.text("member", ""), instance,
                                     cmd.text("client", "c"), "/127.0.0.1",
                                     cmd.num("session", 10_000), cmd.num("rebalance", 30_000),
                                     cmd.text("type", "consumer"),
                                     _pairs(cmd.text("protocols", "range:r")), not cmd.flag("v3"),
                                     cmd.text("new-id", f"m{self.token}"), now, supports_skip_assignment=cmd.flag("v9"))
            out.append(f"request #{self.token}")
        elif cmd.name == "sync":
            self.token += 1
            decisions = g.maybe_sync(self.token, cmd.text("member"), cmd.num("gen"), "consumer", None,
                                     _pairs(cmd.text("assign", "")), now, instance)
            out.append(f"request #{self.token}")
        elif cmd.name == "heartbeat":
            out.append(f"heartbeat {g.heartbeat(cmd.text('member'), cmd.num('gen'), now, instance).name}")
        elif cmd.name == "leave":
            leaving = [m.partition("@") for m in cmd.text("members").split(",")]
            errors, decisions = g.maybe_leave([(m, i or None) for m, _, i in leaving], now)
            out.append("leave " + ",".join(e.name for e in errors))
        elif cmd.name == "tick":
            decisions = g.tick(now)
        elif cmd.name == "commit":
            out.append(f"commit {g.validate_commit(cmd.text('member', ''), cmd.num('gen', -1), instance).name}")
        elif cmd.name == "delete":
            err, decisions = g.maybe_delete(now)
            out.append(f"delete {err.name}")
        elif cmd.name == "commit-offsets":
            tps = [tp.partition("/") for tp in cmd.text("tps").split(",")]
            g.commit({(t, int(p)): CommittedOffset(5, -1, "", now) for t, _, p in tps}, now)
        elif cmd.name == "delete-offsets":
            asked = [(t, [int(p) for p in ps.split("+")]) for t, _, ps in
                     (x.partition(":") for x in cmd.text("topics").split(","))]
            d = g.maybe_delete_offsets(asked)
            subscribed = "?" if g.subscribed_topics is None else "+".join(sorted(g.subscribed_topics)) or "-"
            out.append(f"delete-offsets {d.error.name} subscribed={subscribed}")
            out += [f"  {t}/{p} {e.name}" for t, parts in d.results for p, e in parts]
            out.append("tombstones " + (",".join(f"{t}/{p}" for t, p in d.tombstones) or "-"))
            if d.tombstones and cmd.text("stored", "yes") == "yes":
                g.expire(list(d.tombstones))
        elif cmd.name == "store-failed":
            decisions = g.maybe_store_failed(now, cmd.text("error", "NOT_ENOUGH_REPLICAS"))
        elif cmd.name != "state":
            raise ScenarioError(f"{cmd.where}: unknown command {cmd.name}")
        out += [decision_line(d) for d in decisions]
        out.append(self.state_line())
        return "\n".join(out)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(HERE, "*.txt"))), ids=os.path.basename)
def test_group_scenario_matches_its_golden_output(path: str) -> None:
    run_file(path, Scenario())
