"""SNIA PTS-E's rounds on the embedded lab (real controller, agent, fio on loop DUTs): purge, the two WIPC passes,
then rounds of the whole matrix until the tracked cell is steady; each cell reported as the mean of the
steady-state window's rounds, everywhere a cell's figure is read (run show, compare, the HTML report in Chromium).

Screenshots for docs/ with STORAGELAB_SCREENSHOTS=1."""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labcontract.rounds import round_of
from tests.conftest import LabHandle, start_lab

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "img" if os.environ.get("STORAGELAB_SCREENSHOTS") else None


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    handle = start_lab(tmp_path_factory.mktemp("pts") / "lab")
    try:
        yield handle
    finally:
        handle.lab.stop()


# window 2 and wide limits: steady at round 2 (a loop device's figures move a lot from one second to the next)
STEADY = """\
suite: pts-mini
phases:
  purge: true
  rounds: {cell: {rwmixread: 0, bs: 4k}, track: iops, window: 2, max_rounds: 4, max_range_pct: 100,
           max_excursion_pct: 100, wipc_limit: 30s}
profiles:
  - name: iops
    rw: randrw
    iodepth: 4
    runtime: 1s
    sweep: {rwmixread: [100, 0], bs: [64k, 4k]}
"""


def test_rounds_repeat_the_matrix_until_steady_and_report_the_window_mean(lab: LabHandle, tmp_path: Path,
                                                                           chromium: Any) -> None:
    run_id = lab.submit(STEADY)
    detail = lab.wait_run(run_id, timeout=240)
    assert detail.run.state == "SUCCEEDED", detail.run.reason
    kinds = [(st.kind, st.name) for st in detail.steps]
    assert kinds[:3] == [("purge", "purge.stock"), ("precondition", "wipc.pass1"), ("precondition", "wipc.pass2")]
    measured = sorted((st for st in detail.steps if st.kind == "measure"), key=lambda st: (st.round, st.seq))
    assert [(st.name, st.round) for st in measured] == [
        (f"iops.r{mix}.{bs}.round{r}", r) for r in (1, 2) for mix in (100, 0) for bs in ("64k", "4k")]
    assert all(round_of(st.cell) == st.round for st in measured)
    # the WIPC wrote the DUT through, twice: 128 KiB sequential writes, not time based
    for st in detail.steps[1:3]:
        res = detail.results[st.id]
        assert st.workload["bs"] == 128 << 10 and st.workload["time_based"] is False
        assert res.write_iops and not res.read_iops
    (rec,) = detail.preconditions
    assert rec.steady is True and rec.reached_round == 2, rec.verdict
    assert [r["round"] for r in rec.rounds] == [1, 2] and rec.name == "rounds.iops.r0.4k"
    # every round's result is stored; the window's (rounds 1-2) are the ones reported
    assert all(st.id in detail.results for st in measured) and not detail.earlier_rounds
    tracked = [detail.results[st.id].iops for st in measured if st.name.startswith("iops.r0.4k")]
    assert [r["iops"] for r in rec.rounds] == tracked
    shown = lab.labctl("run", "show", run_id, check=True).stdout
    assert f"{statistics.fmean(tracked):,.0f}" in shown, shown
    html = tmp_path / "pts.html"
    done = lab.labctl("report", run_id, "--html", str(html))
    assert done.returncode == 0, done.stderr
    page = chromium.open(html)
    assert page.problems() == [], page.problems()
    convergence, window, matrix = page.of("pts")
    for fig in (convergence, window, matrix):
        assert fig.svg and fig.marks >= 1 and fig.points >= 2, fig
    assert "steady-state convergence" in convergence.title and "measurement window" in window.title
    # the convergence plot: the tracked cell's mix at each block size, every round
    assert sorted({r[0] for r in convergence.rows}) == ["iops.r0.4k", "iops.r0.64k"] and len(convergence.rows) == 4
    # the matrix: block sizes largest first, a column per mix; each figure the mean of rounds 1-2
    assert matrix.headers == ["block size", "R/W 100/0", "R/W 0/100"]
    assert [r[0] for r in matrix.rows] == ["64K", "4K"]
    assert matrix.rows[1][2] == f"{statistics.fmean(tracked):,.0f}"
    if SHOTS is not None:
        chromium.screenshot(html, f"#{matrix.id}", SHOTS / "report-pts.png")
        chromium.screenshot(html, f"#{convergence.id}", SHOTS / "report-pts-convergence.png")


NEVER = STEADY.replace("max_range_pct: 100", "max_range_pct: 0.0001").replace("max_rounds: 4", "max_rounds: 3") \
    .replace("wipc_limit: 30s}", "wipc: false}")


def test_rounds_end_at_max_rounds_and_report_the_last_window(lab: LabHandle) -> None:
    run_id = lab.submit(NEVER)
    detail = lab.wait_run(run_id, timeout=240)
    assert detail.run.state == "SUCCEEDED", detail.run.reason
    assert [st.kind for st in detail.steps if st.kind != "measure"] == ["purge"]
    (rec,) = detail.preconditions
    assert rec.steady is False and rec.verdict.startswith("not steady after 3 rounds (max_rounds 3)"), rec.verdict
    measured = [st for st in detail.steps if st.kind == "measure"]
    assert len(measured) == 12
    # round 1 is outside the last window (rounds 2-3): kept apart, every reader sees rounds 2 and 3
    assert sorted({detail.steps[i].round for i, st in enumerate(detail.steps) if st.id in detail.earlier_rounds}) \
        == [1]
    assert {st.round for st in measured if st.id in detail.results} == {2, 3}
    # the repeats summary counts the window's rounds: each cell measured 2 of 2, not 2 of the 3 rounds run
    shown = lab.labctl("run", "show", run_id, check=True).stdout
    assert shown.count(" 2/2 ") == 4 and " 2/3 " not in shown, shown


@pytest.mark.parametrize(("suite", "max_rounds", "charts"), [
    ("snia-iops", 1, ["steady-state convergence", "IOPS by block size"]),
    ("snia-throughput", 2, ["steady-state convergence", "measurement window", "MB/s by block size"]),
    ("snia-latency", 2, ["steady-state convergence", "measurement window", "average latency (µs) by block size",
                         "maximum latency (µs) by block size"])])
def test_the_built_in_pts_tests_run_and_their_report_pages_are_drawn(lab: LabHandle, tmp_path: Path, chromium: Any,
                                                                     suite: str, max_rounds: int, charts: list[str],
                                                                     request: pytest.FixtureRequest) -> None:
    """Each built-in PTS test as published (its whole matrix), 1 s a cell, its rounds capped by the submission.
    snia-iops (56 cells) and snia-latency (9 cells x 2 rounds at T1Q1) only with --pts-full (make test-pts, run by
    .ci/run after make test: they would add two minutes to make test's 20)."""
    from labcontract.suite import load_suite

    if suite in ("snia-iops", "snia-latency") and not request.config.getoption("--pts-full"):
        pytest.skip(f"{suite}: make test-pts (.ci/run runs it)")
    s = load_suite(suite)
    run_id = lab.submit(s.source_text, scale=1 / 60, max_rounds=max_rounds)
    detail = lab.wait_run(run_id, timeout=600)
    assert detail.run.state == "SUCCEEDED", detail.run.reason
    measured = [st for st in detail.steps if st.kind == "measure"]
    assert len(measured) == len(s.cells) * max_rounds and all(st.id in detail.results for st in measured)
    (rec,) = detail.preconditions
    assert rec.steady is False and f"max_rounds {max_rounds}" in rec.verdict
    html = tmp_path / f"{suite}.html"
    done = lab.labctl("report", run_id, "--html", str(html))
    assert done.returncode == 0, done.stderr
    page = chromium.open(html)
    assert page.problems() == [], page.problems()
    figs = page.of("pts")
    assert [next(c for c in charts if c in f.title) for f in figs] == charts, [f.title for f in figs]
    for fig in figs:
        assert fig.svg and fig.marks >= 1 and fig.points >= 1, fig
    matrix = figs[2] if len(figs) > 2 else figs[1]
    assert len(matrix.rows) == len({c.workload.bs for c in s.cells})
