"""Offline (issue 3): after the first visit the site works with the network gone, through the
precaching service worker (site/sw.js, its file list and version written by tools/precache.py),
and a new deployment is offered as "a new version is available — reload", never mixed in.

Each test serves its own copy of the built site on its own port, so it can stop the server or
change the files; requests to other hosts are blocked and recorded as in the other tests.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve import server  # tools/, put on sys.path by conftest

from .conftest import LIVE_TIMEOUT_MS, SITE, Calculator, python_start_messages

WORKER_ACTIVE = """async () => {
  const r = await navigator.serviceWorker.ready;
  return r.active.state === 'activated';
}"""
# Network errors the browser logs while the server is down (the page's reachability probe).
OFFLINE_NOISE = re.compile(r"net::ERR_(CONNECTION_REFUSED|CONNECTION_RESET|EMPTY_RESPONSE|FAILED)")


class Site:
    """A copy of the built site on a server of its own, which the test can stop."""

    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.copytree(SITE, root)
        self.srv = server(root)
        self.port = self.srv.server_address[1]
        self.running = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.running:
            self.srv.shutdown()
            self.srv.server_close()  # connections are now refused, as with the network gone
            self.running = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path / "site")
    yield s
    s.stop()


@pytest.fixture
def offline_calculator(browser: Any, site: Site, request: pytest.FixtureRequest) -> Iterator[Calculator]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    calc = Calculator(page, site.url)
    calc.watch(context, site.url)  # the context's route also sees the service worker's requests
    yield calc
    context.close()
    calc.console_errors = [e for e in calc.console_errors if not OFFLINE_NOISE.search(e)]
    calc.assert_clean()


def wait_saved(calc: Calculator) -> None:
    """Until the service worker has precached everything and is active."""
    calc.page.wait_for_function(WORKER_ACTIVE, timeout=LIVE_TIMEOUT_MS)


def manifest(site: Site) -> dict[str, Any]:
    m = re.search(r"const MANIFEST = (\{.*?\});", (site.root / "sw.js").read_text())
    assert m, "sw.js carries no precache manifest: tools/precache.py did not run"
    return json.loads(m.group(1))  # type: ignore[no-any-return]


def test_precache_lists_the_runtime_wheels_and_pages(site: Site) -> None:
    data = manifest(site)
    files = set(data["files"])
    lock = json.loads((site.root / "vendor" / "pyodide" / "pyodide-lock.json").read_text())
    wheels = {f"vendor/pyodide/{p['file_name']}" for p in lock["packages"].values()}
    assert wheels <= files
    snapshot = json.loads((site.root / "vendor" / "pyodide" / "snapshot.json").read_text())
    assert {"vendor/pyodide/snapshot.json", f"vendor/pyodide/{snapshot['file']}"} <= files
    assert {"./", "calculator/", "calculator/calc_worker.py", "calculator/calculator.js",
            "vendor/pyodide/pyodide-lock.json", "vendor/pyodide/pyodide.mjs",
            "vendor/pyodide/pyodide.asm.wasm", "vendor/pyodide/python_stdlib.zip",
            "vendor/pyscript/core.js", "assets/offline.js"} <= files
    assert all((site.root / (f if not f.endswith("/") else f + "index.html")).is_file()
               for f in files if f != "./")
    assert re.fullmatch(r"[0-9a-f]{12}", data["version"])


def test_calculator_works_offline_after_the_first_visit(offline_calculator: Calculator, site: Site) -> None:
    calc = offline_calculator
    calc.open()
    wait_saved(calc)
    site.stop()
    said = python_start_messages(calc)
    calc.page.reload()
    calc.wait_live()
    assert any("started from the shipped snapshot" in m for m in said), said  # precached too
    calc.page.wait_for_selector("#offline-notice[data-state=offline]", timeout=LIVE_TIMEOUT_MS)
    assert "offline" in calc.page.inner_text("#offline-notice")
    assert manifest(site)["version"] in calc.page.inner_text("#offline-notice")
    # still computing, not just showing the last result: change an input
    calc.field("training.seq_len").fill("2048")
    report = calc.page.wait_for_function(
        """() => { const el = document.getElementById('estimate-json');
            return el.dataset.state === 'live' && JSON.parse(el.textContent).scenario.training.seq_len === 2048; }""",
        timeout=LIVE_TIMEOUT_MS)
    assert report
    # other pages of the site come from the saved copy too
    calc.page.goto(site.url)
    calc.page.wait_for_selector("#offline-notice[data-state=offline]", timeout=LIVE_TIMEOUT_MS)


def test_new_deployment_is_offered_not_mixed(offline_calculator: Calculator, site: Site) -> None:
    calc = offline_calculator
    calc.open()
    wait_saved(calc)
    old = manifest(site)["version"]
    # a new deployment: a changed file, and so a new precache version in sw.js
    page_js = site.root / "calculator" / "calculator.js"
    page_js.write_text(page_js.read_text() + "\n// deployment 2\n")
    sw = site.root / "sw.js"
    sw.write_text(sw.read_text().replace(f'"version":"{old}"', '"version":"0000deploy02"'))
    calc.page.reload()
    calc.wait_live()
    # the reloaded page is still the old deployment, whole: the new worker waits
    assert "deployment 2" not in calc.page.evaluate(
        "fetch('calculator.js').then(r => r.text())")
    notice = calc.page.wait_for_selector("#offline-notice[data-state=update]", timeout=LIVE_TIMEOUT_MS)
    assert "new version is available" in notice.inner_text()
    with calc.page.expect_navigation():
        calc.page.click("#offline-notice button")
    calc.wait_live()
    calc.page.wait_for_function("() => window.siteOffline && window.siteOffline.ready", timeout=LIVE_TIMEOUT_MS)
    assert calc.page.evaluate("window.siteOffline.version") == "0000deploy02"
    assert "deployment 2" in calc.page.evaluate("fetch('calculator.js').then(r => r.text())")


def test_the_notice_covers_nothing_goes_and_is_said_once_a_visit(offline_calculator: Calculator, site: Site) -> None:
    """Issue 13: "served from the copy saved on this device" stayed for good, fixed over tables
    and inputs. It sits in the page's flow, goes after a few seconds, and the next page of the
    same visit does not say it again."""
    calc = offline_calculator
    calc.open()
    wait_saved(calc)
    calc.page.reload()
    notice = calc.page.wait_for_selector("#offline-notice[data-state=cached]", timeout=LIVE_TIMEOUT_MS)
    assert "saved on this device" in notice.inner_text()
    assert notice.evaluate("el => getComputedStyle(el).position") == "static"
    assert notice.evaluate("el => el.closest('.md-content') !== null"), "the notice is in the page's content"
    calc.page.wait_for_selector("#offline-notice", state="hidden", timeout=10_000)
    calc.page.goto(site.url)
    calc.page.wait_for_function("() => window.siteOffline && window.siteOffline.ready", timeout=LIVE_TIMEOUT_MS)
    assert calc.page.evaluate("document.querySelector('#offline-notice:not([hidden])')") is None
