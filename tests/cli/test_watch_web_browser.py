"""`watch --web` in a real headless browser (Debian's chromium driven by selenium):
the page draws the cluster from the real events, and a killed follower leaves
the ISR on the page. Skips with a message where chromium or selenium is absent
(apt-get install -y chromium chromium-driver; pip install selenium)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minibroker.client import Admin, Producer
from minibroker.testing.fixtures import cluster, cluster_factory  # noqa: F401
from minibroker.testing.wait import until_sync

pytestmark = pytest.mark.cluster
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
# MINIBROKER_SCREENSHOTS=docs/img re-records the README's screenshots; otherwise they go to tmp_path.
SHOTS = os.environ.get("MINIBROKER_SCREENSHOTS")


@pytest.fixture
def browser():
    if not CHROMIUM or not DRIVER:
        pytest.skip("no headless browser: apt-get install -y chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--hide-scrollbars"):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield d
    d.quit()


@pytest.fixture
def watch_web(cluster):
    env = dict(os.environ, MINIBROKER_HOME=cluster.data_dir)
    env.pop("MINIBROKER_BOOTSTRAP", None)
    p = subprocess.Popen([sys.executable, "-m", "minibroker.cli", "watch", "--web", "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    try:
        line = p.stdout.readline()
        assert "http://" in line, line + (p.stdout.read() if p.poll() is not None else "")
        yield line.split("open ", 1)[1].split()[0]
    finally:
        p.terminate()
        p.wait(10)


def isr_on_page(driver, part="orders-0"):
    return driver.execute_script(
        "const e = document.getElementById('part-' + arguments[0]); return e ? e.dataset.isr : null;", part)


def replica_classes(driver, broker, part="orders-0"):
    return driver.execute_script(
        "const g = document.querySelector("
        "'#part-' + arguments[0] + ' g.replica[data-broker=\"' + arguments[1] + '\"]');"
        "return g ? g.getAttribute('class') : null;", part, str(broker))


def broker_state_on_page(driver, broker):
    return driver.execute_script(
        "const e = document.getElementById('broker-' + arguments[0]); return e ? e.dataset.state : null;", str(broker))


async def _setup(c):
    async with Admin(c.bootstrap) as admin:
        await admin.create_topic("orders", assignments=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
        await admin.create_topic("payments", assignments=[[2, 3, 1], [3, 1, 2]])
    async with Producer(c.bootstrap, {"acks": "all"}) as p:
        for i in range(40):
            await p.send("orders", b"o-%d" % i, partition=0)
            await p.send("payments", b"p-%d" % i, partition=i % 2)
        await p.flush()


def test_killed_follower_leaves_the_isr_on_the_page(cluster, watch_web, browser, tmp_path):
    from minibroker.cli.common import run_async
    run_async(_setup(cluster))
    browser.get(watch_web)
    until_sync(lambda: isr_on_page(browser) == "1,2,3", "the page to draw orders-0 with ISR 1,2,3", timeout_s=30)
    until_sync(lambda: "in-isr" in (replica_classes(browser, 3) or "").split(), "broker 3 drawn in the ISR")
    assert browser.execute_script("return document.querySelectorAll('.rack').length") == 3
    assert browser.execute_script("return document.getElementById('part-orders-0').dataset.leader") == "1"
    until_sync(lambda: browser.execute_script("return document.querySelectorAll('#part-orders-0 line.hw').length"),
               "the HW line of orders-0")
    img = Path(SHOTS) if SHOTS else tmp_path
    img.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(img / "watch-web-healthy.png"))

    cluster.kill(3)
    until_sync(lambda: isr_on_page(browser) == "1,2", "the page to show broker 3 leaving the ISR", timeout_s=30)
    until_sync(lambda: "out-of-isr" in (replica_classes(browser, 3) or "").split(), "broker 3 drawn out of the ISR")
    until_sync(lambda: broker_state_on_page(browser, 3) in ("stopped", "unreachable"), "broker 3 shown as down")
    until_sync(lambda: browser.execute_script(
        "return [...document.querySelectorAll('tr.event')].some(r => r.dataset.kind === 'isr_shrink' "
        "&& r.textContent.includes('orders-0') && r.textContent.includes('fenced'))"),
        "the isr_shrink event with its reason in the event log")
    browser.save_screenshot(str(img / "watch-web-follower-killed.png"))
