"""A repeated run for real (issue 16: "a real repeated run shows intervals in run show, the HTML report and the
export"): a suite with ``repeat:`` and a submission's ``--repeat`` on the embedded lab, then every place a
reader meets its figures, each checked against the store's per-repeat results."""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

import pytest

from orchestrator.queries import RunDetail
from orchestrator.stats.samples import interval_text
from orchestrator.stats.summary import summarize
from tests.chromium import Chromium
from tests.conftest import LabHandle

pytestmark = pytest.mark.integration

SUITE = """\
suite: repeated
repeat: 2
repeat_order: interleaved
defaults: {runtime: 1s, footprint: 16M}
profiles:
  - name: 4k-random
    rw: randread
    bs: 4k
    ladder: {iodepth: [1, 4]}
"""


def _iops(d: RunDetail, iodepth: int) -> list[float]:
    out = []
    for st in d.steps:
        res = d.results.get(st.id)
        if st.kind == "measure" and st.cell.get("iodepth") == iodepth and res is not None and res.iops is not None:
            out.append(res.iops)
    return out


@pytest.fixture(scope="module")
def repeated(lab: LabHandle, tmp_path_factory: pytest.TempPathFactory) -> RunDetail:
    """The suite's repeat: 2, replaced by --repeat 3 at submission: 2 cells x 3 repeats, interleaved."""
    suite = tmp_path_factory.mktemp("suite") / "repeated.yaml"
    suite.write_text(SUITE)
    sub = lab.labctl("submit", str(suite), "--host", lab.host, "--device", "dut0", "--repeat", "3")
    assert sub.returncode == 0, sub.stderr
    return lab.wait_run(sub.stdout.split()[-1], timeout=120)


def test_the_plan_interleaves_the_repeats(repeated: RunDetail) -> None:
    d = repeated
    assert d.run.state == "SUCCEEDED", d.run.reason
    names = [st.name for st in d.steps if st.kind == "measure"]
    assert names == [f"4k-random.q{q}.rep{k}" for k in (1, 2, 3) for q in (1, 4)]
    assert [st.cell["repeat"] for st in d.steps if st.kind == "measure"] == [1, 1, 2, 2, 3, 3]


def test_run_show_prints_each_cell_with_its_interval(lab: LabHandle, repeated: RunDetail,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")          # rich's width off a terminal: one row per line
    out = lab.labctl("run", "show", repeated.run.id)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "repeated cells" in text and "±95%" in text and "CoV" in text, text
    for q in (1, 4):
        s = summarize(_iops(repeated, q))
        line = next(ln for ln in text.splitlines() if f"1T{q}Q" in ln and "3/3" in ln)   # the cell's one name
        assert f"{s.mean:,.0f}" in line, (line, s)
        # a loop device under load can be noisy: the line then says so instead of printing bounds
        assert interval_text(s, "{:,.0f}").removeprefix("± ") in line, (line, s)
        assert s.too_noisy or (s.ci_low is not None and 0 < s.ci_low < s.mean), s


def test_the_export_carries_mean_interval_and_cov(lab: LabHandle, repeated: RunDetail) -> None:
    out = lab.labctl("export", repeated.run.id, "--format", "csv", "--table", "cells")
    assert out.returncode == 0, out.stderr
    rows = [r for r in csv.DictReader(io.StringIO(out.stdout)) if r["metric"] == "iops"]
    assert len(rows) == 2, rows
    for row in rows:
        q = 1 if "1T1Q" in row["cell"] else 4
        values = _iops(repeated, q)
        assert row["repeats"] == row["planned"] == "3"
        assert float(row["mean"]) == pytest.approx(statistics.fmean(values))
        assert float(row["stdev"]) == pytest.approx(statistics.stdev(values))
        s = summarize(values)
        if s.too_noisy:    # a loop device under load can be noisy: no bounds, and the reason
            assert row["ci_low"] == row["ci_high"] == "" and row["note"] == s.note, row
        else:
            assert s.ci_low is not None and s.ci_high is not None and row["note"] == ""
            assert float(row["ci_low"]) == pytest.approx(s.ci_low) and float(row["ci_high"]) == pytest.approx(s.ci_high)
        assert float(row["cov_pct"]) == pytest.approx(statistics.stdev(values) / statistics.fmean(values) * 100)
    results = lab.labctl("export", repeated.run.id, "--format", "csv", "--table", "results")
    measured = [r for r in csv.DictReader(io.StringIO(results.stdout)) if r["kind"] == "measure"]
    assert [r["repeat"] for r in measured] == ["1", "1", "2", "2", "3", "3"]


def test_the_html_report_draws_means_with_intervals(lab: LabHandle, repeated: RunDetail, chromium: Chromium,
                                                    tmp_path: Path) -> None:
    html = tmp_path / "repeated.html"
    out = lab.labctl("report", repeated.run.id, "--html", str(html))
    assert out.returncode == 0, out.stderr
    page = chromium.open(html)
    assert not page.problems(), page.problems()
    fig = page.figure("repeats-0-iops")
    assert fig.points == 2 and fig.headers[:3] == ["cell", "repeats", "mean IOPS"]
    for row in fig.rows:
        q = 1 if "1T1Q" in row[0] else 4
        s = summarize(_iops(repeated, q))
        assert row[1] == "3 of 3" and row[2] == f"{s.mean:,.0f}"
        assert s.cov_pct is not None and row[4] == f"{s.cov_pct:.1f}%"
    bars = page.figure("bars-all-iops")     # the 4K 1T1Q cell has a chart of its own; this one draws QD4
    assert [r[0] for r in bars.rows] == ["4K random read 100% 1T4Q (4k-random)"], \
        "one bar per cell (its mean), not one per repeat"
    assert bars.rows[0][3] == f"{statistics.fmean(_iops(repeated, 4)):,.0f}"


def test_a_repeat_out_of_bounds_is_refused_with_the_reason(lab: LabHandle, tmp_path: Path) -> None:
    suite = tmp_path / "zero.yaml"
    suite.write_text(SUITE.replace("repeat: 2", "repeat: 0"))
    out = lab.labctl("submit", str(suite), "--host", lab.host, "--device", "dut0")
    assert out.returncode != 0 and "repeat: 0 is out of range (must be >= 1)" in out.stderr, out.stderr
    suite.write_text(SUITE.replace("repeat: 2", "repeat: 2\ncell_limit: 3"))
    out = lab.labctl("submit", str(suite), "--host", lab.host, "--device", "dut0")
    assert out.returncode != 0, out.stdout
    assert "cell_limit: the suite expands to 4 steps (2 measured cells x repeat 2), over the limit of 3" in out.stderr
    suite.write_text(SUITE.replace("repeat: 2", "cell_limit: 5"))
    out = lab.labctl("submit", str(suite), "--host", lab.host, "--device", "dut0", "--repeat", "3")
    assert out.returncode != 0 and "--repeat: 3 repeats make 6 steps, over the suite's cell_limit of 5" in out.stderr
