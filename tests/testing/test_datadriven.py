"""The scenario-file format: a wrong golden output fails, MINIBROKER_REWRITE=1 rewrites it."""
from __future__ import annotations

import pytest

from minibroker.testing.datadriven import REWRITE_ENV, Command, ScenarioError, run_file

TEXT = """# adds numbers
add a=1 b=2
----
4

# empty output is written ok
noop
----
ok
"""


def handler(c: Command) -> str:
    return str(c.num("a") + c.num("b")) if c.name == "add" else ""


def test_a_wrong_golden_output_fails_with_its_line(tmp_path, monkeypatch):
    monkeypatch.delenv(REWRITE_ENV, raising=False)
    p = tmp_path / "s.txt"
    p.write_text(TEXT)
    with pytest.raises(AssertionError, match=r"s.txt:2: add a=1 b=2"):
        run_file(str(p), handler)


def test_the_rewrite_switch_writes_actual_outputs_and_keeps_comments(tmp_path, monkeypatch):
    p = tmp_path / "s.txt"
    p.write_text(TEXT)
    monkeypatch.setenv(REWRITE_ENV, "1")
    run_file(str(p), handler)
    assert p.read_text() == TEXT.replace("----\n4\n", "----\n3\n")
    monkeypatch.delenv(REWRITE_ENV)
    run_file(str(p), handler)


def test_a_command_without_its_separator_is_a_clear_error(tmp_path):
    p = tmp_path / "s.txt"
    p.write_text("add a=1 b=2\n3\n")
    with pytest.raises(ScenarioError, match="not followed by ----"):
        run_file(str(p), handler)
