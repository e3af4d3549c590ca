"""The follower fetcher's reactions to a leader's answers (R3-R7), with the
leader's side scripted: each test states what the leader answers and checks
what the follower does to its real log. Replication against a real leader
is in test_replica_manager_tcp.py."""
from __future__ import annotations

import asyncio
import functools
import os
from typing import Any
from collections.abc import Callable

import pytest

from minibroker.broker.fetcher import FetcherManager, FetcherSettings
from minibroker.broker.partition import Partition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event
from minibroker.metadata import PartitionRecord
from minibroker.protocol.api import ApiKey
from minibroker.records import build_batch, stamp
from minibroker.storage import LogConfig, PartitionLog
from minibroker.testing import wait

KEY = ("t", 0)
until = functools.partial(wait.until, timeout_s=5.0)


class ScriptedLeader:
    """A connection whose answers come from `answer(api, body)`; records requests."""

    def __init__(self, answer: Callable[[int, dict], dict]) -> None:
        self.answer = answer
        self.requests: list[tuple[int, dict]] = []
        self.closed = False
        self._tasks: set[asyncio.Task] = set()

    async def request(self, api: int, body: dict, *, timeout_ms: int = 30_000) -> dict:
        self.requests.append((int(api), body))
        return await self.respond(api, body)

    async def respond(self, api: int, body: dict) -> dict:
        await asyncio.sleep(0)                  # yield once, as a real round trip would
        resp = self.answer(int(api), body)
        if isinstance(resp, KafkaError):
            raise resp
        return resp

    def send_request(self, api: int, body: dict, on_done: Callable[[dict | None, KafkaError | None], None], *,
                     timeout_ms: int = 30_000) -> None:
        """The fetcher's way: written at once, as a connection writes it; the answer (or the error)
        reaches `on_done` on a later loop turn."""
        self.requests.append((int(api), body))

        async def exchange() -> None:
            try:
                resp = await self.respond(api, body)
            except KafkaError as exc:
                on_done(None, exc)
                return
            on_done(resp, None)
        self._tasks.add(task := asyncio.ensure_future(exchange()))
        task.add_done_callback(self._tasks.discard)

    def fetches(self) -> list[dict]:
        return [b for a, b in self.requests if a == ApiKey.FETCH]


class Peers:
    def __init__(self, conn: ScriptedLeader) -> None:
        self.conn = conn
        self.dropped = 0

    async def get(self, broker_id: int) -> ScriptedLeader:
        return self.conn

    def drop(self, broker_id: int) -> None:
        self.dropped += 1


class Hooks:
    def __init__(self) -> None:
        self.progress: list[tuple[int, int]] = []
        self.truncated = 0
        self.changes = 0

    def on_follower_progress(self, part: Partition, old_hw: int, appended: int) -> None:
        self.progress.append((old_hw, appended))

    def on_follower_truncated(self, part: Partition) -> None:
        self.truncated += 1

    def flush(self, parts: list[Partition]) -> None:
        return None                 # nothing to wait for, as without minibroker.fsync.before.ack

    def state_changes(self) -> int:
        return self.changes

    def changed_since(self, count: int) -> set | None:
        return None                 # no change log: every build past an idle one looks at every partition


def follower(tmp_path, batches: list[tuple[int, int]] = (), events: list[Event] | None = None) -> Partition:
    sink = events.append if events is not None else (lambda e: None)
    lg = PartitionLog(os.path.join(tmp_path, "t-0"), LogConfig(), event_sink=sink)
    for epoch, n in batches:
        for _ in range(n):
            lg.append_as_leader(build_batch([b"v"], timestamp_ms=1), epoch)
    p = Partition("t", 0, node_id=2, log=lg, hw=0, sink=sink)
    p.make_follower(PartitionRecord("t", 0, (1, 2), (1, 2), 1, 5, 0), 0)
    return p


def answer_partition(**fields: Any) -> dict:
    e = {"partition": 0, "error": 0, "high_watermark": 0, "last_stable_offset": 0, "log_start_offset": 0,
         "diverging_epoch": None, "preferred_read_replica": -1, "current_leader": None, "records": b""}
    e.update(fields)
    return {"error": 0, "topics": [{"topic": "t", "partitions": [e]}]}


class PeersWithCurrent(Peers):
    """Peers that offer the open connection without a coroutine, as the broker's do: the fetcher
    then carries plain answers out in their callback and writes the next Fetch from there."""

    def current(self, broker_id: int) -> ScriptedLeader:
        return self.conn


def manager(conn: ScriptedLeader, hooks: Hooks, events: list[Event], clock=lambda: 0) -> FetcherManager:
    peers = PeersWithCurrent(conn) if FAST_LANE[0] else Peers(conn)
    return FetcherManager(settings=FetcherSettings(replica_id=2, backoff_ms=60_000), peers=peers,
                          broker_epoch=lambda: 33, hooks=hooks, sink=events.append, clock=clock)


FAST_LANE = [True]


@pytest.fixture(autouse=True, params=["fast lane", "task only"])
def lane(request):
    """Every test twice: answers carried out in the Fetch's callback (the broker's case), and every
    answer handed to the fetch loop's task (peers without `current`)."""
    FAST_LANE[0] = request.param == "fast lane"
    yield
    FAST_LANE[0] = True


@pytest.fixture
def events() -> list[Event]:
    return []


async def test_fetch_request_carries_offset_epochs_and_broker_epoch(tmp_path, events):
    part = follower(tmp_path, [(3, 2)])
    conn = ScriptedLeader(lambda api, body: answer_partition(high_watermark=2))
    fm = manager(conn, Hooks(), events)
    fm.add(part, 1, 5)
    await until(lambda: conn.fetches())
    await fm.shutdown()
    body = conn.fetches()[0]
    p = body["topics"][0]["partitions"][0]
    assert (body["replica_id"], body["broker_epoch"]) == (2, 33)
    assert (p["fetch_offset"], p["current_leader_epoch"], p["last_fetched_epoch"]) == (2, 5, 3)


async def test_follower_appends_verbatim_and_takes_min_of_leader_hw_and_own_leo(tmp_path, events):
    part = follower(tmp_path)
    batch = stamp(build_batch([b"a", b"b"]), 0, 5)
    hooks = Hooks()
    sent = []

    def answer(api: int, body: dict) -> dict:
        off = body["topics"][0]["partitions"][0]["fetch_offset"]
        sent.append(off)
        return answer_partition(records=batch if off == 0 else b"", high_watermark=10)

    fm = manager(ScriptedLeader(answer), hooks, events)
    fm.add(part, 1, 5)
    await until(lambda: len(sent) >= 3)
    await fm.shutdown()
    assert part.log.read(0, 1 << 20) == batch
    assert part.hw == 2 and sent[:2] == [0, 2]        # the next fetch offset is the acknowledgement
    assert hooks.progress[0] == (0, len(batch))


async def test_the_next_fetch_leaves_before_the_rounds_progress_is_reported(tmp_path, events):
    """The next Fetch acknowledges the append: it leaves as soon as the batch is in the log, and the
    hooks hear of the append and the HW move on the loop's next turn."""
    part = follower(tmp_path)
    batch = stamp(build_batch([b"a"]), 0, 5)
    seen: list[tuple[int, int, int]] = []

    class Watching(Hooks):
        def on_follower_progress(self, p: Partition, old_hw: int, appended: int) -> None:
            super().on_follower_progress(p, old_hw, appended)
            seen.append((len(conn.fetches()), p.leo, p.hw))

    conn = ScriptedLeader(lambda api, body: answer_partition(
        records=batch if body["topics"][0]["partitions"][0]["fetch_offset"] == 0 else b"", high_watermark=1))
    hooks = Watching()
    fm = manager(conn, hooks, events)
    fm.add(part, 1, 5)
    await until(lambda: seen)
    await fm.shutdown()
    assert seen[0] == (2, 1, 1), "the Fetch at offset 1 had left when the append and HW were reported"
    assert conn.fetches()[1]["topics"][0]["partitions"][0]["fetch_offset"] == 1
    assert hooks.progress[0] == (0, len(batch))


@pytest.mark.parametrize("waits", [True, False])
async def test_the_next_fetch_waits_for_the_flush_of_what_it_acknowledges(tmp_path, events, waits):
    """minibroker.fsync.before.ack: when the hooks' flush gives something to wait on, the next Fetch
    leaves only once it is done; None (nothing fsynced) lets it leave at once."""
    part = follower(tmp_path)
    batch = stamp(build_batch([b"a"]), 0, 5)
    flushed = asyncio.get_running_loop().create_future()
    asked: list[list[Partition]] = []

    class Flushing(Hooks):
        def flush(self, parts: list[Partition]):       # type: ignore[override]
            asked.append(parts)
            return flushed if waits else None

    conn = ScriptedLeader(lambda api, body: answer_partition(
        records=batch if body["topics"][0]["partitions"][0]["fetch_offset"] == 0 else b"", high_watermark=1))
    fm = manager(conn, Flushing(), events)
    fm.add(part, 1, 5)
    await until(lambda: asked)
    assert asked == [[part]] and part.leo == 1
    if waits:
        for _ in range(5):
            await asyncio.sleep(0)                   # absence check: the flush holds the next Fetch
        assert len(conn.fetches()) == 1
        flushed.set_result(None)
    await until(lambda: len(conn.fetches()) >= 2)
    await fm.shutdown()
    assert conn.fetches()[1]["topics"][0]["partitions"][0]["fetch_offset"] == 1


def test_a_states_log_view_follows_every_change_of_the_log_and_its_epochs(tmp_path):
    """FetchState.view copies the epoch entries only when the epoch cache moved; it always equals log_view."""
    from minibroker.broker.fetcher import FetchState, log_view
    from minibroker.replication.follower_core import PartitionFollower
    part = follower(tmp_path)
    st = FetchState(part, PartitionFollower("t-0", 1, 5, 1000))
    assert st.view() == log_view(part) and st.view().epochs == ()
    steps = [lambda: part.append_as_follower(stamp(build_batch([b"a", b"b"]), 0, 3), 0),
             lambda: part.append_as_follower(stamp(build_batch([b"c"]), 2, 3), 0),
             lambda: part.append_as_follower(stamp(build_batch([b"d"]), 3, 5), 0),
             lambda: part.truncate_to(3, 0, "test"),
             lambda: part.log.maybe_increment_log_start_offset(1),
             lambda: part.truncate_fully_and_start_at(10, 0, "test"),
             lambda: part.append_as_follower(stamp(build_batch([b"e"]), 10, 7), 0)]
    for step in steps:
        before = st.view()
        step()
        assert st.view() == log_view(part) and st.view() != before
    assert st.view().epochs == ((7, 10),)


async def test_fenced_at_our_epoch_stops_fetching_until_new_metadata(tmp_path, events):
    part = follower(tmp_path)
    conn = ScriptedLeader(lambda api, body: answer_partition(error=int(ErrorCode.FENCED_LEADER_EPOCH)))
    fm = manager(conn, Hooks(), events)
    st = fm.add(part, 1, 5)
    await until(lambda: st.failed)
    n = len(conn.fetches())
    await asyncio.sleep(0.05)                    # absence check: no fetch may follow within a window (no backoff loop)
    assert len(conn.fetches()) == n == 1
    assert [e.after for e in events if e.kind == "fetch_error"] == ["FENCED_LEADER_EPOCH"]
    st2 = fm.add(part, 1, 6)                          # newer metadata restarts it
    await until(lambda: len(conn.fetches()) > n)
    assert conn.fetches()[-1]["topics"][0]["partitions"][0]["current_leader_epoch"] == 6
    assert st2 is not st
    await fm.shutdown()


async def test_other_partition_errors_back_off(tmp_path, events):
    now = [0]
    part = follower(tmp_path)
    conn = ScriptedLeader(lambda api, body: answer_partition(error=int(ErrorCode.UNKNOWN_LEADER_EPOCH)))
    fm = manager(conn, Hooks(), events, clock=lambda: now[0])
    st = fm.add(part, 1, 5)
    await until(lambda: st.backoff_until_ms == 60_000)
    await asyncio.sleep(0.02)                    # absence check: backoff holds, no second fetch
    assert len(conn.fetches()) == 1 and not st.failed
    await fm.shutdown()


async def test_a_stop_that_meets_a_wake_up_still_stops_the_fetcher(tmp_path, events):
    """The broker's stop cancels each fetcher while it idles; a wake-up in the same
    loop turn (a partition added, a back-off ending) must not swallow that cancel
    (Python 3.11's asyncio.wait_for did, gh-86296: the fetcher went on and the
    stop waited for it forever)."""
    part = follower(tmp_path)
    conn = ScriptedLeader(lambda api, body: answer_partition(error=int(ErrorCode.UNKNOWN_LEADER_EPOCH)))
    fm = manager(conn, Hooks(), events)
    st = fm.add(part, 1, 5)
    await until(lambda: st.backoff_until_ms == 60_000)
    for _ in range(3):
        await asyncio.sleep(0)                   # the fetcher is parked in its idle wait
    other = Partition("t", 1, node_id=2, log=PartitionLog(os.path.join(tmp_path, "t-1"), LogConfig()), hw=0,
                      sink=lambda e: None)
    other.make_follower(PartitionRecord("t", 1, (1, 2), (1, 2), 1, 5, 0), 0)
    fm.add(other, 1, 5)                          # wakes the idle fetcher ...
    stopping = asyncio.ensure_future(fm.shutdown())     # ... and the stop's cancel lands in the same turn
    done, _ = await asyncio.wait([stopping], timeout=5)
    assert done, "the fetcher's stop did not finish: a cancellation was swallowed"


async def test_transport_errors_back_off_every_partition_and_are_reported_once(tmp_path, events):
    part = follower(tmp_path)
    conn = ScriptedLeader(lambda api, body: KafkaError(ErrorCode.REQUEST_TIMED_OUT, "slow"))
    fm = manager(conn, Hooks(), events)
    st = fm.add(part, 1, 5)
    await until(lambda: st.backoff_until_ms > 0)
    await fm.shutdown()
    assert len([e for e in events if e.kind == "fetch_error"]) == 1
    assert fm.peers.dropped == 1


async def test_out_of_range_truncates_to_a_leader_leo_below_ours(tmp_path, events):
    part = follower(tmp_path, [(5, 6)])

    def answer(api: int, body: dict) -> dict:
        if api == ApiKey.LIST_OFFSETS:
            assert body["replica_id"] == 2
            return {"topics": [{"topic": "t", "partitions": [{"partition": 0, "error": 0, "offset": 4,
                                                               "leader_epoch": 5}]}]}
        return answer_partition(error=int(ErrorCode.OFFSET_OUT_OF_RANGE))

    hooks = Hooks()
    fm = manager(ScriptedLeader(answer), hooks, events)
    fm.add(part, 1, 5)
    await until(lambda: part.leo == 4)
    await fm.shutdown()
    assert hooks.truncated >= 1


async def test_out_of_range_restarts_an_empty_log_at_the_leaders_log_start(tmp_path, events):
    part = follower(tmp_path, [(5, 2)])

    def answer(api: int, body: dict) -> dict:
        if api == ApiKey.LIST_OFFSETS:
            ts = body["topics"][0]["partitions"][0]["timestamp"]
            off = 100 if ts == -1 else 50
            return {"topics": [{"topic": "t", "partitions": [{"partition": 0, "error": 0, "offset": off}]}]}
        return answer_partition(error=int(ErrorCode.OFFSET_OUT_OF_RANGE))

    conn = ScriptedLeader(answer)
    fm = manager(conn, Hooks(), events)
    fm.add(part, 1, 5)
    await until(lambda: part.log_start_offset == 50)
    await fm.shutdown()
    assert part.leo == 50 and part.hw == 50


async def test_answer_for_a_restarted_partition_is_dropped(tmp_path, events):
    part = follower(tmp_path)
    batch = stamp(build_batch([b"a"]), 0, 5)
    gate = asyncio.Event()

    class Slow(ScriptedLeader):
        async def respond(self, api: int, body: dict) -> dict:
            if len(self.requests) == 1:
                await gate.wait()
                return answer_partition(records=batch, high_watermark=1)
            await asyncio.sleep(0.001)           # a slow leader's answer: the delay is the behaviour under test
            return answer_partition(high_watermark=0)

    conn = Slow(lambda a, b: {})
    fm = manager(conn, Hooks(), events)
    fm.add(part, 1, 5)
    await until(lambda: conn.requests)
    fetcher = fm.fetchers()[1]
    fetcher.add(part, 6)                             # a newer epoch replaced the state meanwhile
    gate.set()
    await until(lambda: len(conn.requests) >= 2)
    await fm.shutdown()
    assert part.leo == 0


async def test_a_partition_left_out_of_the_answer_backs_off_instead_of_spinning(tmp_path, events):
    part = follower(tmp_path)
    conn = ScriptedLeader(lambda api, body: {"error": 0, "topics": []})
    fm = manager(conn, Hooks(), events)
    st = fm.add(part, 1, 5)
    await until(lambda: st.backoff_until_ms == 60_000)
    await asyncio.sleep(0.02)                    # absence check: backoff holds, no second fetch
    assert len(conn.fetches()) == 1
    await fm.shutdown()


async def test_a_divergence_that_truncates_nothing_backs_off_and_reports_the_stuck_follower(tmp_path, events):
    """No loop without progress: the leader keeps answering a divergence our log already
    satisfies (epoch 3 ends at our LEO 2, nothing to drop). One fetch, one empty truncation,
    then replica.fetch.backoff.ms (60 s here, a manual clock) instead of ~5,000 fetches/s."""
    part = follower(tmp_path, [(3, 2)])
    conn = ScriptedLeader(lambda api, body: answer_partition(diverging_epoch={"epoch": 3, "end_offset": 2}))
    fm = manager(conn, Hooks(), events)
    st = fm.add(part, 1, 5)
    await until(lambda: any(e.kind == "follower_stuck" for e in events))
    await asyncio.sleep(0.05)                    # absence check: the back-off holds, no second fetch
    assert len(conn.fetches()) == 1 and st.backoff_until_ms == 60_000
    stuck = [e for e in events if e.kind == "follower_stuck"]
    assert len(stuck) == 1 and stuck[0].after == "empty_truncation"
    assert "truncation changed nothing (LEO 2, epochs 3:0)" in stuck[0].reason
    assert st.core.status(0)["stuck_reason"] in stuck[0].reason and st.core.status(0)["phase"] == "delayed"
    await fm.shutdown()


async def test_an_idle_session_reuses_its_entries_and_a_change_count_move_rebuilds_them(tmp_path, events):
    part = follower(tmp_path)
    batch = stamp(build_batch([b"a"]), 0, 5)
    hooks = Hooks()
    gate = asyncio.Event()
    state = {"records": b""}

    def answer(api: int, body: dict) -> dict:
        resp = answer_partition(records=state["records"], high_watermark=0) if body["session_epoch"] == 0 \
            or state["records"] else {"error": 0, "topics": []}
        state["records"] = b""
        if len(conn.fetches()) >= 4:
            gate.set()
        return {**resp, "session_id": 7}

    conn = ScriptedLeader(answer)
    fm = manager(conn, hooks, events)
    fm.add(part, 1, 5)
    await until(gate.is_set)
    idle = conn.fetches()[1:4]
    assert [b["session_epoch"] for b in idle] == [1, 2, 3] and all(b["topics"] == [] for b in idle)
    n = len(conn.fetches())
    state["records"] = batch                   # the leader answers the next Fetch with a record
    hooks.changes += 1
    await until(lambda: any(p["fetch_offset"] == 1 for b in conn.fetches()[n:] for t in b["topics"]
                            for p in t["partitions"]))
    await fm.shutdown()
    assert part.leo == 1


class LoggedHooks(Hooks):
    """Hooks with the replica manager's change log: the partitions changed since a count."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, int]] = []

    def state_changes(self) -> int:
        return len(self.log)

    def changed_since(self, count: int) -> set | None:
        return set(self.log[count:]) if 0 <= count <= len(self.log) else None

    def on_follower_progress(self, part: Partition, old_hw: int, appended: int) -> None:
        super().on_follower_progress(part, old_hw, appended)
        self.log.append(part.key)


def followers(tmp_path, n: int) -> list[Partition]:
    parts = []
    for i in range(n):
        lg = PartitionLog(os.path.join(tmp_path, f"t-{i}"), LogConfig())
        p = Partition("t", i, node_id=2, log=lg, hw=0, sink=lambda e: None)
        p.make_follower(PartitionRecord("t", i, (1, 2), (1, 2), 1, 5, 0), 0)
        parts.append(p)
    return parts


def named(body: dict) -> dict[int, int]:
    return {p["partition"]: p["fetch_offset"] for t in body["topics"] for p in t["partitions"]}


async def test_a_session_fetch_after_an_append_looks_only_at_the_partitions_that_moved(tmp_path, events, monkeypatch):
    """With the same partitions ready, a build rebuilds only the entries of partitions the change
    log or the last answer names: a follower of many partitions does not look at every one per Fetch."""
    parts = followers(tmp_path, 4)
    batch = stamp(build_batch([b"a"]), 0, 5)
    hooks = LoggedHooks()
    pending: dict[int, bytes] = {}
    idle = asyncio.Event()

    def answer(api: int, body: dict) -> dict:
        if body["session_epoch"] == 0:
            return {"error": 0, "session_id": 7, "topics": [{"topic": "t", "partitions": [
                answer_partition(partition=i)["topics"][0]["partitions"][0] for i in range(4)]}]}
        if not pending:
            idle.set()
            return {"error": 0, "session_id": 7, "topics": []}
        i, records = pending.popitem()
        resp = answer_partition(partition=i, records=records, high_watermark=1)
        return {**resp, "session_id": 7}

    conn = ScriptedLeader(answer)
    fm = manager(conn, hooks, events)
    for p in parts:
        fm.add(p, 1, 5)
    await until(idle.is_set)
    fetcher = fm._fetchers[1]
    looked: list[tuple[str, int]] = []
    entry = fetcher._entry
    monkeypatch.setattr(fetcher, "_entry", lambda st: looked.append(st.partition.key) or entry(st))
    n = len(conn.fetches())
    idle.clear()
    pending[2] = batch
    await until(lambda: any(named(b).get(2) == 1 for b in conn.fetches()[n:]))
    await until(idle.is_set)
    await fm.shutdown()
    after = conn.fetches()[n:]
    assert [named(b) for b in after if b["topics"]] == [{2: 1}]
    assert set(looked) == {("t", 2)}, "only the partition that moved was looked at"
    assert parts[2].leo == 1 and all(p.leo == 0 for i, p in enumerate(parts) if i != 2)


async def test_a_partition_backing_off_leaves_the_fetch_and_returns_when_its_back_off_ends(tmp_path, events):
    now = [0]
    parts = followers(tmp_path, 3)
    failing = {1}

    def answer(api: int, body: dict) -> dict:
        out = []
        for t in body["topics"]:
            for p in t["partitions"]:
                code = ErrorCode.UNKNOWN_LEADER_EPOCH if p["partition"] in failing else ErrorCode.NONE
                out.append(answer_partition(partition=p["partition"], error=int(code))["topics"][0]["partitions"][0])
        return {"error": 0, "topics": [{"topic": "t", "partitions": out}] if out else []}

    conn = ScriptedLeader(answer)
    fm = manager(conn, Hooks(), events, clock=lambda: now[0])
    sts = [fm.add(p, 1, 5) for p in parts]
    await until(lambda: sts[1].backoff_until_ms == 60_000)
    n = len(conn.fetches())
    await until(lambda: len(conn.fetches()) > n + 2)
    assert all(set(named(b)) == {0, 2} for b in conn.fetches()[n + 1:]), "the backed-off partition is left out"
    failing.clear()
    now[0] = 60_000
    m = len(conn.fetches())
    await until(lambda: any(1 in named(b) for b in conn.fetches()[m:]))
    await fm.shutdown()


async def test_plain_answers_stay_in_the_fast_lane_and_an_error_hands_back_to_the_loop(tmp_path, events):
    """With the broker's peers, a run of plain answers is carried out in the Fetch callbacks: every
    Fetch of the run shares the one future the loop's task waits on. A top-level error goes back to
    the task, which backs off (replica.fetch.backoff.ms: 60 s on this manual clock). Without
    `current`, every answer goes to the task: a future per Fetch."""
    part = follower(tmp_path)
    batches = [stamp(build_batch([b"%d" % i]), i, 5) for i in range(5)]

    def answer(api: int, body: dict) -> dict:
        off = body["topics"][0]["partitions"][0]["fetch_offset"]
        if off < 5:
            return answer_partition(records=batches[off], high_watermark=off)
        return {"error": int(ErrorCode.UNKNOWN_SERVER_ERROR), "message": "boom", "topics": []}
    conn = ScriptedLeader(answer)
    fm = manager(conn, Hooks(), events)
    st = fm.add(part, 1, 5)
    fetcher = fm.fetchers()[1]
    lanes: list = []                 # the futures themselves, kept alive so that ids are not reused
    send = fetcher._send

    def recording_send(conn, ready, body, full, sent, lane, timeout):
        lanes.append(lane)
        send(conn, ready, body, full, sent, lane, timeout)
    fetcher._send = recording_send
    await until(lambda: st.backoff_until_ms == 60_000)
    await fm.shutdown()
    assert part.leo == 5 and len(conn.fetches()) == 6 and len(lanes) == 6
    assert len({id(x) for x in lanes}) == (1 if FAST_LANE[0] else 6)


async def test_an_answer_that_arrives_after_stop_is_not_carried_out(tmp_path, events):
    """Stopping a fetcher (its partitions moved, the broker shuts down) drops the answer in flight:
    nothing appended, no further Fetch, whichever lane would have carried it out."""
    part = follower(tmp_path)
    batch = stamp(build_batch([b"a"]), 0, 5)
    gate = asyncio.Event()

    class Gated(ScriptedLeader):
        async def respond(self, api: int, body: dict) -> dict:
            await gate.wait()
            return answer_partition(records=batch, high_watermark=1)

    conn = Gated(lambda a, b: {})
    fm = manager(conn, Hooks(), events)
    fm.add(part, 1, 5)
    await until(lambda: conn.requests)
    fetcher = fm.fetchers()[1]
    fetcher.stop()
    gate.set()
    await until(lambda: not conn._tasks)             # the answer was delivered
    await fm.shutdown()
    assert part.leo == 0 and len(conn.fetches()) == 1


async def test_a_partition_left_out_after_a_truncation_that_kept_its_leo_rejoins_with_its_new_last_epoch(
        tmp_path, events):
    """Sim seed 99007: the truncation drops only an epoch led here without appends (8 at our LEO 2), so
    the LEO and log start stay; the next Fetches leave the partition out (throttled, RQ5). When it is
    back, its entry names the epoch it now ends with (3), not the dropped one: with 8 the leader answers
    the same divergence for ever."""
    parts = followers(tmp_path, 2)
    lg = parts[1].log
    for _ in range(2):
        lg.append_as_leader(build_batch([b"v"], timestamp_ms=1), 3)
    lg.epoch_cache.assign(8, 2)
    diverged = []

    def answer(api: int, body: dict) -> dict:
        out = []
        for t in body["topics"]:
            for p in t["partitions"]:
                e = answer_partition(partition=p["partition"], high_watermark=10)["topics"][0]["partitions"][0]
                if p["partition"] == 1 and not diverged:
                    diverged.append(p["last_fetched_epoch"])
                    e["diverging_epoch"] = {"epoch": 3, "end_offset": 2}
                    fm.quota.set_throttled({"t": "1:2"}, 2)     # from now on partition 1 is held back
                out.append(e)
        return {"error": 0, "topics": [{"topic": "t", "partitions": out}] if out else []}

    conn = ScriptedLeader(answer)
    fm = manager(conn, Hooks(), events)
    fm.quota.bound = 0
    fm.quota.record(1000, 0)
    for p in parts:
        fm.add(p, 1, 5)
    await until(lambda: diverged and lg.epoch_cache.entries == [(3, 0)])
    n = len(conn.fetches())
    await until(lambda: len(conn.fetches()) > n + 2)
    assert all(1 not in named(b) for b in conn.fetches()[n + 1:]), "the throttled partition is left out"
    fm.quota.set_throttled({}, 2)
    fm.wake_all()
    m = len(conn.fetches())
    back = await until(lambda: next((p for b in conn.fetches()[m:] for t in b["topics"] for p in t["partitions"]
                                     if t["topic"] == "t" and p["partition"] == 1), None))
    assert diverged == [8] and (back["fetch_offset"], back["last_fetched_epoch"]) == (2, 3)
    await fm.shutdown()
