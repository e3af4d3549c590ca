"""minibroker.memory: the allocator thresholds minibroker's own programs set."""
import platform
import subprocess
import sys

import pytest

from minibroker import memory


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_glibc_takes_the_thresholds_in_a_fresh_process():
    code = "from minibroker.memory import tune_allocator; print(tune_allocator())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_the_environment_can_keep_glibcs_defaults(monkeypatch):
    monkeypatch.setenv(memory.DISABLE_ENV, "1")
    assert memory.tune_allocator() is False
