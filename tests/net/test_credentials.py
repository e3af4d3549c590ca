"""No built-in secret: where a process finds the cluster secret, and files that stay 0600."""
from __future__ import annotations

import os
import stat

import pytest

from minibroker.config import DEFAULTS, Config, ConfigError
from minibroker.net.credentials import (
    cluster_secret, ensure_secret_file, generate_secret, read_secret_file, write_private_file,
)

GOOD = "a-good-long-cluster-secret"


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_there_is_no_built_in_secret_and_a_process_without_one_is_told_how_to_set_it():
    assert not DEFAULTS["minibroker.cluster.secret"]
    assert "minibroker-dev-secret" not in DEFAULTS.values()
    with pytest.raises(ConfigError) as e:
        cluster_secret(Config.load(environ={}))
    assert "MINIBROKER_CLUSTER_SECRET" in str(e.value) and "no built-in default" in str(e.value)


def test_minibroker_cluster_secret_in_the_environment_is_the_secret():
    assert cluster_secret(Config.load(environ={"MINIBROKER_CLUSTER_SECRET": GOOD})) == GOOD
    # the generic spelling still works
    assert cluster_secret(Config.load(environ={"MINIBROKER_MINIBROKER_CLUSTER_SECRET": GOOD})) == GOOD


def test_a_secret_file_named_in_the_environment_is_read(tmp_path):
    path = tmp_path / "s"
    write_private_file(str(path), (GOOD + "\n").encode())
    cfg = Config.load(environ={"MINIBROKER_CLUSTER_SECRET_FILE": str(path)})
    assert cluster_secret(cfg) == GOOD


def test_a_short_secret_or_a_missing_or_empty_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="at least 16"):
        cluster_secret(Config.load(overrides={"minibroker.cluster.secret": "short"}))
    with pytest.raises(ConfigError, match="cannot read"):
        cluster_secret(Config.load(overrides={"minibroker.cluster.secret.file": str(tmp_path / "none")}))
    (tmp_path / "empty").write_text("")
    with pytest.raises(ConfigError, match="empty"):
        read_secret_file(str(tmp_path / "empty"))


def test_private_files_are_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        write_private_file(str(tmp_path / "k"), b"x")
        secret = ensure_secret_file(str(tmp_path / "s"))
    finally:
        os.umask(old)
    assert _mode(tmp_path / "k") == 0o600 and _mode(tmp_path / "s") == 0o600
    assert ensure_secret_file(str(tmp_path / "s")) == secret       # an existing secret is kept
    write_private_file(str(tmp_path / "k"), b"y")                    # replaced, still 0600
    assert _mode(tmp_path / "k") == 0o600 and (tmp_path / "k").read_bytes() == b"y"


def test_generated_secrets_are_long_and_distinct():
    a, b = generate_secret(), generate_secret()
    assert a != b and len(a) >= 40


def test_broker_and_controller_refuse_to_start_without_a_secret(tmp_path):
    from minibroker.broker.server import BrokerServer
    from minibroker.controller.server import ControllerServer
    base = {"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "d"),
            "metadata.log.dir": str(tmp_path / "m")}
    with pytest.raises(ConfigError, match="MINIBROKER_CLUSTER_SECRET"):
        BrokerServer(Config.load(overrides=base, environ={}))
    with pytest.raises(ConfigError, match="MINIBROKER_CLUSTER_SECRET"):
        ControllerServer(Config.load(overrides={**base, "listeners": ""}, environ={}))


def test_the_controller_binds_loopback_unless_configured_otherwise(tmp_path):
    from minibroker.controller.server import ControllerServer
    c = ControllerServer(Config.load(overrides={"minibroker.cluster.secret": GOOD,
                                                "metadata.log.dir": str(tmp_path / "m")}, environ={}))
    assert c.listeners == {"CONTROLLER": ("127.0.0.1", 9093)}
