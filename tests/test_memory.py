"""minibroker.memory: the allocator thresholds and collector settings minibroker's own programs set."""
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


def test_the_collector_leaves_the_start_up_heap_alone_in_a_fresh_process():
    """tune_gc in a fresh process (it is process-wide: never in the test runner's): the start-up heap
    frozen, the youngest generation collected after 10,000 net allocations, full collections rarer."""
    code = ("import gc; from minibroker.memory import tune_gc; before = gc.get_freeze_count(); tune_gc(); "
            "print(before, gc.get_freeze_count() > 1000, gc.get_threshold())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0 True (10000, 10, 1000)"

