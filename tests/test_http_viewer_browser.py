"""The live run viewer (``little serve``'s ``/ui``) in headless Chromium, driven by Playwright,
against a real fleet: Redis, ``weed mini``, a worker, the scheduler and ``little serve``.

Chromium is the system's (``/usr/bin/chromium``, the Debian package): Playwright downloads
no browser. A missing browser or Playwright is a failure, not a skip. Every page is opened
as a person would: the token typed once into the page's form, kept in ``sessionStorage``.
No test ends with an error in the browser's console (a refused fetch, a script error, a
Content-Security-Policy violation).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from little_dist.http.tokens import TokenStore
from little_dist.world.fleet_keys import api_tokens_key
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.http_fleet_app import STEPS
from tests.http_service import APP, Served, start_serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

CHROMIUM = Path("/usr/bin/chromium")
APPS = [APP, "tests.viewer_fleet_app"]
HOSTILE = '</pre><script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def _token(fleet: FleetEnv, *scopes: str) -> str:
    import redis

    client = redis.Redis.from_url(fleet.redis_url)
    try:
        return TokenStore(client, api_tokens_key(fleet.signal_stream)).create(scopes).token
    finally:
        client.close()


@contextmanager
def _browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install the Debian package 'chromium'")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield browser
        finally:
            browser.close()


class Tab:
    """A page of the viewer with its console errors and navigations recorded."""

    def __init__(self, browser: Any) -> None:
        self.page = browser.new_page()
        self.errors: list[str] = []
        self.navigations = 0
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("framenavigated", lambda frame: self._navigated(frame))

    def _navigated(self, frame: Any) -> None:
        if frame == self.page.main_frame:
            self.navigations += 1

    def open(self, url: str, token: str) -> None:
        self.page.goto(url)
        self.page.fill("#token-input", token)
        self.page.click("#token-form button[type=submit]")


def _submit(served: Served, token: str, workflow: str, run_input: dict[str, Any]) -> str:
    with served.client(token) as http:
        answer = http.post("/v1/runs", json={"workflow": workflow, "input": run_input})
        assert answer.status_code == 202, answer.text
        return str(answer.json()["runId"])


def _fleet(fleet: FleetEnv) -> Served:
    start_worker(fleet, roles=["worker"], app=APPS)
    start_scheduler(fleet)
    return start_serve(fleet, app=APPS)


def test_a_running_runs_timeline_grows_without_a_reload(fleet_env: FleetEnv) -> None:
    served = _fleet(fleet_env)
    token = _token(fleet_env, "runs:read", "runs:submit")
    # 5 steps of 3 s: the page must see the run live. (With 1 s steps a busy machine took
    # longer than the run to start Chromium and load the page: nothing live was left.)
    run_id = _submit(served, token, "http.steps", {"sleep": 3.0})
    with _browser() as browser:
        tab = Tab(browser)
        tab.open(f"{served.url}/ui/runs/{run_id}", token)
        page = tab.page
        page.wait_for_selector(".run[data-ended='0'] g.bar")
        first = page.locator("g.bar").count()
        page.evaluate("window.__same_page = true")
        navigations = tab.navigations
        page.wait_for_selector(".run[data-status='completed']", timeout=90_000)
        assert first < STEPS, "the run had ended before the page showed it: nothing was tested"
        bars = page.locator("g.bar")
        assert bars.count() == STEPS
        assert {bars.nth(i).get_attribute("data-status") for i in range(STEPS)} == {"completed"}
        assert page.evaluate("window.__same_page") is True  # the same document: no reload
        assert tab.navigations == navigations
        assert "RunCompleted" in page.inner_text("#live")
        assert page.locator("#cancel-run").count() == 0  # the token may not cancel
        assert page.locator("details.step-calls").count() == STEPS
        assert '"n": 4' in page.inner_text("pre.output")
        # The runs list links to the run, with its status.
        page.click("nav.top a")
        page.wait_for_selector(f"tr[data-run-id='{run_id}']")
        assert "completed" in page.inner_text(f"tr[data-run-id='{run_id}']").lower()
        assert tab.errors == []


def test_the_cancel_button_cancels_the_run(fleet_env: FleetEnv) -> None:
    served = _fleet(fleet_env)
    token = _token(fleet_env, "runs:read", "runs:submit", "runs:cancel")
    run_id = _submit(served, token, "http.steps", {"sleep": 2.0})
    with _browser() as browser:
        tab = Tab(browser)
        tab.open(f"{served.url}/ui/runs/{run_id}", token)
        page = tab.page
        page.click("#cancel-run")
        page.wait_for_selector(".run[data-status='cancelled']", timeout=60_000)
        assert "cancelled" in page.inner_text(".failure")
        assert page.locator("#cancel-run").count() == 0
        assert tab.errors == []
    with served.client(token) as http:
        status = http.get(f"/v1/runs/{run_id}").json()
    assert status["status"] == "failed" and status["failure"]["causeCode"] == "cancelled"
    assert status["steps"].get(f"s{STEPS - 1}") != "completed"  # stopped before its end


def test_markup_in_a_runs_output_and_failure_is_shown_not_run(fleet_env: FleetEnv) -> None:
    served = _fleet(fleet_env)
    token = _token(fleet_env, "runs:read", "runs:submit")
    said = _submit(served, token, "viewer.echo", {"text": HOSTILE, "fail": False})
    failed = _submit(served, token, "viewer.echo", {"text": HOSTILE, "fail": True})
    with _browser() as browser:
        tab = Tab(browser)
        page = tab.page
        tab.open(f"{served.url}/ui/runs/{said}", token)
        page.wait_for_selector(".run[data-status='completed']", timeout=60_000)
        assert json.loads(page.inner_text("pre.output")) == {"text": HOSTILE}
        page.goto(f"{served.url}/ui/runs/{failed}")  # the token is kept for the tab
        page.wait_for_selector(".run[data-status='failed']", timeout=60_000)
        assert HOSTILE in page.inner_text(".failure")
        assert page.evaluate("typeof window.__xss") == "undefined"
        assert page.locator("#content img, #content script").count() == 0
        # The list filters by status and workflow.
        page.goto(f"{served.url}/ui?workflow=viewer.*")
        page.wait_for_selector("table.runs")
        assert page.locator("table.runs tbody tr").count() == 2
        page.select_option("select[name=status]", "failed")
        page.click("form.filter button")
        page.wait_for_selector(f"tr[data-run-id='{failed}']")
        assert page.locator("table.runs tbody tr").count() == 1
        assert page.evaluate("typeof window.__xss") == "undefined"
        assert tab.errors == []


def test_a_pending_approval_is_decided_from_the_page_and_the_run_resumes(
    fleet_env: FleetEnv,
) -> None:
    apps = [*APPS, "tests.approvals_fleet_app"]
    start_worker(fleet_env, roles=["worker"], app=apps)
    start_scheduler(fleet_env)
    served = start_serve(fleet_env, app=apps)
    decider = _token(fleet_env, "runs:read", "runs:submit", "approvals:decide")
    reader = _token(fleet_env, "runs:read")
    run_id = _submit(served, decider, "approvals.ask", {})
    with _browser() as browser:
        watching = Tab(browser)  # may look, not decide
        watching.open(f"{served.url}/ui/runs/{run_id}", reader)
        watching.page.wait_for_selector(".approval", timeout=60_000)
        assert watching.page.locator(".approval button").count() == 0
        assert watching.page.locator(".approval-reason").count() == 0
        tab = Tab(browser)
        tab.open(f"{served.url}/ui/runs/{run_id}", decider)
        page = tab.page
        page.wait_for_selector(".approval button.approve", timeout=60_000)
        held = page.inner_text(".approval")
        assert "refund" in held and "no deadline" in held
        assert json.loads(page.inner_text(".approval pre.args")) == {
            "account": "acme-42",
            "amount": 42,
        }
        assert json.loads(page.inner_text(".approval code.rule")) == {
            "tool": "refund",
            "action": "ask",
        }
        assert page.locator(".run[data-status='running']").count() == 1
        page.evaluate("window.__same_page = true")
        page.fill(".approval-reason", "known customer")
        page.click(".approval button.approve")
        page.wait_for_selector(".run[data-status='completed']", timeout=90_000)
        assert page.locator(".approval").count() == 0
        assert "approved" in page.inner_text("#message")
        assert page.evaluate("window.__same_page") is True
        assert '"refunded": 42' in page.inner_text("pre.output")
        # The other tab followed the run to its end without a reload.
        watching.page.wait_for_selector(".run[data-status='completed']", timeout=60_000)
        assert watching.page.locator(".approval").count() == 0
        assert tab.errors == [] and watching.errors == []
    decided = [
        e.payload
        for e in fleet_env.world().list_events(run_id)
        if e.type == "little.approval.decided"
    ]
    assert len(decided) == 1
    assert (decided[0]["decision"], decided[0]["via"], decided[0]["reason"]) == (
        "allow",
        "http",
        "known customer",
    )
