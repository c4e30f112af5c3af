"""The run page in headless Chromium over a real lab (issue 27 item 3): a preconditioning run submitted scaled by 0.5
and capped at 4 rounds, never steady, followed on its page without a reload — each round the controller plans
appears in the steps table, the running round shows as "round k of at most 4", the ETA while it runs, the live
charts draw each step's fragment named by its step — and once it ended, each group's verdict in the words
``labctl run show`` prints, with the overrides and the warning. A second run cancelled while its page is open: the
Cancel and Pause buttons go and Rerun comes without a reload, a step that never ran shows no progress. No console
error, no failed request on either page.

``STORAGELAB_SCREENSHOTS=1`` writes docs/img/web-run-steady.png (docs/web.md shows it).
"""

from __future__ import annotations

import re

import pytest

from tests.integration.test_web_browser import LONG_SUITE, PHONE, Browser, browser  # noqa: F401  (its fixture)
from tests.webfix import WebHandle, web  # noqa: F401  (the module's lab and web service)

pytestmark = pytest.mark.integration

NEVER_STEADY = """\
suite: web-steady
phases:
  precondition: {numjobs: 1, iodepth: 4, round: 8s, max_rounds: 8, window: 3,
                 max_range_pct: 0.0001, max_excursion_pct: 0.0001}
profiles:
  - {name: rr4k, rw: randread, bs: 4k, iodepth: 4, runtime: 8s}
"""


def _submit(web: WebHandle, suite: str, **options: object) -> str:  # noqa: F811
    with web.client("engineer") as c:
        r = c.post("/api/runs", json={"suite_yaml": suite, "host": web.lab.host, "devices": ["dut0"], **options})
        assert r.status_code == 201, r.text
        return str(r.json()["run_id"])


def test_a_preconditioning_run_followed_live_then_its_verdicts(browser: Browser, web: WebHandle) -> None:  # noqa: F811
    b = browser
    run_id = _submit(web, NEVER_STEADY, scale=0.5, max_rounds=4)
    b.login(web.tokens["engineer"], f"/runs/{run_id}")
    b.page.evaluate("() => { window.__sameDocument = true; }")
    first = b.page.locator("#steps tr[data-step]").evaluate_all("rows => rows.map(r => r.dataset.step)")
    assert len(first) < 5, f"the page opened after the whole run was planned: {first}"
    # while it preconditions: the round running of at most 4, and the ETA
    b.page.wait_for_function(
        "() => /^round [1-4] of at most 4 running$/.test(document.querySelector('#verdicts .pc-now')?.textContent"
        " || '')", timeout=60_000)
    eta = b.page.inner_text("#run-eta")
    assert re.match(r"about .* left", eta) and b.page.locator("#run-eta").is_visible(), eta
    # the charts draw each step's fragment, named by its step
    b.page.wait_for_function("() => Number(document.getElementById('chart-iops').dataset.points) >= 3",
                             timeout=60_000)
    b.page.wait_for_function("() => document.querySelector('#verdicts .pc-now').textContent === "
                             "'round 3 of at most 4 running'", timeout=60_000)
    b.page.wait_for_function("() => document.querySelectorAll('#chart-iops g.seg').length >= 2", timeout=30_000)
    b.shot("web-run-steady.png", full_page=True)
    # every round planned shows up in the table live: 4 rounds then the measured step
    b.page.wait_for_function("(rid) => document.querySelector(`#steps tr[data-step=\"${rid}-s000-r004\"]`)",
                             arg=run_id, timeout=90_000)
    b.page.wait_for_function("() => document.getElementById('run-state').textContent.trim() === 'SUCCEEDED'",
                             timeout=90_000)
    assert b.page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
    rows = b.page.locator("#steps tr[data-step]").evaluate_all(
        "rows => rows.map(r => [r.dataset.step, r.querySelector('td').textContent, r.dataset.state])")
    assert [r[0] for r in rows] == [f"{run_id}-s000-r00{k}" for k in range(1, 5)] + [rows[-1][0]], rows
    assert [r[1] for r in rows] == [str(i) for i in range(1, 6)], rows
    assert all(r[2] == "SUCCEEDED" for r in rows), rows
    labelled = b.page.evaluate("""() => [...document.querySelectorAll('#chart-iops polyline')].map(p => {
        const g = p.closest('g.seg');
        return g ? g.querySelector('title').textContent : ''; })""")
    assert labelled and all(labelled), labelled
    assert any("round" in x for x in labelled) and b.page.locator("#chart-iops text.seg-label").count() >= 1
    # the verdict, the overrides and the warning, as labctl run show prints them (its lines wrapped to its width)
    shown = " ".join(web.lab.labctl("run", "show", run_id, check=True).stdout.split())
    b.page.wait_for_function("() => / NOT steady, 4 round\\(s\\): /.test(document.querySelector('#verdicts .pc-line')"
                             ".textContent)", timeout=30_000)
    line = b.page.inner_text("#verdicts .pc-line")
    assert re.fullmatch(r"precondition .+ \(rr4k\): NOT steady, 4 round\(s\): not steady after 4 rounds "
                        r"\(max_rounds 4\): .*window 2-4 range .*", line), line
    assert line in shown, (line, shown)
    assert b.page.inner_text("#verdicts .pc-now") == "" and b.page.locator("#run-eta").is_hidden()
    warning = b.page.inner_text("#warnings")
    assert warning.startswith("WARNING: durations scaled by 0.5 (") and warning in shown, (warning, shown)
    overrides = b.page.inner_text("#overrides")
    assert "scale x0.5" in overrides and "max rounds 4 (suite says 8)" in overrides, overrides
    assert b.page.locator("#cancel, #pause, #rerun").count() == 0, "a run that succeeded has no command"
    b.check("preconditioning run page")
    b.goto(f"/runs/{run_id}")        # and the page as it opens once the run ended
    assert b.page.inner_text("#verdicts .pc-line") == line
    b.page.set_viewport_size(PHONE)   # type: ignore[arg-type]
    b.no_overflow("the verdicts on a phone")
    b.check("preconditioning run page, reloaded")


def test_commands_follow_the_runs_state_without_reload(browser: Browser, web: WebHandle) -> None:  # noqa: F811
    b = browser
    two = LONG_SUITE + "  - {name: second, rw: randwrite, bs: 4k, iodepth: 4, runtime: 60s}\n"
    run_id = _submit(web, two)
    try:
        b.login(web.tokens["engineer"], f"/runs/{run_id}")
        b.page.evaluate("() => { window.__sameDocument = true; }")
        b.page.wait_for_selector("#cancel", timeout=10_000)
        web.lab.wait_step_state(run_id, "RUNNING", timeout=60)
        b.page.wait_for_function("() => Number(document.getElementById('chart-iops').dataset.points) >= 2",
                                 timeout=60_000)
        with web.client("engineer") as c:
            assert c.post(f"/api/runs/{run_id}/cancel", json={"reason": "seen enough"}).status_code < 300
        b.page.wait_for_selector("#rerun", timeout=60_000)
        assert b.page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
        assert b.page.locator("#cancel, #pause, #resume").count() == 0
        assert b.page.inner_text("#run-state") == "CANCELLED"
        widths = b.page.locator("#steps tr[data-step]").evaluate_all(
            "rows => rows.map(r => [r.dataset.state, parseFloat(r.querySelector('.fill').style.width)])")
        # the first stopped part-way (where it stopped), the second never ran: no progress
        assert widths[0][0] == "CANCELLED" and 0 < widths[0][1] < 100, widths
        assert widths[1] == ["CANCELLED", 0], widths
        b.check("cancelled run page")
        with b.page.expect_navigation():
            b.page.click("#rerun")
        assert "rerun accepted" in b.text()
        b.check("rerun")
    finally:
        with web.client("engineer") as c:
            c.post(f"/api/runs/{run_id}/cancel", json={"reason": "test cleanup"})
        web.lab.wait_run(run_id, timeout=60)
