"""`minibroker secret create FILE`: the compose file's one-shot secret service, and anyone's."""
import os
import stat

from click.testing import CliRunner

from minibroker.cli.secret import secret


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_it_generates_a_0600_secret_then_keeps_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MINIBROKER_CLUSTER_SECRET", raising=False)
    f = tmp_path / "cluster.secret"
    r = CliRunner().invoke(secret, ["create", str(f)])
    assert r.exit_code == 0 and "generated" in r.output and _mode(f) == 0o600
    first = f.read_text()
    os.chmod(f, 0o644)
    r = CliRunner().invoke(secret, ["create", str(f)])
    assert r.exit_code == 0 and "kept" in r.output and f.read_text() == first and _mode(f) == 0o600


def test_a_secret_from_the_environment_is_written_and_a_short_one_refused(tmp_path, monkeypatch):
    f = tmp_path / "cluster.secret"
    monkeypatch.setenv("MINIBROKER_CLUSTER_SECRET", "mine-and-long-enough-1234")
    r = CliRunner().invoke(secret, ["create", str(f)])
    assert r.exit_code == 0 and f.read_text().strip() == "mine-and-long-enough-1234" and _mode(f) == 0o600
    monkeypatch.setenv("MINIBROKER_CLUSTER_SECRET", "short")
    r = CliRunner().invoke(secret, ["create", str(tmp_path / "other")])
    assert r.exit_code == 2 and not (tmp_path / "other").exists()
