"""pytest fixtures for integration tests against a real local cluster.

Use from any test module or conftest:

    from minibroker.testing.fixtures import cluster, cluster_factory, shared_cluster  # noqa: F401

`cluster` is a fresh 3-broker cluster per test (fast timings: fencing after
2 s, ISR shrink after 2 s of lag), on random 127.x.y.z addresses and free
ports under the test's tmp_path, with the fault proxy in front of every
inter-process path. `cluster_factory(**kw)` makes more (any
`LocalCluster.create` argument: brokers=, overrides=, proxied=, fast=).
`shared_cluster` is one cluster per module for tests that leave it healthy.
Everything is SIGKILLed at teardown; data and logs stay in tmp_path.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

import pytest

from minibroker.testing.cluster import ClusterError, LocalCluster


def start_cluster(path: Path | str, **kw: Any) -> LocalCluster:
    """Create and start a cluster; returns once every broker is RUNNING.

    Free ports are picked and released before the processes bind them, so
    another process may take one in between: a start that fails with
    "Address already in use" is retried on new ports (twice at most)."""
    kw.setdefault("free_ports", True)
    kw.setdefault("fast", True)
    for attempt in range(3):
        where = Path(path) if attempt == 0 else Path(f"{path}-retry{attempt}")
        c = LocalCluster.create(str(where), **kw)
        try:
            c.start()
            c.wait_running_sync(60)
            return c
        except ClusterError as exc:
            c.destroy()
            if "already in use" not in str(exc).lower() or not kw["free_ports"] or attempt == 2:
                raise
        except BaseException:
            c.destroy()
            raise
    raise AssertionError("unreachable")


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    made: list[LocalCluster] = []

    def make(**kw: Any) -> LocalCluster:
        c = start_cluster(tmp_path / f"cluster-{len(made)}", **kw)
        made.append(c)
        return c
    yield make
    for c in made:
        c.destroy()


@pytest.fixture
def cluster(cluster_factory: Callable[..., LocalCluster]) -> LocalCluster:
    return cluster_factory()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(tmp_path_factory.mktemp("shared-cluster") / "cluster")
    yield c
    c.destroy()
