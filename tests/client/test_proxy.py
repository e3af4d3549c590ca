"""The fault proxy over real sockets, with a plain echo server as the target."""
import asyncio

import pytest

from minibroker.testing.echo import echo_server

from minibroker.testing.layout import Route
from minibroker.testing.proxy import FaultProxy, control
from minibroker.testing.cluster import FreePorts

HOST = "127.0.0.1"


@pytest.fixture
async def setup():
    srv, port = await echo_server()
    free = FreePorts()
    routes = [Route("b1->b2", 1, 2, (HOST, free(HOST)), (HOST, port)),
              Route("b2->b1", 2, 1, (HOST, free(HOST)), (HOST, port)),
              Route("b1->ctl", 1, 0, (HOST, free(HOST)), (HOST, port))]
    proxy = FaultProxy(routes)
    ctl = (HOST, free(HOST))
    free.close()                    # the proxy binds them next
    await proxy.start()
    await proxy.serve_control(*ctl)
    yield proxy, {r.name: r for r in routes}, ctl
    await proxy.close()
    srv.close()


async def read_until_closed(r):
    """b"" once the peer closed or reset the connection."""
    try:
        return await asyncio.wait_for(r.read(), 5)
    except ConnectionError:
        return b""


async def roundtrip(addr, payload=b"ping"):
    r, w = await asyncio.open_connection(*addr)
    w.write(payload)
    await w.drain()
    data = await asyncio.wait_for(r.readexactly(len(payload)), 5)
    return r, w, data


async def test_proxy_forwards_both_ways(setup):
    proxy, routes, _ = setup
    r, w, data = await roundtrip(routes["b1->b2"].listen, b"x" * 200_000)
    assert data == b"x" * 200_000
    w.close()


async def test_data_sent_right_after_connecting_is_not_lost(setup):
    proxy, routes, _ = setup
    for _ in range(20):
        r, w, data = await roundtrip(routes["b2->b1"].listen, b"early")
        assert data == b"early"
        w.close()


async def test_isolating_a_node_cuts_live_connections_and_refuses_new_ones(setup):
    proxy, routes, _ = setup
    r, w, _ = await roundtrip(routes["b1->b2"].listen)
    proxy.isolate(2)
    assert await read_until_closed(r) == b""                     # the live path died
    r2, w2 = await asyncio.open_connection(*routes["b2->b1"].listen)
    w2.write(b"hello")
    assert await read_until_closed(r2) == b""                    # refused
    _, _, ok = await roundtrip(routes["b1->ctl"].listen)          # paths not touching 2 still work
    assert ok == b"ping"


async def test_heal_restores_the_paths(setup):
    proxy, routes, _ = setup
    proxy.isolate(1)
    proxy.heal(1)
    _, w, data = await roundtrip(routes["b1->ctl"].listen)
    assert data == b"ping"


async def test_block_cuts_one_direction_only(setup):
    proxy, routes, _ = setup
    proxy.block(1, 2)
    _, _, data = await roundtrip(routes["b2->b1"].listen)
    assert data == b"ping"
    r, w = await asyncio.open_connection(*routes["b1->b2"].listen)
    w.write(b"x")
    assert await read_until_closed(r) == b""


async def test_control_channel_reports_and_rejects_bad_requests(setup):
    proxy, routes, ctl = setup
    resp = await control(ctl, {"op": "isolate", "node": 2})
    assert resp["ok"] and sorted(map(tuple, resp["blocked"])) == [(1, 2), (2, 1)]
    assert (await control(ctl, {"op": "dance"}))["ok"] is False
    assert (await control(ctl, {"op": "isolate", "node": 9}))["ok"] is False
    resp = await control(ctl, {"op": "heal", "node": 2})
    assert resp["blocked"] == []
