"""How long the HTML report takes to build and how much it weighs, at review size (issue 13, Performance).

Three reports of synthetic runs written to a real SQLite store by :mod:`bench.reportdata` (no fio): the
128-cell pattern-125 run, the enterprise-synthetic run with 40 preconditioning rounds of 60 s per group, and a
10-run compare (ten 128-cell pattern runs of two devices, stock and HP). Each is timed as the median of
``--repeat`` builds, next to a bare baseline measured in the same run: loading the same RunDetails from the
store (:func:`orchestrator.queries.run_detail`), which every report must do anyway. The build is
``orchestrator.htmlreport.build_html`` on the loaded details (drawing in forked processes, one per CPU, as
``labctl report`` does); "total" is load + build, what ``labctl report --html`` spends beyond starting
Python. One more build per report, drawn in a single process, says which chart kind the time goes to.

Targets: each single-run report ≤ 3 s and ≤ 5 MB; the 10-run compare ≤ 5 s. PASS / FAIL is judged on the
total.

Usage: python -m bench.report [--store PATH] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.reportdata import SyntheticStore, build
from orchestrator.htmlreport import build_html, plot
from orchestrator.htmlreport.charts import chart_kinds
from orchestrator.htmlreport.model import Figure, ReportContext
from orchestrator.queries import RunDetail, run_detail

MB = 1e6


@dataclass(frozen=True)
class Case:
    slug: str            # file name of the kept report
    name: str
    run_ids: list[str]
    max_s: float
    max_mb: float | None


@dataclass(frozen=True)
class Measured:
    case: Case
    load_s: float        # median: run_detail of every run (the baseline)
    build_s: float       # median: build_html on the loaded details
    total_s: float       # median of load + build, per repetition
    mb: float
    figures: int
    by_kind: dict[str, float]    # one more build in one process, per chart kind, drawing included

    @property
    def ok(self) -> bool:
        return self.total_s <= self.case.max_s and (self.case.max_mb is None or self.mb <= self.case.max_mb)


def measure(store: SyntheticStore, case: Case, repeat: int, keep: Path | None) -> Measured:
    loads, builds, totals = [], [], []
    html, figures = "", 0
    for _ in range(repeat):
        with store.sessions() as s:
            t0 = time.perf_counter()
            details: list[RunDetail] = [run_detail(s, r) for r in case.run_ids]
            t1 = time.perf_counter()
            rep = build_html(details)
            t2 = time.perf_counter()
        load_s, build_s = t1 - t0, t2 - t1
        html, figures = rep.html, len(rep.figures)
        loads.append(load_s)
        builds.append(build_s)
        totals.append(load_s + build_s)
    with store.sessions() as s:
        ctx = ReportContext.of([run_detail(s, r) for r in case.run_ids])
        by_kind: dict[str, float] = {}
        for kind in chart_kinds():
            t0 = time.perf_counter()
            with plot.deferred() as pending:      # as build_html does, but drawn in this one process
                items = list(kind.figures(ctx))
            plot.run_all([*(it for it in items if not isinstance(it, Figure)), *pending], workers=1)
            by_kind[kind.name] = time.perf_counter() - t0
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{case.slug}.html").write_text(html, encoding="utf-8")
    return Measured(case, statistics.median(loads), statistics.median(builds), statistics.median(totals),
                    len(html.encode()) / MB, figures, by_kind)


def cases(store: SyntheticStore) -> list[Case]:
    return [Case("pattern", "pattern-125, 128 cells", [store.pattern], 3.0, 5.0),
            Case("enterprise", "enterprise-synthetic, 40 rounds/group", [store.stock], 3.0, 5.0),
            Case("compare", f"compare of {len(store.compare)} runs", store.compare, 5.0, None)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=None,
                    help="SQLite file of the synthetic store (made there if missing; default: a temporary one)")
    ap.add_argument("--repeat", type=int, default=3, help="builds per report; the median is reported")
    ap.add_argument("--keep", type=Path, default=None, help="write the reports' HTML to this directory")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        path = args.store or Path(tmp) / "store.sqlite"
        if path.exists():
            raise SystemExit(f"{path}: exists; give a new path (the synthetic runs are written once)")
        t0 = time.perf_counter()
        store = build(path)
        print(f"synthetic store {path}: written in {time.perf_counter() - t0:.1f} s "
              f"({path.stat().st_size / MB:.1f} MB)\n")
        rows = [measure(store, c, args.repeat, args.keep) for c in cases(store)]
    print(f"{'report':40} {'load s':>7} {'build s':>8} {'total s':>8} {'build/load':>10} {'MB':>6} "
          f"{'figs':>5}  target")
    for m in rows:
        target = f"≤ {m.case.max_s:g} s" + (f", ≤ {m.case.max_mb:g} MB" if m.case.max_mb else "")
        print(f"{m.case.name:40} {m.load_s:7.2f} {m.build_s:8.2f} {m.total_s:8.2f} {m.build_s / m.load_s:10.1f} "
              f"{m.mb:6.2f} {m.figures:5d}  {target}: {'PASS' if m.ok else 'FAIL'}")
    print("\nwhere the build time goes (one more build, drawn in one process; seconds per chart kind):")
    for m in rows:
        print(f"  {m.case.name:38} " + "  ".join(f"{k} {v:.2f}" for k, v in m.by_kind.items() if v >= 0.01)
              + f"  = {sum(m.by_kind.values()):.2f} in one process")
    print(f"\nmedian of {args.repeat} builds each; total = load (run_detail, the baseline) + build (build_html); "
          f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
