"""The web pages as people use them, in headless Chromium (Debian's, driven by Playwright) against a real lab and
its web service (tests/webfix.py): log in with a token, submit through the form (an invalid suite first: every
problem shown, the input kept), watch the run progress live (the chart gets points, step states change without a
reload), open the finished report (charts drawn with data), compare two runs (both overlaid), and a viewer sees
no cancel button and is refused (403) a forged cancel. On every page: no console error, no failed request, and
at a phone's 390 px no page-level horizontal scroll.

Screenshots for the docs (docs/img/web-*.png) are written when STORAGELAB_SCREENSHOTS=1.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import ConsoleMessage, Page, Request, Response, Route

from labcontract.telemetry import LIVE_KEY_PREFIX as LIVE_PREFIX
from labcontract.transport import redis_client
from tests.chromium import _FIGURES_JS, Chromium, FigureSummary
from tests.webfix import WebHandle, web  # noqa: F401  (the module's lab and web service)

pytestmark = pytest.mark.integration

SHOTS = os.environ.get("STORAGELAB_SCREENSHOTS") == "1"
IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1200, "height": 900}
SUITE = """suite: web-two
profiles:
  - {name: rr4k, rw: randread, bs: 4k, iodepth: 4, runtime: 6s}
  - {name: rw8k, rw: randwrite, bs: 8k, iodepth: 4, runtime: 3s}
"""
BAD_SUITE = """suite: web-bad
profiles:
  - {name: a, rw: sideways, bs: 4k, iodepth: 4, runtime: 2s}
  - {name: b, rw: randread, bs: -3, iodepth: 0, runtime: 2s}
colour: blue
"""
LONG_SUITE = "suite: web-long\nprofiles:\n  - {name: long, rw: randread, bs: 4k, iodepth: 4, runtime: 120s}\n"


@dataclass
class Seen:
    """What the browser complained about or failed to load while a page was open."""

    console: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    allowed: set[int] = field(default_factory=set)       # HTTP statuses this step expects (a form's 422, ...)

    def problems(self) -> list[str]:
        return ([f"console: {m}" for m in self.console] + [f"page error: {e}" for e in self.errors]
                + [f"failed: {f}" for f in self.failed])

    def clear(self) -> None:
        self.console.clear()
        self.errors.clear()
        self.failed.clear()
        self.allowed.clear()


class Browser:
    """A page on the web service with everything it logs or fails recorded; nothing else is reachable."""

    def __init__(self, chromium: Chromium, base: str) -> None:
        self.base = base
        self.seen = Seen()
        chromium.context.set_offline(False)
        chromium.context.clear_cookies()
        self.page = chromium.context.new_page()
        self.page.set_viewport_size(LAPTOP)   # type: ignore[arg-type]

        def on_console(msg: ConsoleMessage) -> None:
            if msg.type in ("error", "warning"):
                status = re.search(r"status of (\d{3})", msg.text)
                if not (status and int(status.group(1)) in self.seen.allowed):
                    self.seen.console.append(f"{msg.type}: {msg.text} ({msg.location.get('url', '')})")

        def on_failed(req: Request) -> None:
            failure = req.failure or ""
            if "ERR_ABORTED" in failure and (req.url.endswith("/live") or req.resource_type == "document"):
                return      # an event stream closed at the run's end, a frame left by navigating on
            self.seen.failed.append(f"{req.method} {req.url}: {failure}")

        def on_response(resp: Response) -> None:
            if resp.status >= 400 and resp.status not in self.seen.allowed:
                self.seen.failed.append(f"{resp.request.method} {resp.url}: HTTP {resp.status}")

        def on_route(route: Route) -> None:
            if route.request.url.startswith(base) or route.request.url.startswith("data:"):
                route.continue_()
            else:
                self.seen.failed.append(f"request leaving the site: {route.request.url}")
                route.abort()

        self.page.on("console", on_console)
        self.page.on("pageerror", lambda exc: self.seen.errors.append(str(exc)))
        self.page.on("requestfailed", on_failed)
        self.page.on("response", on_response)
        self.page.route("**/*", on_route)

    def goto(self, path: str, *, status: int = 200) -> Page:
        if status != 200:
            self.seen.allowed.add(status)
        resp = self.page.goto(self.base + path, wait_until="load")
        assert resp is not None and resp.status == status, (path, resp and resp.status, self.text()[:500])
        return self.page

    def text(self) -> str:
        return self.page.inner_text("body")

    def frames_drawn(self, timeout_s: float = 240.0) -> None:
        """Wait until every report or comparison the page frames (an iframe with data-src, framed once the page
        has loaded: static/frames.js) has loaded: a first drawing takes seconds, minutes on a loaded machine."""
        import time

        deadline = time.monotonic() + timeout_s
        for src in self.page.eval_on_selector_all("iframe[data-src]", "els => els.map(e => e.dataset.src)"):
            while (frame := next((f for f in self.page.frames if f.url.endswith(src)), None)) is None:
                assert time.monotonic() < deadline, f"no frame {src}: {[f.url for f in self.page.frames]}"
                self.page.wait_for_timeout(100)
            frame.wait_for_load_state("load", timeout=max(deadline - time.monotonic(), 1.0) * 1000)

    def login(self, token: str, next_path: str = "/") -> None:
        self.goto(f"/login?next={next_path}")
        self.page.fill("#token", token)
        with self.page.expect_navigation():
            self.page.click("button[type=submit]")
        assert self.page.url == self.base + next_path, self.page.url

    def check(self, where: str) -> None:
        problems = self.seen.problems()
        self.seen.clear()
        assert not problems, f"{where}: " + "\n".join(problems)

    def no_overflow(self, where: str) -> None:
        """No page-level horizontal scroll (wide tables scroll inside their own box)."""
        widths: dict[str, float] = self.page.evaluate(
            "() => ({doc: document.documentElement.scrollWidth, body: document.body.scrollWidth, "
            "view: window.innerWidth})")
        assert widths["doc"] <= widths["view"] and widths["body"] <= widths["view"], f"{where}: {widths}"

    def shot(self, name: str, *, full_page: bool = False) -> None:
        if SHOTS:
            IMG.mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(IMG / name), full_page=full_page)

    def close(self) -> None:
        self.page.close()


@dataclass
class State:
    """What the ordered tests of this module hand on (the runs they made)."""

    runs: list[str] = field(default_factory=list)
    other: str = ""                 # a run of another suite (nothing in common with the others)


@pytest.fixture(scope="module")
def state() -> State:
    return State()


@pytest.fixture
def browser(chromium: Chromium, web: WebHandle) -> Iterator[Browser]:  # noqa: F811
    b = Browser(chromium, web.url)
    try:
        yield b
    finally:
        b.close()
        chromium.context.clear_cookies()
        chromium.context.set_offline(True)      # as the shared fixture keeps it for report files


def figures(frame: Any) -> list[FigureSummary]:
    raw: list[dict[str, Any]] = frame.evaluate(_FIGURES_JS)
    return [FigureSummary(**f) for f in raw]


def report_figures(b: Browser, frame_id: str, path: str) -> list[FigureSummary]:
    """The figures of a report framed by the page (the frame whose URL holds ``path``), once it loaded."""
    b.page.wait_for_selector(f"#{frame_id}", state="attached", timeout=30_000)
    frame = None
    for _ in range(600):
        frame = next((f for f in b.page.frames if path in f.url), None)
        if frame is not None:
            try:
                frame.wait_for_load_state("load", timeout=60_000)
                if frame.evaluate("() => document.querySelectorAll('figure.chart').length") > 0:
                    break
            except Exception:
                pass
        b.page.wait_for_timeout(100)
    assert frame is not None, f"no frame {path}: {[f.url for f in b.page.frames]}"
    return figures(frame)


# ------------------------------------------------------------------ the tests (in order: they share runs)


def test_pages_over_http(web: WebHandle) -> None:  # noqa: F811
    """Without a browser: the login form for 401, the cookie's flags, no open redirect, HTML errors with every
    problem, CSRF on every form, the live stream's 401 / 404, no inline script in any page."""
    with web.client() as c:
        r = c.get("/runs")
        assert r.status_code == 401 and 'name="token"' in r.text and r.headers["www-authenticate"] == "Bearer"
        assert r.headers["content-security-policy"].startswith("default-src 'self'")
        r = c.post("/login", data={"token": web.tokens["engineer"], "next": "//evil.example/x"})
        assert r.status_code == 303 and r.headers["location"] == "/", r.headers
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie and "secure" not in cookie
        r = c.post("/login", data={"token": web.tokens["engineer"], "next": "/runs?state=FAILED"})
        assert r.headers["location"] == "/runs?state=FAILED"
        r = c.get("/runs/no-such-run")
        assert r.status_code == 404 and "no run" in r.text and "<html" in r.text
        r = c.get("/runs", params={"state": "BOGUS", "since": "yesterday"})
        assert r.status_code == 422 and r.text.count("<li>") >= 2 and "BOGUS" in r.text and "yesterday" in r.text
        page = c.get("/")
        assert page.status_code == 200
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf, "every form carries the session's CSRF token"
        for path in ("/", "/runs", "/hosts", "/submit", "/compare", "/regressions", "/login"):
            html = c.get(path).text
            assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), f"{path}: an inline script"
            assert "None" not in re.sub(r"<[^>]+>", " ", html).split(), f"{path} shows 'None'"
        assert c.post("/submit", data={"suite": "demo"}).status_code == 403          # no CSRF token
        assert c.post("/logout").status_code == 403
        r = c.post("/logout", data={"csrf": csrf.group(1)})
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert c.get("/api/runs/no-such-run/live").status_code == 401
        # an admin's release: the controller's refusal shown as a page (nothing of the host is quarantined)
        c.post("/login", data={"token": web.tokens["admin"], "next": "/hosts"})
        csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/hosts").text)
        assert csrf
        r = c.post(f"/hosts/{web.lab.host}/release", data={"csrf": csrf.group(1)})
        assert r.status_code == 409 and "quarantined" in r.text and "<html" in r.text, r.text[:500]
        c.post("/login", data={"token": web.tokens["engineer"]})
        csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/hosts").text)
        assert csrf
        assert c.post(f"/hosts/{web.lab.host}/release", data={"csrf": csrf.group(1)}).status_code == 403
    with web.client("viewer") as c:
        assert c.get("/").status_code == 200                          # a bearer token opens pages too
        r = c.get("/api/runs/no-such-run/live")
        assert r.status_code == 404 and r.json()["detail"].startswith("no run")
        assert c.get("/static/run.js").headers["content-type"].startswith(("text/javascript",
                                                                            "application/javascript"))


def test_login_required_then_every_page_without_error(browser: Browser, web: WebHandle) -> None:  # noqa: F811
    b = browser
    b.goto("/runs", status=401)
    assert b.page.locator("#token").count() == 1, "a page without a session shows the login form"
    b.goto("/login")
    b.page.fill("#token", "slab_not-a-token")
    with b.page.expect_navigation():
        b.seen.allowed.add(401)
        b.page.click("button[type=submit]")
    assert "unknown, revoked or expired token" in b.text()
    b.seen.clear()
    b.login(web.tokens["engineer"], "/runs")
    for path in ("/", "/runs", "/hosts", "/submit", "/compare", "/regressions"):
        b.goto(path)
        assert "engineer" in b.page.inner_text("header"), path
        b.check(path)
    assert b.page.locator("#hosts, .card").count() >= 0
    b.goto("/hosts")
    assert web.lab.host in b.text()
    b.check("/hosts")
    b.goto("/docs")          # the API reference, drawn from the OpenAPI document (no script, no CDN)
    assert b.page.locator("section.op").count() >= 25 and "POST /api/runs" in b.text()
    b.check("/docs")


def test_submit_form_lists_every_problem_then_runs_live(browser: Browser, web: WebHandle,  # noqa: F811
                                                       state: State) -> None:
    b = browser
    b.login(web.tokens["engineer"], "/submit")
    b.page.fill("#suite_yaml", BAD_SUITE)
    b.page.fill("#host", web.lab.host)
    b.page.fill("#devices", "dut0")
    b.page.fill("input[name=runtime]", "soon")
    b.seen.allowed.add(422)
    with b.page.expect_navigation():
        b.page.click("#submit")
    problems = b.page.locator("#problems li").all_inner_texts()
    joined = "\n".join(problems)
    assert len(problems) >= 4, problems
    for needle in ("runtime", "sideways", "profiles[1]", "colour"):
        assert needle in joined, (needle, problems)
    assert b.page.input_value("#suite_yaml").strip() == BAD_SUITE.strip(), "the input is kept"
    assert b.page.input_value("input[name=runtime]") == "soon"
    b.shot("web-submit-errors.png", full_page=True)
    b.check("submit with errors")

    b.page.fill("#suite_yaml", SUITE)
    b.page.fill("input[name=runtime]", "")
    with b.page.expect_navigation():
        b.page.click("#submit")
    m = re.search(r"/runs/([A-Za-z0-9._-]+)$", b.page.url)
    assert m, b.page.url
    run_id = m.group(1)
    state.runs.append(run_id)
    b.page.evaluate("() => { window.__sameDocument = true; }")
    # the live chart gets points, and step states change, without a reload
    b.page.wait_for_function("() => Number(document.getElementById('chart-iops').dataset.points) >= 4",
                             timeout=60_000)
    assert b.page.locator("#chart-iops polyline").count() >= 1
    b.page.wait_for_function("() => document.querySelector('#steps tr[data-state=SUCCEEDED]') !== null",
                             timeout=60_000)
    b.shot("web-run.png", full_page=True)
    b.page.wait_for_selector("#report-frame", state="attached", timeout=90_000)
    assert b.page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
    assert b.page.inner_text("#run-state") == "SUCCEEDED"
    states = b.page.locator("#steps tr[data-step] .st").all_inner_texts()
    assert states and all(s == "SUCCEEDED" for s in states), states
    assert b.page.locator("#cancel").count() == 0, "the cancel button goes when the run ends"
    # the finished report, framed in the page: its charts drawn with data
    figs = report_figures(b, "report-frame", f"/runs/{run_id}/report")
    assert figs, "the report has no figure"
    bad = [p for f in figs for p in f.problems()]
    assert not bad, bad
    b.check("run page")
    # the raw output of each attempt (issue 27: only the API listed artifacts): linked, with its sha256, and what a
    # link downloads is that file (the service checks it against its sha256 and says so in a header)
    b.goto(f"/runs/{run_id}")
    names = b.page.locator("#artifacts tbody tr td:nth-child(3) a").all_inner_texts()
    assert {"fio.json", "job.fio"} <= set(names), names
    got = b.page.evaluate("""async () => {
        const row = [...document.querySelectorAll('#artifacts tbody tr')]
            .find(tr => tr.querySelector('a').textContent === 'fio.json');
        const r = await fetch(row.querySelector('a').href);
        const body = await r.text();
        return {status: r.status, sha: r.headers.get('X-Content-SHA256'), shown: row.querySelector('code').title,
                json: body.trim().startsWith('{')};
    }""")
    assert got["status"] == 200 and got["json"] and got["sha"] == got["shown"], got
    b.check("run page with its raw output")


def test_compare_two_runs_overlaid(browser: Browser, web: WebHandle, state: State) -> None:  # noqa: F811
    assert state.runs, "the submit test made no run"
    with web.client("engineer") as c:
        r = c.post("/api/runs", json={"suite_yaml": SUITE, "host": web.lab.host, "devices": ["dut1"]})
        assert r.status_code == 201, r.text
        second = r.json()["run_id"]
    web.lab.wait_run(second, timeout=120)
    state.runs.append(second)
    b = browser
    b.login(web.tokens["engineer"], "/runs")
    for rid in state.runs[:2]:
        b.page.check(f"input[name=run][value='{rid}']")
    b.shot("web-runs.png")
    with b.page.expect_navigation():
        b.page.click("#compare-btn")
    assert b.page.url.startswith(web.url + "/compare?")
    assert sorted(parse_qs(urlsplit(b.page.url).query)["run"]) == sorted(state.runs[:2])
    figs = report_figures(b, "compare-frame", "/compare/view?")
    assert figs
    bad = [p for f in figs for p in f.problems()]
    assert not bad, bad
    suffixes = [rid[-6:] for rid in state.runs[:2]]
    # a figure overlays both runs: each run is a column (a line's legend) or rows of the "run" column
    overlaid = [f for f in figs if all(any(s in c for c in [*f.headers, *(r[f.headers.index("run")] for r in f.rows
                                                                          if "run" in f.headers)]) for s in suffixes)]
    assert overlaid, [(f.id, f.headers, f.rows[:4]) for f in figs]
    b.check("compare")


def test_viewer_sees_no_cancel_and_a_forged_cancel_is_refused(browser: Browser, web: WebHandle,  # noqa: F811
                                                             state: State) -> None:
    with web.client("engineer") as c:
        r = c.post("/api/runs", json={"suite_yaml": LONG_SUITE, "host": web.lab.host, "devices": ["dut0"]})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
    state.other = run_id
    try:
        b = browser
        b.login(web.tokens["viewer"], f"/runs/{run_id}")
        assert "viewer" in b.page.inner_text("header")
        assert b.page.locator("#cancel, #pause, form[action$='/cancel']").count() == 0
        assert b.page.locator("a[href='/submit']").count() == 0
        b.seen.allowed.add(403)
        status = b.page.evaluate(
            """async (rid) => {
                 const csrf = document.querySelector('form[action="/logout"] input[name=csrf]').value;
                 const r = await fetch('/runs/' + rid + '/cancel', {method: 'POST',
                   body: new URLSearchParams({csrf: csrf, reason: 'forged'})});
                 await r.text();
                 return r.status; }""", run_id)
        assert status == 403
        b.seen.allowed.discard(403)
        b.goto("/submit", status=403)
        assert "needs engineer" in b.text()
        assert web.lab.detail(run_id).run.state in ("QUEUED", "RUNNING"), "the forged cancel was applied"
        b.check("viewer")

        # the engineer's buttons: pause, resume, cancel, then rerun the cancelled step
        b.page.context.clear_cookies()
        b.login(web.tokens["engineer"], f"/runs/{run_id}")
        with b.page.expect_navigation():
            b.page.click("#pause")
        assert "pause accepted" in b.text() and b.page.locator("#resume").count() == 1
        assert b.page.inner_text("#run-state") == "PAUSED"
        with b.page.expect_navigation():
            b.page.click("#resume")
        assert "resume accepted" in b.text() and b.page.locator("#pause").count() == 1
        b.page.fill("input[name=reason]", "done looking")
        with b.page.expect_navigation():
            b.page.click("#cancel")
        assert "cancel accepted" in b.text()
        d = web.lab.wait_run(run_id, timeout=60)
        assert d.run.state == "CANCELLED" and d.run.submitted_by.startswith("token:engineer")
        b.goto(f"/runs/{run_id}")
        with b.page.expect_navigation():
            b.page.click("#rerun")
        assert "rerun accepted" in b.text()
        assert web.lab.detail(run_id).run.state in ("QUEUED", "RUNNING")
        b.check("engineer commands")
    finally:
        with web.client("engineer") as c:
            c.post(f"/api/runs/{run_id}/cancel", json={"reason": "test cleanup"})
        web.lab.wait_run(run_id, timeout=60)


def test_every_page_fits_a_phone(browser: Browser, web: WebHandle, state: State) -> None:  # noqa: F811
    if state.runs:      # the live stream of an ended run: its status, then end, and the stream closes
        with web.client("viewer", timeout=15) as c:
            body = c.get(f"/api/runs/{state.runs[0]}/live").text
        names = re.findall(r"^event: (\w+)$", body, flags=re.M)
        assert names == ["status", "end"], body[:300]
    b = browser
    b.page.set_viewport_size(PHONE)   # type: ignore[arg-type]
    b.goto("/login")
    b.no_overflow("/login")
    b.login(web.tokens["admin"], "/")
    run_id = state.runs[0] if state.runs else ""
    pages = ["/", "/runs", "/hosts", "/submit", "/compare", "/regressions", "/docs"]
    if run_id:
        pages.append(f"/runs/{run_id}")
    if len(state.runs) >= 2:
        pages.append("/compare?" + "&".join(f"run={r}" for r in state.runs[:2]))
    for path in pages:
        b.goto(path)
        b.frames_drawn()         # one drawing at a time, as a viewer paging through would have them
        b.no_overflow(path)
        b.check(path)
    if run_id:
        b.goto(f"/runs/{run_id}")
        b.frames_drawn()
        b.shot("web-phone.png")
        b.check("phone run page")
    if run_id and state.other:
        # runs with no cell in common: the reason shows inside the compare frame (framed error page, 422)
        b.seen.allowed.add(422)
        b.page.set_viewport_size(LAPTOP)   # type: ignore[arg-type]
        b.goto(f"/compare?run={run_id}&run={state.other}")
        b.page.wait_for_selector("#compare-frame", state="attached")
        b.frames_drawn()
        frame = next((f for f in b.page.frames if "/compare/view?" in f.url), None)
        assert frame is not None, [f.url for f in b.page.frames]
        assert "common" in frame.inner_text("#detail") or frame.locator("#problems li").count(), \
            frame.inner_text("body")[:500]
        b.check("compare of runs with nothing in common")


def test_live_viewers_share_one_poll_and_leaving_stops_it(web: WebHandle) -> None:  # noqa: F811
    """20 viewers of a running run cost one Redis GET of its live status a second (the broker's MONITOR
    counts them), and once they all left, none."""
    import threading
    import time

    with web.client("engineer") as c:
        r = c.post("/api/runs", json={"suite_yaml": LONG_SUITE, "host": web.lab.host, "devices": ["dut1"]})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
    gets: list[float] = []
    stop = threading.Event()

    def monitor() -> None:
        assert web.lab.lab.admin_url
        with redis_client(web.lab.lab.admin_url).monitor() as m:  # type: ignore[no-untyped-call]
            for cmd in m.listen():
                if stop.is_set():
                    return
                if str(cmd.get("command", "")).startswith(f"GET {LIVE_PREFIX}"):
                    gets.append(time.monotonic())

    samples: list[int] = [0] * 20
    leave = threading.Event()

    def viewer(i: int) -> None:
        with web.client("viewer", timeout=60) as v, v.stream("GET", f"/api/runs/{run_id}/live") as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            for line in resp.iter_lines():
                if line == "event: sample":
                    samples[i] += 1
                if samples[i] >= 2 and leave.is_set():
                    return

    mon = threading.Thread(target=monitor, daemon=True)
    mon.start()
    try:
        web.lab.wait_step_state(run_id, "RUNNING", timeout=60)
        threads = [threading.Thread(target=viewer, args=(i,), daemon=True) for i in range(20)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while min(samples) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert min(samples) >= 2, samples
        t0 = time.monotonic()
        time.sleep(3)
        window = [g for g in gets if t0 <= g < t0 + 3]
        assert 1 <= len(window) <= 5, f"{len(window)} GETs of the live status in 3 s for 20 viewers"
        leave.set()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        # the poller notices its last viewer left: a window of 3 s without a GET comes, on a loaded machine too
        # (waited for up to 30 s; a poller that never stops fails)
        deadline = time.monotonic() + 30
        while True:
            t1 = time.monotonic()
            time.sleep(3)
            after = [g for g in gets if g >= t1]
            if not after or time.monotonic() > deadline:
                break
        assert after == [], f"{len(after)} GETs after every viewer left"
    finally:
        stop.set()
        with web.client("engineer") as c:
            c.post(f"/api/runs/{run_id}/cancel", json={"reason": "test done"})
        web.check_alive()
