"""The morning on the web (issue 27, item 3) over a real lab and its web service (tests/webfix.py): the regressions
page (the table ``labctl regressions`` prints, its filters checked and bounded, the acknowledge form for engineers
only, with CSRF), and the compare page's chosen baseline with its verdicts first; then both pages in headless
Chromium (tests/chromium.py) with no console error and no failed request.

The history and the compared runs are stored directly (tests/unit/test_history.py's ``add_run``), as
tests/integration/test_regressions.py stores them: ended runs the controller has nothing to do with.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from orchestrator.store.models import RegressionAck
from tests.integration.test_web_browser import Browser, browser, report_figures  # noqa: F401  (its fixture)
from tests.unit.test_history import DAY, T0, add_run, noisy
from tests.webfix import WebHandle, web  # noqa: F401  (the module's lab and web service)

pytestmark = pytest.mark.integration

CSRF_RE = re.compile(r'name="csrf" value="([^"]*)"')
HOST, SUITE = "reghost", "hist"
UNKNOWN_ID = "0123456789ab"


@pytest.fixture(scope="module")
def seeded(web: WebHandle) -> dict[str, str]:  # noqa: F811
    """A history with one regression (IOPS down 20% at run g012 of reghost's suite hist), a quieter one on another
    host, and two runs to compare (cmp-b slower than cmp-a on 4k-randread, the same on 8k-randwrite; 3 repeats
    each, so that the differences are judged)."""
    values = noisy(12, 10_000) + noisy(12, 8_000, seed=21)
    with web.lab.sessions.begin() as s:
        for i, v in enumerate(values):
            add_run(s, f"g{i:03d}", T0 + i * DAY, {"4k-randread": [{"iops": v}]}, host=HOST, suite=SUITE)
        for i, v in enumerate(noisy(12, 5_000, seed=3) + noisy(12, 3_000, seed=4)):
            add_run(s, f"o{i:03d}", T0 + i * DAY, {"8k-randwrite": [{"iops": v}]}, host="otherhost", suite="other")
        for rid, mean, t in (("cmp-a", 10_000, T0 + 30 * DAY), ("cmp-b", 8_000, T0 + 31 * DAY)):
            add_run(s, rid, t, {"4k-randread": [{"iops": v, "lat_us": 1e6 / v} for v in noisy(3, mean, seed=5)],
                                "8k-randwrite": [{"iops": v, "lat_us": 200.0 + k}
                                                 for k, v in enumerate(noisy(3, 5_000, seed=6))]},
                    host="cmphost", suite="cmp")
    with web.client("viewer") as c:
        listed = c.get("/api/regressions", params={"host": HOST}).json()["regressions"]
    (reg,) = listed
    assert reg["run_id"] == "g012" and reg["metric"] == "iops", listed
    return {"id": reg["id"]}


@contextmanager
def session(web: WebHandle, role: str) -> Iterator[tuple[httpx.Client, str]]:  # noqa: F811
    """A browser-like client logged in with the role's token, and its session's CSRF secret."""
    with httpx.Client(base_url=web.url, timeout=60) as c:
        r = c.post("/login", data={"token": web.tokens[role], "next": "/"})
        assert r.status_code == 303, r.text[:300]
        m = CSRF_RE.search(c.get("/").text)
        assert m and m.group(1)
        yield c, m.group(1)


def row_of(html: str, rid: str) -> str:
    """The table row of regression ``rid`` ('' when it is not listed)."""
    m = re.search(rf'<tr id="reg-{rid}".*?</tr>', html, flags=re.S)
    return m.group(0) if m else ""


# ------------------------------------------------------------------ the regressions page, over HTTP


def test_regressions_page_lists_filters_and_refuses_bad_filters(web: WebHandle,  # noqa: F811
                                                               seeded: dict[str, str]) -> None:
    rid = seeded["id"]
    with web.client() as anon:
        r = anon.get("/regressions")
        assert r.status_code == 401 and 'name="token"' in r.text       # the login form
    with session(web, "viewer") as (v, csrf):
        page = v.get("/regressions")
        assert page.status_code == 200, page.text[:500]
        assert 'href="/regressions" aria-current="page"' in page.text, "the navigation links the page"
        row = row_of(page.text, rid)
        assert row and 'href="/runs/g012"' in row and "4k-randread" in row and "iops" in row, row
        assert re.search(r"-\d+\.\d%", row) and 'data-acknowledged="no"' in row, row
        assert f"reghost · FAST-SSD fw 1.0 · suite {SUITE}" in row
        assert "/ack" not in page.text and "Acknowledge</button>" not in page.text, "a viewer has no ack button"
        # filters: host, suite, since (the change is at T0 + 12 days, 2027-01-27)
        for params, listed in (({"host": HOST}, True), ({"host": "otherhost"}, False), ({"suite": SUITE}, True),
                               ({"suite": "other"}, False), ({"since": "2027-01-01"}, True),
                               ({"since": "2027-06-01"}, False), ({"since": "30d", "host": HOST}, True)):
            r = v.get("/regressions", params=params)
            assert r.status_code == 200, (params, r.text[:300])
            assert bool(row_of(r.text, rid)) is listed, params
            assert f'value="{next(iter(params.values()))}"' in r.text, "the filter is kept in its form"
        other = v.get("/regressions", params={"host": "otherhost"}).text
        assert "otherhost · FAST-SSD" in other and f"suite {SUITE}" not in other
        assert "No regressions" in v.get("/regressions", params={"host": "nohost"}).text
        # bad values: refused with every problem named, never a 500
        r = v.get("/regressions", params={"since": "yesterday", "acked": "maybe"})
        assert r.status_code == 422 and "<html" in r.text, r.text[:300]
        problems = re.findall(r"<li>(.*?)</li>", r.text, flags=re.S)
        assert len(problems) == 2 and "yesterday" in problems[0] and "duration ago" in problems[0], problems
        assert "maybe" in problems[1] and "acknowledged" in problems[1], problems
        for params in ({"host": "h" * 129}, {"suite": "s" * 129}, {"since": "7" * 65}, {"limit": "0"},
                       {"limit": "501"}, {"limit": "many"}, {"acked": "1" * 17}):
            r = v.get("/regressions", params=params)
            assert r.status_code == 422 and "Invalid input" in r.text, (params, r.status_code)
        # a viewer's forged acknowledgement, with the session's CSRF secret: refused for the role
        r = v.post(f"/regressions/{rid}/ack", data={"csrf": csrf, "reason": "forged"})
        assert r.status_code == 403 and "needs engineer" in r.text, r.text[:300]
        # a `done` naming a regression not acknowledged says nothing
        assert 'id="done"' not in v.get("/regressions", params={"done": rid, "acked": "1"}).text
    with web.client("viewer") as bearer:                 # a bearer token opens the page too
        assert bearer.get("/regressions").status_code == 200
    with web.lab.sessions() as s:
        assert s.get(RegressionAck, rid) is None, "nothing was acknowledged"


def test_an_engineer_acknowledges_from_the_page(web: WebHandle, seeded: dict[str, str]) -> None:  # noqa: F811
    rid = seeded["id"]
    with session(web, "engineer") as (e, csrf):
        page = e.get("/regressions", params={"host": HOST})
        row = row_of(page.text, rid)
        assert f'action="/regressions/{rid}/ack"' in row and 'name="csrf"' in row, row
        # no CSRF secret, another value, an empty one: refused, nothing sent
        for data in ({"reason": "x"}, {"reason": "x", "csrf": ""}, {"reason": "x", "csrf": csrf + "x"}):
            assert e.post(f"/regressions/{rid}/ack", data=data).status_code == 403, data
        # bounded: a reason over 1024 characters, an id that is not one
        assert e.post(f"/regressions/{rid}/ack", data={"csrf": csrf, "reason": "r" * 1025}).status_code == 422
        r = e.post(f"/regressions/{UNKNOWN_ID}/ack", data={"csrf": csrf})
        assert r.status_code == 404 and "no regression" in r.text, r.text[:300]
        assert e.post(f"/regressions/{'x' * 65}/ack", data={"csrf": csrf}).status_code == 422
        with web.lab.sessions() as s:
            assert s.get(RegressionAck, rid) is None
        r = e.post(f"/regressions/{rid}/ack", data={"csrf": csrf, "reason": "new firmware", "host": HOST})
        assert r.status_code == 303, r.text[:300]
        target = urlsplit(r.headers["location"])
        assert target.path == "/regressions" and target.fragment == f"reg-{rid}"
        assert parse_qs(target.query) == {"host": [HOST], "acked": ["1"], "done": [rid]}
        with web.lab.sessions() as s:          # the controller wrote it before it answered the command
            ack = s.get(RegressionAck, rid)
            assert ack is not None and ack.reason == "new firmware" and ack.actor.startswith("token:engineer-")
        back = e.get(r.headers["location"])
        assert back.status_code == 200
        row = row_of(back.text, rid)
        assert 'class="marked"' in row and 'data-acknowledged="yes"' in row, row
        assert f"by {ack.actor}" in row and "new firmware" in row and "/ack" not in row, row
        assert f"regression {rid} acknowledged" in back.text
        # hidden without acked=1; the API says the same
        assert not row_of(e.get("/regressions", params={"host": HOST}).text, rid)
    with web.client("viewer") as c:
        (acked,) = c.get("/api/regressions", params={"host": HOST, "all": "true"}).json()["regressions"]
        assert acked["acknowledged"] is True and acked["ack_reason"] == "new firmware"


# ------------------------------------------------------------------ compare: the baseline, the verdicts first


def test_compare_takes_the_chosen_baseline_and_shows_verdicts_first(web: WebHandle,  # noqa: F811
                                                                    seeded: dict[str, str]) -> None:
    with web.client("viewer") as c:
        page = c.get("/compare", params=[("run", "cmp-a"), ("run", "cmp-b")])
        assert page.status_code == 200, page.text[:500]
        html = page.text
        assert html.index('id="verdicts"') < html.index('id="compare-frame"'), "the verdicts come first"
        assert "Verdicts against cmp-a" in html and 'src="/compare/view?run=cmp-a&amp;run=cmp-b"' in html
        assert re.search(r"cmp-b:\s*<span class=\"worse\">[1-9]\d* significantly worse", html), html
        sig = re.search(r'<table class="grid" id="significant">.*?</table>', html, flags=re.S)
        assert sig and "4k-randread" in sig.group(0) and "8k-randwrite" not in sig.group(0), sig
        assert "significantly worse" in sig.group(0) and "significantly better" not in sig.group(0)
        # the other run as the baseline: the same difference, the other way
        page = c.get("/compare", params=[("run", "cmp-a"), ("run", "cmp-b"), ("baseline", "cmp-b")])
        assert page.status_code == 200, page.text[:500]
        html = page.text
        assert "Verdicts against cmp-b" in html and 'src="/compare/view?run=cmp-b&amp;run=cmp-a"' in html
        assert re.search(r'<option value="cmp-b" selected>', html)
        sig = re.search(r'<table class="grid" id="significant">.*?</table>', html, flags=re.S)
        assert sig and "significantly better" in sig.group(0) and "significantly worse" not in sig.group(0)
        assert "cmp-a" in sig.group(0)
        assert 'href="/api/compare?run=cmp-b&amp;run=cmp-a&amp;format=csv"' in html, "the CSV follows it"
        # the form picking other runs carries the baseline (issue 27: it fell back to the first picked)
        pick = re.search(r'<form method="get" action="/compare" id="pick">.*?</form>', html, flags=re.S)
        assert pick and '<input type="radio" name="baseline" value="cmp-b" checked' in pick.group(0), pick
        assert '<input type="radio" name="baseline" value="cmp-a" aria' in pick.group(0)
        # a baseline that is not one of the compared runs: refused, saying so
        for bad in ("cmp-c", "g012", "x" * 64):
            r = c.get("/compare", params=[("run", "cmp-a"), ("run", "cmp-b"), ("baseline", bad)])
            assert r.status_code == 422 and "is not one of the compared runs" in r.text, (bad, r.text[:300])
        assert c.get("/compare", params=[("run", "cmp-a"), ("baseline", "y" * 65)]).status_code == 422
        r = c.get("/compare", params={"baseline": "cmp-a"})
        assert r.status_code == 422 and "none picked" in r.text
        # runs with nothing in common: the reason where the verdicts would be, the page itself answers
        r = c.get("/compare", params=[("run", "g000"), ("run", "o000")])
        assert r.status_code == 200 and 'id="verdicts-why"' in r.text and "no cell in common" in r.text


# ------------------------------------------------------------------ both pages in Chromium


def test_both_pages_in_a_browser_without_error(browser: Browser, web: WebHandle,  # noqa: F811
                                               seeded: dict[str, str]) -> None:
    b = browser
    # a viewer: the page, its filters, no ack button
    b.login(web.tokens["viewer"], "/regressions")
    assert b.page.locator("nav a[href='/regressions']").count() == 1
    assert b.page.locator("#regressions tbody tr[data-regression]").count() >= 1
    assert b.page.locator("form.ack-form, button.ack").count() == 0
    b.page.click("details.filters summary")          # the filters fold away while none is set
    b.page.fill("input[name=host]", "otherhost")
    with b.page.expect_navigation():
        b.page.click("#filters button[type=submit]")
    assert "host=otherhost" in b.page.url
    hosts = b.page.locator("#regressions tbody tr[data-regression] td:nth-child(3)").all_inner_texts()
    assert hosts and all(h.startswith("otherhost") for h in hosts), hosts
    b.check("/regressions as a viewer")
    # an engineer acknowledges one through the form: back on the page, marked
    b.page.context.clear_cookies()
    b.login(web.tokens["engineer"], "/regressions?host=otherhost")
    row = b.page.locator("#regressions tbody tr[data-acknowledged=no]").first
    rid = row.get_attribute("data-regression")
    assert rid
    row.locator("input[name=reason]").fill("expected: new scheduler")
    with b.page.expect_navigation():
        row.locator("button.ack").click()
    marked = b.page.locator(f"#reg-{rid}")
    assert marked.get_attribute("class") == "marked" and marked.get_attribute("data-acknowledged") == "yes"
    assert "expected: new scheduler" in marked.inner_text() and "token:engineer-" in marked.inner_text()
    assert b.page.inner_text("#done") == f"regression {rid} acknowledged"
    b.shot("web-regressions.png", full_page=True)
    b.check("/regressions acknowledged")
    # compare: the verdicts on top, the baseline changed with the selector
    b.goto("/compare?run=cmp-a&run=cmp-b")
    assert b.page.inner_text("#verdicts h2") == "Verdicts against cmp-a"
    top = b.page.evaluate("() => [document.getElementById('verdicts').getBoundingClientRect().top, "
                          "document.getElementById('compare-frame').getBoundingClientRect().top]")
    assert top[0] < top[1], top
    b.page.select_option("#baseline-select", "cmp-b")
    with b.page.expect_navigation():
        b.page.click("#baseline-btn")
    assert parse_qs(urlsplit(b.page.url).query).get("baseline") == ["cmp-b"]
    assert b.page.inner_text("#verdicts h2") == "Verdicts against cmp-b"
    assert "significantly better" in b.page.inner_text("#significant")
    # the framed comparison (drawn in a subprocess) with the chosen baseline first: its figures drawn with data
    figs = report_figures(b, "compare-frame", "/compare/view?run=cmp-b&run=cmp-a")
    assert figs and not [p for f in figs for p in f.problems()]
    # picking the runs again keeps the baseline
    with b.page.expect_navigation():
        b.page.click("#pick button[type=submit]")
    assert parse_qs(urlsplit(b.page.url).query).get("baseline") == ["cmp-b"]
    assert b.page.inner_text("#verdicts h2") == "Verdicts against cmp-b"
    b.shot("web-compare.png")
    b.check("/compare with a chosen baseline")
