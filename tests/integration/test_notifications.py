"""Notifications configured once for the lab (issue 27, item 4), over a real lab (redis-server, the controller, an
agent, a loop DUT) and its web service: the lab file's ``[notify]`` names a file, a webhook served here and a webhook
that fails, each on a free port. A run's end reaches the file and the good webhook while the failing one is retried
(it holds back neither); the controller keeps each sink's state in the store, and ``GET /api/notifications``, the
hosts page (in headless Chromium too) and ``labctl notifications`` (with and without ``--api``: the same output)
list the three redacted (no URL, whose path holds the token, anywhere), the failing one with its reason."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator import labfile
from orchestrator.labs.lab import wait_for
from orchestrator.notifysinks import listing
from orchestrator.store.models import Run
from tests.conftest import one_workload, start_lab
from tests.integration.test_labctl_api_web import api_labctl
from tests.integration.test_web_browser import Browser, browser  # noqa: F401  (its fixture, on this module's web)
from tests.webfix import WebHandle, start_web

SECRET = "s3cret-T0-B0"          # in both webhooks' paths: never shown, logged or stored


class Hooks:
    """Two webhooks on one local HTTP server: ``/ok/...`` takes a body (204), ``/down/...`` answers 503."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.refused = 0
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.startswith("/ok/"):
                    hooks.got.append(body)
                    self.send_response(204)
                else:
                    hooks.refused += 1
                    self.send_response(503)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.ok, self.down = f"{base}/ok/{SECRET}", f"{base}/down/{SECRET}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def hooks() -> Iterator[Hooks]:
    h = Hooks()
    yield h
    h.server.shutdown()


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory, hooks: Hooks) -> Iterator[WebHandle]:
    """A lab whose lab file has a [notify] table, written before its controller starts (as lab up writes it)."""
    root = tmp_path_factory.mktemp("notifylab")
    labfile.write(root, broker=None, store=None, by="test",
                  notify=labfile.Notify((hooks.ok, hooks.down), (root / "runs.jsonl",)))
    lab = start_lab(root)
    try:
        handle = start_web(lab)
    except BaseException:
        lab.lab.stop()
        raise
    yield handle
    lab.lab.stop()


@pytest.fixture(scope="module")
def ended(web: WebHandle, hooks: Hooks) -> str:
    """A run whose end reached the file and the good webhook, the failing one refused it at least twice."""
    run_id = web.lab.submit(one_workload(1, "quick"))
    web.lab.wait_run(run_id)
    sink = web.lab.lab.root / "runs.jsonl"

    def delivered() -> bool:
        web.check_alive()
        lines = sink.read_text().splitlines() if sink.is_file() else []
        return any(json.loads(x)["run"] == run_id for x in lines) and \
            any(b["run"] == run_id for b in hooks.got) and hooks.refused >= 2
    wait_for(delivered, 60, f"the end of run {run_id} at the file and the good webhook", interval=0.2)

    def recorded() -> bool:              # the controller writes down what its sinks' threads reported at its next pass
        with web.lab.sessions() as s:
            return sorted(r["state"] for r in listing(s)) == ["failing", "ok", "ok"]
    wait_for(recorded, 30, "the controller to record each sink's state", interval=0.2)
    return run_id


def listed(web: WebHandle) -> dict[str, dict[str, Any]]:
    with web.client("viewer") as c:
        r = c.get("/api/notifications")
    assert r.status_code == 200, r.text
    assert SECRET not in r.text and "/ok/" not in r.text and "/down/" not in r.text
    return {row["key"]: row for row in r.json()}


def test_a_runs_end_reaches_the_file_and_webhook_while_a_failing_webhook_is_retried(
        web: WebHandle, hooks: Hooks, ended: str) -> None:
    sink = web.lab.lab.root / "runs.jsonl"
    assert [json.loads(x)["run"] for x in sink.read_text().splitlines()] == [ended]      # once
    (body,) = [b for b in hooks.got if b["run"] == ended]
    assert body["event"] == "run.ended" and body["state"] == "SUCCEEDED"
    with web.lab.sessions() as s:
        run = s.get(Run, ended)
        assert run is not None and run.notified_at is None          # the failing webhook has not taken it
        assert len(run.notified_sinks or []) == 2 and f"file:{sink}" in (run.notified_sinks or [])
    log = (web.lab.lab.root / "logs" / "controller.log").read_text()
    assert "notifications of run ends to webhook http://127.0.0.1/… (webhook:" in log
    assert SECRET not in log


def test_the_api_lists_each_sink_redacted_with_its_state(web: WebHandle, ended: str) -> None:
    rows = listed(web)
    assert len(rows) == 3 and all(r["origin"] == "lab file" and r["active"] for r in rows.values())
    file_row = rows[f"file:{web.lab.lab.root / 'runs.jsonl'}"]
    assert file_row["state"] == "ok" and file_row["delivered"] == 1 and file_row["pending"] == 0
    hooks_ = sorted((r for r in rows.values() if r["kind"] == "webhook"), key=lambda r: r["state"])
    failing, ok = hooks_
    assert ok["state"] == "ok" and ok["delivered"] == 1 and ok["last_failure_at"] is None
    assert failing["state"] == "failing" and failing["last_error"] == "Service Unavailable"
    assert failing["pending"] == 1 and failing["delivered"] == 0 and failing["last_success_at"] is None
    assert ok["target"] == failing["target"] == "http://127.0.0.1/…"
    assert ok["key"] != failing["key"] and all(len(r["key"]) == len("webhook:") + 12 for r in hooks_)
    assert httpx.get(web.url + "/api/notifications", timeout=10).status_code == 401


def test_the_hosts_page_lists_the_same(web: WebHandle, ended: str) -> None:
    rows = listed(web)
    with web.client("viewer") as c:
        page = c.get("/hosts")
    assert page.status_code == 200 and SECRET not in page.text
    assert 'id="notifications"' in page.text
    for key, row in rows.items():
        assert f'id="sink-{key}"' in page.text
        assert f'<span class="state s-{row["state"]}">{row["state"]}</span>' in page.text
    assert "Service Unavailable" in page.text and "http://127.0.0.1/…" in page.text


def test_the_overview_says_which_sink_fails(web: WebHandle, ended: str) -> None:
    """The page the morning starts on names the failing sink (only it), redacted, with its reason and what waits."""
    with web.client("viewer") as c:
        page = c.get("/")
    assert page.status_code == 200 and SECRET not in page.text
    line = page.text.split('id="sinks-failing">', 1)[1].split("</p>", 1)[0]
    assert line.startswith("1 notification sink failing") and "webhook http://127.0.0.1/…" in line, line
    assert "Service Unavailable" in line and "1 pending" in line and "runs.jsonl" not in line, line


def test_the_hosts_page_in_a_browser(browser: Browser, web: WebHandle, ended: str) -> None:  # noqa: F811
    browser.login(web.tokens["viewer"], "/hosts")
    page = browser.page
    cells = page.locator("#notifications tbody tr")
    assert cells.count() == 3
    text = page.inner_text("#notifications")
    assert "failing" in text and "Service Unavailable" in text and SECRET not in text
    assert page.locator("#notifications table").is_visible()
    browser.check("/hosts with notifications")


def test_labctl_notifications_is_the_same_with_and_without_api(web: WebHandle, ended: str,
                                                                tmp_path: Path) -> None:
    """The rows change while the failing webhook is retried (its last failure): compared when the store's answer
    did not change around the API's."""
    through_api = api_labctl(web, tmp_path)
    for args in (("notifications",), ("notifications", "--json")):
        for _ in range(10):
            before, remote, after = web.lab.labctl(*args), through_api(*args), web.lab.labctl(*args)
            assert before.returncode == remote.returncode == 0, (before.stderr, remote.stderr)
            if before.stdout == after.stdout:
                break
        assert remote.stdout == before.stdout, (args, before.stdout, remote.stdout)
        assert SECRET not in remote.stdout
    shown = web.lab.labctl("notifications")
    assert "Service Unavailable" in shown.stdout and "failing" in shown.stdout and "lab file" in shown.stdout
    rows = json.loads(web.lab.labctl("notifications", "--json").stdout)
    assert sorted(r["state"] for r in rows) == ["failing", "ok", "ok"]

