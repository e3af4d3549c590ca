"""Long CLI runs: a progress line on stderr only when stderr is a terminal, and a
summary instead of a traceback on Ctrl-C (produce --count, verify, consume)."""
import os
import pty
import select
import signal
import subprocess
import sys

import pytest

from minibroker.client import Admin, ErrorCode, KafkaError
from minibroker.testing.fixtures import cluster, cluster_factory  # noqa: F401
from minibroker.testing.wait import until_sync

pytestmark = pytest.mark.cluster


def env_of(c):
    env = dict(os.environ, MINIBROKER_HOME=c.data_dir, MINIBROKER_BOOTSTRAP=c.bootstrap)
    return env


def start(c, *args, **kw):
    return subprocess.Popen([sys.executable, "-m", "minibroker.cli", *args], env=env_of(c),
                            stdout=kw.pop("stdout", subprocess.PIPE), stderr=kw.pop("stderr", subprocess.PIPE),
                            stdin=kw.pop("stdin", subprocess.DEVNULL), **kw)


def end_offset(c, topic):
    from minibroker.cli.common import run_async

    async def get():
        async with Admin(c.bootstrap, {"default.api.timeout.ms": "5000"}) as a:
            try:
                return sum((await a.topic_offsets(topic)).values())
            except KafkaError as exc:
                if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:   # verify has not created it yet
                    return 0
                raise
    return run_async(get())


def interrupt_when_records_landed(c, p, topic):
    try:
        until_sync(lambda: p.poll() is not None or end_offset(c, topic) > 0, f"records in {topic}", timeout_s=60)
    except AssertionError as exc:
        p.kill()
        out, err = p.communicate(timeout=60)
        raise AssertionError(f"{exc}\n--- stdout:\n{out.decode()}\n--- stderr:\n{err.decode()}") from None
    if p.poll() is not None:
        out, err = p.communicate(timeout=60)
        raise AssertionError(f"exited with {p.returncode} before records landed in {topic}\n--- stdout:\n"
                             f"{out.decode()}\n--- stderr:\n{err.decode()}")
    try:
        p.send_signal(signal.SIGINT)
        return p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()


def make_topic(c, name):
    from minibroker.cli.common import run_async

    async def mk():
        async with Admin(c.bootstrap) as a:
            await a.create_topic(name, 2, 3)
    run_async(mk())


def test_ctrl_c_on_produce_count_prints_a_summary_and_no_bar_in_a_pipe(cluster):
    make_topic(cluster, "load")
    p = start(cluster, "produce", "--topic", "load", "--count", "100000000", "--size", "50")
    _, err = interrupt_when_records_landed(cluster, p, "load")
    text = err.decode()
    assert p.returncode == 130, text
    assert "Interrupted (Ctrl-C) after" in text and "acknowledged" in text
    assert "records sent" in text and "Traceback" not in text
    assert "producing" not in text                      # no progress line in a pipe


def test_ctrl_c_on_verify_stops_sending_and_still_reports(cluster):
    p = start(cluster, "verify", "--topic", "checked", "--duration", "600")
    out, err = interrupt_when_records_landed(cluster, p, "checked")
    text = out.decode()
    assert "Interrupted (Ctrl-C): stopped sending" in text, text + err.decode()
    assert "PASS" in text and p.returncode == 0, text + err.decode()
    assert "verify" not in err.decode().split("\n")[0]  # no progress line in a pipe


def test_consume_shows_progress_on_a_terminal_stderr_while_records_go_to_a_pipe(cluster):
    make_topic(cluster, "shown")
    r = subprocess.run([sys.executable, "-m", "minibroker.cli", "produce", "--topic", "shown", "--count", "500"],
                       env=env_of(cluster), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    master, slave = pty.openpty()
    try:
        p = start(cluster, "consume", "--topic", "shown", "--from-beginning", stderr=slave)
        os.close(slave)
        out, _ = p.communicate(timeout=60)
        seen = b""
        while select.select([master], [], [], 0.5)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
    assert p.returncode == 0
    assert len(out.splitlines()) == 500
    assert b"consuming" in seen and b"Processed a total of 500 messages" in seen


def test_ctrl_c_on_produce_from_stdin_prints_a_summary(cluster):
    make_topic(cluster, "typed")
    p = start(cluster, "produce", "--topic", "typed", stdin=subprocess.PIPE)
    assert p.stdin is not None and p.stderr is not None
    try:
        p.stdin.write(b"one\ntwo\nthree\n")
        p.stdin.flush()                      # stdin stays open, as at a terminal: only Ctrl-C ends it
        until_sync(lambda: p.poll() is None and end_offset(cluster, "typed") >= 3, "3 records in typed",
                   timeout_s=60)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        text = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
        p.stdin.close()
    assert p.returncode == 130, text
    assert "Interrupted (Ctrl-C) after 3 records: 3 acknowledged, 0 failed, 0 without an answer" in text, text
    assert "Traceback" not in text
