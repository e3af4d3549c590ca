"""The fault tools the failure tests rely on: the proxy's hold/release
(delay one direction of a path without cutting it) and the CLI's
`minibroker cluster kill|stop|pause|resume|restart|isolate|heal` on brokers
and on the controller (node 0), against a real cluster."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from minibroker.testing.echo import echo_server

from minibroker.testing.cluster import FreePorts, LocalCluster, proc_state
from minibroker.testing.layout import Route
from minibroker.testing.proxy import FaultProxy, control

from .rig import Rig, make_cluster

HOST = "127.0.0.1"


@pytest.fixture
async def echo_proxy():
    srv, port = await echo_server(HOST)
    free = FreePorts()
    route = Route("b1->b2", 1, 2, (HOST, free(HOST)), (HOST, port))
    proxy = FaultProxy([route])
    ctl = (HOST, free(HOST))
    free.close()                    # the proxy binds them next
    await proxy.start()
    await proxy.serve_control(*ctl)
    yield proxy, route, ctl
    await proxy.close()
    srv.close()


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


async def test_held_responses_arrive_in_order_only_after_release(echo_proxy):
    proxy, route, ctl = echo_proxy
    r, w = await asyncio.open_connection(*route.listen)
    w.write(frame(b"a"))
    assert await asyncio.wait_for(r.readexactly(5), 5) == frame(b"a")
    resp = await control(ctl, {"op": "hold", "src": 1, "dst": 2, "direction": "responses"})
    assert resp["held"] == [[1, 2, "responses"]]
    w.write(frame(b"bc"))
    await w.drain()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(r.readexactly(1), 0.3)            # the echo is held, the connection lives
    await control(ctl, {"op": "release", "src": 1, "dst": 2})
    w.write(frame(b"d"))
    assert await asyncio.wait_for(r.readexactly(11), 5) == frame(b"bc") + frame(b"d")
    w.close()


async def test_held_requests_reach_the_target_only_after_release_even_on_new_connections(echo_proxy):
    proxy, route, ctl = echo_proxy
    proxy.hold(1, 2, "requests")
    r, w = await asyncio.open_connection(*route.listen)
    w.write(frame(b"early"))
    await w.drain()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(r.readexactly(1), 0.3)
    proxy.release(1, 2)
    assert await asyncio.wait_for(r.readexactly(9), 5) == frame(b"early")
    w.close()


async def test_a_hold_after_n_frames_lets_whole_frames_through_then_holds_at_a_boundary(echo_proxy):
    """As a follower's first answer (authentication) passes and its first fetch answer is held."""
    proxy, route, ctl = echo_proxy
    proxy.hold(1, 2, "responses", after=1)
    r, w = await asyncio.open_connection(*route.listen)
    big = frame(b"x" * 100_000)
    w.write(big + frame(b"second") + frame(b"third"))           # one write: the hold splits at a boundary
    await w.drain()
    assert await asyncio.wait_for(r.readexactly(len(big)), 5) == big
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(r.readexactly(1), 0.3)
    proxy.release(1, 2)
    assert await asyncio.wait_for(r.readexactly(10 + 9), 5) == frame(b"second") + frame(b"third")
    w.close()


async def test_hold_of_an_unknown_route_is_refused(echo_proxy):
    _, _, ctl = echo_proxy
    resp = await control(ctl, {"op": "hold", "src": 1, "dst": 9})
    assert resp["ok"] is False and "no route" in resp["error"]


def cli(data_dir: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    return subprocess.run([sys.executable, "-m", "minibroker.cli", "cluster", *args, "--data-dir", data_dir],
                          capture_output=True, text=True, timeout=90, env=env)


@pytest.mark.cluster
async def test_cli_fault_commands_act_on_brokers_and_on_the_controller(cluster_factory):
    c = make_cluster(cluster_factory)
    d = c.data_dir
    try:
        await _exercise_cli(c, d)
    finally:
        c.pids = LocalCluster.load(d).pids        # the CLI restarted processes: tear down those


async def _exercise_cli(c: LocalCluster, d: str) -> None:
    async with Rig(c) as rig:
        await rig.create_topic()
        lead = await rig.leader(0)

        assert cli(d, "pause", str(lead)).returncode == 0
        assert proc_state(c.pids[f"broker-{lead}"]) == "T"
        await rig.wait_leader_not(lead, 0, timeout_s=30)          # fenced past the session timeout
        assert cli(d, "resume", str(lead)).returncode == 0
        await rig.wait_isr_full()

        assert cli(d, "isolate", str(lead)).returncode == 0
        await rig.wait_out_of_isr(lead)
        assert cli(d, "heal").returncode == 0
        await rig.wait_isr_full()

        out = cli(d, "kill", "2")
        assert out.returncode == 0 and "broker 2" in out.stdout
        assert cli(d, "restart", "2").returncode == 0               # waits until RUNNING
        out = cli(d, "stop", "3")
        assert out.returncode == 0
        assert cli(d, "restart", "3").returncode == 0

        for args in (("pause", "0"), ("resume", "0"), ("kill", "0"), ("restart", "0"),
                     ("isolate", "0"), ("heal", "0")):
            out = cli(d, *args)
            assert out.returncode == 0, (args, out.stdout, out.stderr)
            assert "controller" in out.stdout
        await rig.wait_isr_full()

        out = cli(d, "kill", "7")
        assert out.returncode == 1 and "no broker 7" in out.stderr and "Traceback" not in out.stderr
