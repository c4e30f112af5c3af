"""HTML reports as a reader's browser shows them (issue 13 item 6): every chart drawn with data, no console error,
no request leaving the page, and the numbers beneath each chart equal to the store's.

Two sources: (a) full-size synthetic runs written to a real store by bench.reportdata (the 128-cell pattern
run, enterprise-synthetic stock and HP with 40 precondition rounds per group, a 4-device group, a network run),
and (b) real runs of the built-in suites on loop-device DUTs, reported through ``labctl report --html``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bench.reportdata import SyntheticStore, build
from labcontract.suite import load_suite
from orchestrator.cells import cell_label
from orchestrator.htmlreport import write_html
from orchestrator.queries import RunDetail, run_detail
from orchestrator.store.models import Result, Step
from tests import chromium as browser
from tests.chromium import Chromium, FigureSummary, PageSummary
from tests.conftest import LabHandle

pytestmark = pytest.mark.integration

# the chart kinds a report of each run kind must hold (others may be there too)
EXPECTED = {
    "pattern": {"heatmap", "latency"},
    "enterprise": {"precondition", "scaling", "bars", "latency"},
    "group": {"groups", "scaling", "bars"},
    "network": {"network"},
    "demo": {"bars", "latency"},
}


# ------------------------------------------------------------------ comparing a table cell with the store


def shown(cell: str, value: float | None, what: str) -> None:
    """``cell`` (as the table prints it: "1,234.5", "0.088") is ``value`` rounded to the cell's digits."""
    assert value is not None, f"{what}: the store holds no value, the table shows {cell!r}"
    digits = len(cell.split(".")[1]) if "." in cell else 0
    got = float(cell.replace(",", ""))
    assert abs(got - value) <= 0.5 * 10 ** -digits + 1e-9 * abs(value), \
        f"{what}: the table shows {cell}, the store holds {value}"


def measured(d: RunDetail) -> Iterator[tuple[Step, Result]]:
    for st in d.steps:
        if st.kind == "measure" and st.id in d.results:
            yield st, d.results[st.id]


def column_of(f: FigureSummary, d: RunDetail) -> int:
    """The table column of a run's line (legends end with the run id's last 6 characters)."""
    for i, h in enumerate(f.headers):
        if h.endswith(d.run.id[-6:]):
            return i
    raise AssertionError(f"{f.id}: no column for run {d.run.id} in {f.headers}")


def check_scaling(page: PageSummary, details: list[RunDetail]) -> int:
    """Every ladder point's IOPS, per run, as the store holds it."""
    checked = 0
    for f in page.of("scaling"):
        if not f.id.endswith("-iops"):
            continue
        rows = {r[0]: r for r in f.rows}
        for d in details:
            col = column_of(f, d)
            for st, res in measured(d):
                wl = st.workload or {}
                label = f"{wl.get('numjobs')}T{wl.get('iodepth')}Q"
                if "numjobs" in st.cell and "iodepth" in st.cell and label in rows:
                    shown(rows[label][col], res.iops, f"{f.id} {label} run {d.run.id}")
                    checked += 1
    return checked


def check_bars(page: PageSummary, details: list[RunDetail]) -> int:
    """The 4K random 16T16Q read / write IOPS bars."""
    checked = 0
    for f in page.of("bars"):
        if f.id != "bars-4k-16t16q-iops":
            continue
        for d in details:
            for st, res in measured(d):
                wl = st.workload or {}
                if (wl.get("bs"), wl.get("numjobs"), wl.get("iodepth")) != (4096, 16, 16):
                    continue
                which = {100: "read", 0: "write"}.get(wl.get("rwmixread", -1))
                name = f"4K random {which} 100% 16T16Q ({st.cell['profile']})"
                assert name == cell_label(st.cell, st.workload)          # what compare calls it too
                rows = [r for r in f.rows if r[0] == name and r[1].endswith(d.run.id[-6:])]
                assert len(rows) == 1, f"{f.id}: no single bar for {st.name} of {d.run.id}: {f.rows}"
                shown(rows[0][3], res.iops, f"{f.id} {st.name} run {d.run.id}")
                checked += 1
    return checked


def check_all_bars(page: PageSummary, d: RunDetail) -> int:
    """The "all measured cells" IOPS bars (cells no other chart draws) of a run."""
    rows = {r[0]: r for f in page.of("bars") if f.id == "bars-all-iops" for r in f.rows
            if r[1].endswith(d.run.id[-6:])}
    checked = 0
    for st, res in measured(d):
        label = cell_label(st.cell, st.workload)
        if label in rows:
            shown(rows[label][3], res.iops, f"bars-all-iops {label} run {d.run.id}")
            checked += 1
    return checked


def check_heatmap(page: PageSummary, d: RunDetail) -> int:
    """Every pattern's MB/s and IOPS in the heat map's table of run 1."""
    rows = {r[1]: r for f in page.of("heatmap") for r in f.rows if r[0] == "run 1"}
    checked = 0
    for st, res in measured(d):
        name = cell_label(st.cell, st.workload)
        if name in rows:
            f = page.of("heatmap")[0]
            shown(rows[name][f.headers.index("MB/s")], res.bw_bytes / 1e6, f"heat map {name} MB/s")
            shown(rows[name][f.headers.index("IOPS")], res.iops, f"heat map {name} IOPS")
            checked += 1
    return checked


def check_groups(page: PageSummary, d: RunDetail) -> int:
    """Every device's IOPS of every cell of a device-group run."""
    checked = 0
    figs = [f for f in page.of("groups") if "IOPS" in f.headers]
    for st, res in measured(d):
        cell = cell_label(st.cell, st.workload)
        for path, m in (res.per_device or {}).items():
            rows = [r for f in figs for r in f.rows if r[1] == cell and r[2].endswith(f"({path})")]
            assert len(rows) == 1, f"groups: no single row for {cell} device {path}"
            shown(rows[0][figs[0].headers.index("IOPS")], m["combined"]["iops"], f"groups {cell} {path} IOPS")
            checked += 1
    return checked


def check_network(page: PageSummary, d: RunDetail) -> int:
    """Every cell's initiator and target Gbps (window totals) and every initiator path's Gbps."""
    checked = 0
    totals = {r[1]: r for f in page.of("network") if "initiator Gbps" in f.headers for r in f.rows}
    paths = {(r[1], r[4]): r for f in page.of("network") if f.headers[4:5] == ["path"] for r in f.rows}
    assert totals and paths, f"network: no totals or per-path table in {[f.id for f in page.of('network')]}"
    hdr = next(f.headers for f in page.of("network") if "initiator Gbps" in f.headers)
    phdr = next(f.headers for f in page.of("network") if f.headers[4:5] == ["path"])
    workloads = {st.seq: st.workload for st in d.steps if st.kind == "net" and st.cell.get("role") == "initiator"}
    for g in d.net_groups:
        name = cell_label(g.cell, workloads.get(g.seq))         # the tables name a cell as compare does
        shown(totals[name][hdr.index("initiator Gbps")], g.total["initiator_gbps"], f"network {name} initiator")
        shown(totals[name][hdr.index("target Gbps")], g.total["target_gbps"], f"network {name} target")
        for key, p in g.per_path.items():
            if p["role"] == "initiator":
                shown(paths[(name, key)][phdr.index("Gbps")], p["gbps"], f"network {name} path {key}")
                checked += 1
        checked += 2
    return checked


def check_precondition(page: PageSummary, details: list[RunDetail]) -> int:
    """Every precondition round's IOPS, per run, as its record holds it (what the verdict judged)."""
    checked = 0
    for d in details:
        for rec in d.preconditions:
            first = next(st for st in d.steps if st.kind == "precondition" and st.seq == rec.seq)
            title = "Preconditioning " + cell_label(first.cell, first.workload)
            figs = [f for f in page.of("precondition") if f.title == title]
            assert len(figs) == 1, f"no single figure {title!r}: {[f.title for f in page.of('precondition')]}"
            rows = {r[1]: r for r in figs[0].rows if r[0].endswith(d.run.id[-6:])}
            for rnd in rec.rounds:
                shown(rows[str(rnd["round"])][2], rnd["iops"], f"{title} round {rnd['round']} run {d.run.id}")
                checked += 1
    return checked


def check_latency(page: PageSummary, details: list[RunDetail]) -> int:
    """Every read p99 of the latency tables (ms or µs, as the header says) as the result holds it (fio's
    percentile rule over the merged histogram, which is what the stored read percentiles are)."""
    checked = 0
    for f in page.of("latency"):
        col = next(i for i, h in enumerate(f.headers) if h.startswith("p99 ("))
        div = 1e6 if f.headers[col].endswith("(ms)") else 1e3
        for d in details:
            cells = {cell_label(st.cell, st.workload): res for st, res in measured(d)}
            for r in f.rows:
                if r[0].endswith(d.run.id[-6:]) and r[2] == "read" and r[3] == "total" and r[1] in cells:
                    p99 = cells[r[1]].metrics["read"]["lat"]["percentiles_ns"]["p99"]
                    shown(r[col], p99 / div, f"{f.id} {r[1]} read p99 run {d.run.id}")
                    checked += 1
    return checked


def check_page(page: PageSummary, kind: str, figures: int) -> None:
    assert page.problems() == [], "\n".join(page.problems())
    assert len(page.figures) == figures, f"the browser saw {len(page.figures)} of {figures} figures"
    missing = EXPECTED[kind] - page.kinds()
    assert not missing, f"{kind} report lacks chart kind(s) {sorted(missing)}; has {sorted(page.kinds())}"


# ------------------------------------------------------------------ (a) full-size synthetic runs


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> SyntheticStore:
    return build(tmp_path_factory.mktemp("synthetic") / "store.sqlite", compare_runs=1)


def details(st: SyntheticStore, *ids: str) -> list[RunDetail]:
    with st.sessions() as s:
        return [run_detail(s, i) for i in ids]


def report(tmp_path: Path, ds: list[RunDetail], name: str) -> tuple[Path, int]:
    out = tmp_path / f"{name}.html"
    return out, len(write_html(ds, out).figures)


def test_pattern_run_heatmap(synthetic: SyntheticStore, chromium: Chromium, tmp_path: Path) -> None:
    (d,) = details(synthetic, synthetic.pattern)
    path, n = report(tmp_path, [d], "pattern")
    page = chromium.open(path)
    check_page(page, "pattern", n)
    assert check_heatmap(page, d) == 125
    assert check_latency(page, [d]) > 0
    assert "hp" not in page.title.lower()


def test_enterprise_run_and_stock_vs_hp(synthetic: SyntheticStore, chromium: Chromium, tmp_path: Path) -> None:
    stock, hp = details(synthetic, synthetic.stock, synthetic.hp)
    for name, ds in (("stock", [stock]), ("compare", [stock, hp])):
        path, n = report(tmp_path, ds, name)
        page = chromium.open(path)
        check_page(page, "enterprise", n)
        assert check_precondition(page, ds) == 9 * 40 * len(ds)
        assert check_scaling(page, ds) == 16 * len(ds)
        assert check_bars(page, ds) == 2 * len(ds)
        assert check_latency(page, ds) >= 5 * len(ds)
    assert "hp:20" in page.text and "stock" in page.text


def test_device_group_run(synthetic: SyntheticStore, chromium: Chromium, tmp_path: Path) -> None:
    (d,) = details(synthetic, synthetic.group)
    path, n = report(tmp_path, [d], "group")
    page = chromium.open(path)
    check_page(page, "group", n)
    assert check_groups(page, d) == 24 * 4
    assert check_scaling(page, [d]) == 16


def test_network_run(synthetic: SyntheticStore, chromium: Chromium, tmp_path: Path) -> None:
    (d,) = details(synthetic, synthetic.network)
    path, n = report(tmp_path, [d], "network")
    page = chromium.open(path)
    check_page(page, "network", n)
    assert check_network(page, d) == 12 * 2 + 6 * 1 + 6 * 2
    over_time = [f for f in page.of("network") if f.title.startswith("Gbps over time")]
    assert len(over_time) == 3, [f.title for f in page.of("network")]       # one per profile, its 4 cells


def test_a_request_leaving_the_page_is_seen(chromium: Chromium, tmp_path: Path) -> None:
    """The checker itself: an external image, a console error and an empty chart are each reported."""
    page = tmp_path / "bad.html"
    page.write_text('<html><body><img src="https://cdn.example.invalid/x.png"><script>console.error("boom")'
                    '</script><figure class="chart" id="f" data-chart="bars" data-points="0"><svg width="10" '
                    'height="10"><g id="f-axes_1"><g id="f-patch_2"><path d="M 0 0 L 10 10"/></g></g></svg>'
                    "<figcaption><span class=\"n\">n = 1 run</span></figcaption><table><tbody></tbody></table>"
                    "</figure></body></html>")
    problems = "\n".join(chromium.open(page).problems())
    assert "request leaving the page: https://cdn.example.invalid/x.png" in problems
    assert "console: error: boom" in problems
    assert "data-points=0" in problems and "no data mark" in problems and "no row" in problems


def test_a_missing_chromium_fails_the_test(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No browser is never a skip: the fixture's start fails, naming the path and how to install it."""
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "chromium")
    with pytest.raises(AssertionError, match=r"chromium is missing: install Debian's chromium"), browser.chromium():
        pass


# ------------------------------------------------------------------ (b) real runs of the built-in suites


def small(name: str, **changes: object) -> str:
    """A built-in suite with top-level keys or profiles changed (fewer sweep values: the test stays short)."""
    doc = yaml.safe_load(load_suite(name).source_text)
    doc.update(changes)
    return yaml.safe_dump(doc, sort_keys=False)


def test_real_runs_of_the_builtin_suites(fresh_lab: LabHandle, chromium: Chromium, tmp_path: Path) -> None:
    lab = fresh_lab
    ent = yaml.safe_load(load_suite("enterprise-synthetic").source_text)
    # too long even scaled (9 precondition groups): its 4K random 16T16Q and 8K 70/30 ladder profiles only, the
    # ladder 2 x 2 points (still a ladder: >= 3), 2 rounds of 1 s per precondition group
    ent["profiles"] = ent["profiles"][:2]
    ent["profiles"][1]["ladder"] = {"numjobs": [2, 4], "iodepth": [2, 4]}
    ent["phases"]["precondition"] = {"numjobs": 2, "iodepth": 4, "round": "1s", "max_rounds": 2, "window": 2,
                                     "track": "iops"}
    pat = yaml.safe_load(load_suite("pattern-125").source_text)
    # 2 x 2 x 2 patterns (a grid the heat map recognises) instead of 5 x 5 x 5, plus the three large-block checks
    pat["profiles"][0]["sweep"] = {"rwmixread": [100, 0], "bs": ["4k", "64k"], "percentage_random": [100, 0]}
    runs = {
        "demo": lab.submit(load_suite("demo").source_text, "dut0", runtime=1),
        "group": lab.submit(load_suite("device-group").source_text, ["dut0", "dut1"], scale=0.02),
        "pattern": lab.submit(yaml.safe_dump(pat, sort_keys=False), "dut1", runtime=1),
        "enterprise": lab.submit(yaml.safe_dump(ent, sort_keys=False), "dut1", runtime=1),
    }
    for kind, run_id in runs.items():
        d = lab.wait_run(run_id, timeout=240)
        assert d.run.state == "SUCCEEDED", f"{kind}: {d.run.reason}"
        out = tmp_path / f"{kind}.html"
        proc = lab.labctl("report", run_id, "--html", str(out))
        assert proc.returncode == 0 and out.exists(), f"labctl report {run_id} --html: {proc.stdout}{proc.stderr}"
        page = chromium.open(out)
        assert page.problems() == [], f"{kind}:\n" + "\n".join(page.problems())
        missing = EXPECTED[kind] - page.kinds()
        assert not missing, f"{kind} report lacks chart kind(s) {sorted(missing)}; has {sorted(page.kinds())}"
        if kind == "demo":
            assert check_all_bars(page, d) >= 3
        if kind == "group":
            assert check_groups(page, d) == 24 * 2
        if kind == "pattern":
            assert check_heatmap(page, d) == 8
        if kind == "enterprise":
            assert check_scaling(page, [d]) == 4
            assert check_bars(page, [d]) == 2
            assert check_precondition(page, [d]) == sum(len(r.rounds) for r in d.preconditions) > 0
