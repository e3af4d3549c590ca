"""`minibroker cluster up --tls` as a user runs it: every listener speaks TLS, clients
connect with `--command-config` (Kafka's property names), a plaintext client is told why it fails."""
import os
import stat

import pytest
from cli_process import cli_cluster, ok, run

from minibroker.testing.cluster import LocalCluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with cli_cluster(str(tmp_path_factory.mktemp("tls") / "home"), "--random-ports", "--fast", "--tls") as e:
        yield e


def _client_properties(env) -> str:
    return LocalCluster.load(env["MINIBROKER_HOME"]).layout.client_properties_file


def test_cluster_up_tls_says_where_the_ca_and_the_client_settings_are(env):
    out = env["_UP_OUTPUT"]
    assert "tls:        every listener" in out
    assert f"--command-config {_client_properties(env)}" in out
    assert "(mode 0600;" in out


def test_keys_and_the_secret_are_0600_and_no_ca_key_is_kept(env):
    c = LocalCluster.load(env["MINIBROKER_HOME"])
    for path in (c.layout.secret_file, os.path.join(c.layout.tls_dir, "server.key")):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert not [f for f in os.listdir(c.layout.tls_dir) if f.startswith("ca") and f.endswith(".key")]


def test_produce_and_consume_through_tls_with_command_config(env):
    cfg = _client_properties(env)
    given = ("--command-config", cfg, "--bootstrap-server", LocalCluster.load(env["MINIBROKER_HOME"]).bootstrap)
    ok(run(env, "topics", "create", "--topic", "secure", "--partitions", "1", "--replication-factor", "3",
           "--config", "min.insync.replicas=3", *given))
    ok(run(env, "produce", "--topic", "secure", "--acks", "all", *given, input=b"one\ntwo\n"))
    out = ok(run(env, "consume", "--topic", "secure", "--from-beginning", *given))
    assert out.splitlines() == ["one", "two"]


def test_the_command_config_file_can_come_from_the_environment(env):
    e = {**env, "MINIBROKER_COMMAND_CONFIG": _client_properties(env),
         "MINIBROKER_BOOTSTRAP": LocalCluster.load(env["MINIBROKER_HOME"]).bootstrap}
    assert "secure" in ok(run(e, "topics", "list"))


def test_the_local_clusters_client_settings_come_with_its_bootstrap_from_the_state_file(env):
    assert "secure" in ok(run(env, "topics", "list"))


def test_a_plaintext_client_against_the_tls_cluster_fails_clearly_and_at_once(env):
    bootstrap = LocalCluster.load(env["MINIBROKER_HOME"]).bootstrap
    r = run(env, "topics", "list", "--bootstrap-server", bootstrap, timeout=30)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "INVALID_CONFIG" in err and "is an SSL listener" in err and "security.protocol=SSL" in err


def test_a_missing_command_config_file_is_a_usage_error(env):
    r = run(env, "topics", "list", "--command-config", "/nonexistent/client.properties", "--bootstrap-server", "x:1")
    assert r.returncode == 2 and "cannot read" in r.stderr.decode()
