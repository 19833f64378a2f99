"""Browser fixtures: the built site served on 127.0.0.1, Debian's Chromium driven by Playwright.

Every page blocks and records requests to any other host, and collects console errors and
Content-Security-Policy violations (in the page and in its workers); a test fails if any of them
happened, or if a script set the `window.__pwned` trap that hostile inputs aim at. A failing test
leaves a screenshot in build/e2e/. Predicates for `wait_for_function` are functions (`() => ...`):
Playwright evaluates a bare expression again at every poll with eval, which the policy forbids. `make e2e` builds the site first; run bare (`pytest
tests/e2e`) without a built site, these tests skip.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "site"
ARTIFACTS = ROOT / "build" / "e2e"
CHROMIUM = os.environ.get("CALC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LIVE_TIMEOUT_MS = 90_000  # Pyodide starts in about 5 s here; CI machines can be slower

sys.path.insert(0, str(ROOT / "tools"))
from serve import serve_in_thread  # noqa: E402


def _missing() -> str | None:
    if not (SITE / "vendor" / "pyodide" / "pyodide-lock.json").is_file():
        return "no built site in build/site (run `make site`)"
    if not Path(CHROMIUM).is_file():
        return f"no Chromium at {CHROMIUM} (set CALC_CHROMIUM or apt-get install chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (make site-deps)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _missing()
    if reason is None:
        return
    if os.environ.get("CALC_E2E_REQUIRED"):
        raise pytest.UsageError(f"browser tests cannot run: {reason}")
    for item in items:
        if "tests/e2e" in str(item.path):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def encode(scenario: dict[str, Any]) -> str:
    """The page's share-link encoding: base64url of the JSON, unpadded."""
    return base64.urlsafe_b64encode(json.dumps(scenario).encode()).decode().rstrip("=")


def decode(text: str) -> dict[str, Any]:
    text = text.removeprefix("#s=")
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


@pytest.fixture(scope="session")
def base_url() -> Iterator[str]:
    srv, url = serve_in_thread(SITE)
    yield url
    srv.shutdown()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


# Reported in the page's console, where the console listener reads it (a worker's own violations
# are reported there by Chromium as "... violates the following Content Security Policy ...").
CSP_PROBE = """document.addEventListener('securitypolicyviolation', (e) => console.error(
  `Content Security Policy violation: ${e.effectiveDirective} blocked ${e.blockedURI || 'inline'}`
  + ` at ${e.sourceFile}:${e.lineNumber}`));"""


@dataclass
class Calculator:
    """One browser tab on the calculator, with what it asked for and complained about."""

    page: Any
    base_url: str
    foreign_requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)

    def watch(self, context: Any, allowed_origin: str) -> None:
        """Block and record requests off `allowed_origin`; record errors and CSP violations."""

        def route(r: Any) -> None:
            url = r.request.url
            if url.startswith((allowed_origin, "data:", "blob:")):
                r.continue_()
            else:
                self.foreign_requests.append(url)
                r.abort()

        def console(m: Any) -> None:
            if "content security policy" in m.text.lower():
                self.csp_violations.append(m.text)
            elif m.type == "error":
                self.console_errors.append(m.text)

        context.route("**/*", route)  # the context's route also sees the workers' requests
        context.add_init_script(CSP_PROBE)
        self.page.on("console", console)
        self.page.on("pageerror", lambda e: self.console_errors.append(f"uncaught: {e}"))

    def pwned(self) -> Any:
        """The trap hostile inputs try to set; None unless a script of theirs ran."""
        try:
            return self.page.evaluate("window.__pwned")
        except Exception:
            return None

    def assert_clean(self, console_errors_allowed: bool = False) -> None:
        assert not self.foreign_requests, f"requests to other hosts: {self.foreign_requests}"
        assert not self.csp_violations, f"Content-Security-Policy violations: {self.csp_violations}"
        if not console_errors_allowed:
            assert not self.console_errors, f"console errors: {self.console_errors}"

    def open(self, scenario: dict[str, Any] | None = None, live: bool = True) -> None:
        url = self.base_url + "calculator/" + (f"#s={encode(scenario)}" if scenario else "")
        self.page.goto(url)
        if live:
            self.wait_live()

    def wait_live(self) -> None:
        self.page.wait_for_selector("#estimate-json[data-state=live]", state="attached",
                                    timeout=LIVE_TIMEOUT_MS)

    def report(self) -> dict[str, Any]:
        return json.loads(self.page.text_content("#estimate-json"))  # type: ignore[no-any-return]

    def wait_report_for(self, scenario: dict[str, Any]) -> dict[str, Any]:
        """Wait until the live report is the one for `scenario` (as calc dumps it)."""
        self.page.wait_for_function(
            """exp => { const el = document.getElementById('estimate-json');
                if (el.dataset.state !== 'live') return false;
                return JSON.stringify(JSON.parse(el.textContent).scenario) === JSON.stringify(exp); }""",
            arg=scenario, timeout=LIVE_TIMEOUT_MS)
        return self.report()

    def field(self, name: str) -> Any:
        """The input named `name`, its enclosing <details> opened as a user would."""
        locator = self.page.locator(f'[name="{name}"]')
        locator.evaluate("el => { for (let d = el.closest('details'); d; d = d.parentElement.closest('details')) d.open = true; }")
        return locator


def python_start_messages(calc: Calculator) -> list[str]:
    """What site/assets/pyodide_start.mjs says from now on about starting Python (the worker's
    console, which Playwright reports as the page's)."""
    said: list[str] = []
    calc.page.on("console", lambda m: m.text.startswith("pyodide: ") and said.append(m.text))
    return said


@pytest.fixture
def calculator(browser: Any, base_url: str, request: pytest.FixtureRequest) -> Iterator[Calculator]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    calc = Calculator(page, base_url)
    calc.watch(context, base_url)
    yield calc
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    pwned = calc.pwned()
    context.close()
    assert not pwned, f"a hostile input ran a script: window.__pwned = {pwned!r}"
    calc.assert_clean(request.node.get_closest_marker("console_errors_expected") is not None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "console_errors_expected: the test provokes console errors")
