"""Data-driven scenarios for replica fetch sessions (KIP-227): both ends of
minibroker.broker.fetch_session, wired to each other (testdata/fetch_session_*.txt,
etcd raft's testdata style; MINIBROKER_REWRITE=1 rewrites the golden output).

  build parts=t-0@10,t-1@5      the follower's next Fetch for these positions
  build parts=... same=true     ... which the caller knows equal those of its previous build
  build parts=... changed=t-1   ... which equal those of its previous build but for these (build_changed)
  open replica=2                the leader takes the last built Fetch
  answer t-0=hw:10 t-1=hw:5,start:2,records,error:NAME,diverging
                                the leader's read results (default hw 0, start 0); the
                                response it sends, which the follower takes
  lost                          the last Fetch failed on the way (the follower resets)
  restart                       the leader restarts (its sessions are gone)
"""
from __future__ import annotations

import glob
import os
from typing import Any

import pytest

from minibroker.broker.fetch_session import FetchSession, FetchSessionCache, FollowerSession
from minibroker.errors import ErrorCode, error_name
from minibroker.testing.datadriven import Command, ScenarioError, run_file

HERE = os.path.join(os.path.dirname(__file__), "testdata")


def _key(name: str) -> tuple[str, int]:
    topic, _, index = name.rpartition("-")
    return topic, int(index)


def _entry(index: int, offset: int) -> dict[str, Any]:
    return {"partition": index, "fetch_offset": offset, "current_leader_epoch": 0, "last_fetched_epoch": 0,
            "log_start_offset": 0, "partition_max_bytes": 1_048_576}


def _names(entries: list[tuple[str, dict[str, Any]]]) -> str:
    return ",".join(f"{t}-{p['partition']}@{p['fetch_offset']}" for t, p in entries) or "-"


class SessionScenario:
    def __init__(self) -> None:
        self.follower = FollowerSession()
        self.cache = FetchSessionCache(first_id=100)
        self.request: dict[str, Any] | None = None
        self.session: FetchSession | None = None
        self.full = True
        self.reads: list[tuple[str, dict[str, Any]]] = []

    def run(self, c: Command) -> str:
        if c.name == "build":
            entries = []
            for item in c.text("parts").split(","):
                name, _, offset = item.partition("@")
                topic, index = _key(name)
                entries.append((topic, _entry(index, int(offset))))
            sid, epoch = self.follower.request_ids
            built = None
            if c.has("changed"):
                moved = set(c.text("changed").split(","))
                built = self.follower.build_changed([e for e in entries if f"{e[0]}-{e[1]['partition']}" in moved])
                if built is None:
                    self.request = None
                    return "cannot build from the changed entries alone: build them all"
            send, forgotten, full = built or self.follower.build(entries, same=c.flag("same"))
            self.request = {"session_id": sid, "session_epoch": epoch, "send": send, "forgotten": forgotten}
            gone = ",".join(f"{t['topic']}-{p}" for t in forgotten for p in t["partitions"]) or "-"
            return f"fetch session={sid} epoch={epoch} {'full' if full else 'incremental'} " \
                   f"send={_names(send)} forget={gone}"
        if c.name == "open":
            if self.request is None:
                raise ScenarioError("`build` first")
            r = self.request
            opened = self.cache.open(c.num("replica"), r["session_id"], r["session_epoch"], r["send"],
                                     r["forgotten"])
            if opened.error != ErrorCode.NONE:
                self.follower.reset()
                return f"error {error_name(opened.error)}: {opened.message}\nfollower reset"
            self.session, self.full, self.reads = opened.session, opened.full, opened.requests
            sid = self.session.session_id if self.session is not None else 0
            return f"session={sid} reads={_names(self.reads)}"
        if c.name == "answer":
            if self.session is None:
                raise ScenarioError("`open` first")
            out = []
            for topic, p in self.reads:
                name = f"{topic}-{p['partition']}"
                spec = dict(kv.partition(":")[::2] for kv in c.text(name, "").split(",") if kv)
                error = int(ErrorCode[spec["error"]]) if "error" in spec else 0
                hw, start = int(spec.get("hw", 0)), int(spec.get("start", 0))
                records, diverging = "records" in spec, "diverging" in spec
                if self.session.include((topic, p["partition"]), self.full, error, hw, start, records, diverging):
                    out.append(name)
            self.follower.on_response(self.session.session_id)
            sid, epoch = self.follower.request_ids
            return f"response session={self.session.session_id} partitions={','.join(out) or '-'}\n" \
                   f"follower next session={sid} epoch={epoch}"
        if c.name == "lost":
            self.follower.reset()
            return "follower reset"
        if c.name == "restart":
            self.cache = FetchSessionCache(first_id=200)
            return f"leader sessions={len(self.cache)}"
        raise ScenarioError(f"unknown command {c.name}")


def _files() -> list[str]:
    return sorted(glob.glob(os.path.join(HERE, "fetch_session_*.txt")))


@pytest.mark.parametrize("path", _files(), ids=os.path.basename)
def test_fetch_session_scenario(path: str) -> None:
    run_file(path, SessionScenario().run)


def test_there_are_fetch_session_scenarios() -> None:
    assert _files()
