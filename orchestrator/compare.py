"""Two runs side by side (stock vs HP, device A vs B, OS vs OS): cell by cell, difference in %."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

from orchestrator.queries import RunDetail, run_detail
from orchestrator.store.models import Result, Step

METRICS = (("iops", "IOPS", 1.0, "{:,.0f}"), ("bw_bytes", "MB/s", 1e-6, "{:,.1f}"),
           ("lat_mean_ns", "avg lat us", 1e-3, "{:,.1f}"), ("lat_max_ns", "max lat us", 1e-3, "{:,.1f}"),
           ("lat_stddev_ns", "lat stddev us", 1e-3, "{:,.1f}"))


@dataclass(frozen=True)
class Comparison:
    a: RunDetail
    b: RunDetail
    rows: list[tuple[str, Result | None, Result | None]]


def cell_key(step: Step) -> tuple[Any, ...]:
    """What makes two measured cells comparable across runs: profile and swept values, not the OP mode."""
    return tuple(sorted((k, str(v)) for k, v in step.cell.items() if k != "op_mode"))


def compare_runs(s: Session, ref_a: str, ref_b: str) -> Comparison:
    a, b = run_detail(s, ref_a), run_detail(s, ref_b)
    b_cells = {cell_key(st): st for st in b.steps if st.kind == "measure"}
    rows: list[tuple[str, Result | None, Result | None]] = []
    seen = set()
    for st in a.steps:
        if st.kind != "measure":
            continue
        key = cell_key(st)
        seen.add(key)
        other = b_cells.get(key)
        rows.append((st.name, a.results.get(st.id), b.results.get(other.id) if other else None))
    for key, st in b_cells.items():
        if key not in seen:
            rows.append((st.name, None, b.results.get(st.id)))
    return Comparison(a, b, rows)


def diff_pct(x: float | None, y: float | None) -> float | None:
    if x is None or y is None or x == 0:
        return None
    return (y - x) / x * 100


def print_comparison(console: Console, c: Comparison) -> None:
    if c.a.run.topology or c.b.run.topology:
        from orchestrator.netreport import print_net_comparison

        print_net_comparison(console, c.a, c.b)
        return
    def label(d: RunDetail) -> str:
        r = d.run
        modes = sorted({st.cell.get("op_mode", "stock") for st in d.steps})
        return f"{r.id} ({r.suite_name}, {r.host}:{','.join(r.devices or [r.device])}, {'/'.join(modes)})"

    console.print(f"A: {label(c.a)}\nB: {label(c.b)}", highlight=False)
    table = Table("cell")
    for _key, title, _scale, _fmt in METRICS:
        table.add_column(f"{title} A", justify="right")
        table.add_column(f"{title} B", justify="right")
        table.add_column("B vs A", justify="right")
    for name, ra, rb in c.rows:
        cells = [name]
        for key, _title, scale, fmt in METRICS:
            va = getattr(ra, key) if ra else None
            vb = getattr(rb, key) if rb else None
            d = diff_pct(va, vb)
            cells += [fmt.format(va * scale) if va is not None else "-",
                      fmt.format(vb * scale) if vb is not None else "-",
                      f"{d:+.1f}%" if d is not None else "-"]
        table.add_row(*cells)
    console.print(table)
