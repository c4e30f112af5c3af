"""A reference set: every device any lab measured with a suite (this lab's runs and the runs imported from other
labs, ``labctl import``), each device by its latest run of the suite that succeeded, and one run's headline figures
against their distribution: per cell and headline figure, the reference devices' minimum, median and maximum and
the run's percentile rank among them (100: better than every one; "better" is higher IOPS, MB/s, TPS or Gbps, lower
latency). ``labctl compare RUN --reference SUITE`` and the web compare page's ``reference=`` show it.

A device is (lab, host, device path) as the run names it; the run compared is never in its own reference set (its
device is, by its other runs)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.errors import CompareError
from orchestrator.cellmetrics import HEADLINE
from orchestrator.compare import Comparison, compare_details
from orchestrator.queries import RunDetail, run_detail
from orchestrator.store.models import Run

MAX_REFERENCE_DEVICES = 200      # the latest runs compared at once (the newest devices first past this)
FORMAT_VERSION = 1


@dataclass(frozen=True)
class RefDevice:
    lab: str            # "": this lab
    host: str
    device: str
    run_id: str         # its latest successful run of the suite


@dataclass(frozen=True)
class RefFigure:
    cell: str
    metric: str         # the metric's name (iops, mb_s, lat_mean_us, ...)
    title: str
    value: float | None           # the run's (the mean over the cell's repeats)
    n: int                        # reference devices with a value
    min: float | None
    median: float | None
    max: float | None
    rank_pct: float | None        # the run's percentile rank among them: 100 better than all, 0 worse than all
    higher_is_better: bool


@dataclass(frozen=True)
class LeftOut:
    """A reference device whose latest run cannot be set against the run (no cell in common, ...), and why."""

    device: RefDevice
    reason: str


@dataclass(frozen=True)
class Reference:
    run_id: str
    lab: str
    suite: str
    devices: list[RefDevice]
    figures: list[RefFigure]
    left_out: list[LeftOut] = field(default_factory=list)


def percentile_rank(value: float, others: Sequence[float], higher_is_better: bool) -> float:
    """The share of ``others`` ``value`` beats, ties counting half, in %."""
    better = sum(1 for x in others if (value > x if higher_is_better else value < x))
    ties = sum(1 for x in others if x == value)
    return (better + ties / 2) / len(others) * 100


def reference_devices(s: Session, suite: str, exclude: str) -> list[RefDevice]:
    """Every device measured with ``suite`` (a run that succeeded), by its latest run; ``exclude`` left out."""
    rows = s.execute(select(Run.id, Run.lab, Run.host, Run.device, Run.topology)
                     .where(Run.suite_name == suite, Run.state == "SUCCEEDED", Run.id != exclude)
                     .order_by(Run.submitted_at.desc(), Run.id.desc())).all()
    latest: dict[tuple[str, str, str], RefDevice] = {}
    for rid, lab, host, device, topology in rows:
        if topology:             # a network run names no device
            continue
        key = (lab or "", host, device)
        if key not in latest:
            latest[key] = RefDevice(lab or "", host, device, rid)
    return list(latest.values())[:MAX_REFERENCE_DEVICES]


def reference_of(detail: RunDetail, refs: Sequence[RunDetail], suite: str, devices: list[RefDevice],
                 units: str = "decimal") -> Reference:
    run = detail.run
    left_out: list[LeftOut] = []
    c: Comparison | None = None
    try:                                    # the usual case: every device compares, one comparison
        c = compare_details([detail, *refs], units)
    except CompareError:
        refs, devices, left_out = _comparable(detail, refs, devices, units)
        c = compare_details([detail, *refs], units) if refs else None
    if c is None:
        why = "; ".join(f"{x.device.run_id}: {x.reason}" for x in left_out[:3])
        raise CompareError(f"no device was measured with suite {suite!r} (a run that succeeded, in this lab or one "
                           f"imported) other than run {run.id}'s" + (f" that compares with it ({why})" if why else ""))
    figures = []
    for row in c.rows:
        if row.samples[0] is None:
            continue
        for m in c.judged:
            value = row.entries[0].values.get(m.name)
            others = [v for e in row.entries[1:] if (v := e.values.get(m.name)) is not None]
            higher = HEADLINE.get(m.name, True)
            figures.append(RefFigure(
                row.label, m.name, m.title, value, len(others), min(others) if others else None,
                statistics.median(others) if others else None, max(others) if others else None,
                percentile_rank(value, others, higher) if others and value is not None else None, higher))
    return Reference(run.id, run.lab or "", suite, devices, figures, left_out)


def _comparable(detail: RunDetail, refs: Sequence[RunDetail], devices: Sequence[RefDevice],
                units: str) -> tuple[list[RunDetail], list[RefDevice], list[LeftOut]]:
    """The reference runs that compare with ``detail`` (and their devices), and the others with the reason: one run of
    the suite with no cell in common (an older version of the suite, another OP mode) leaves out its device, not the
    whole set. Called only when the whole set did not compare: one comparison per device."""
    kept: list[RunDetail] = []
    kept_devices: list[RefDevice] = []
    left: list[LeftOut] = []
    for ref, device in zip(refs, devices, strict=True):
        try:
            compare_details([detail, ref], units)
        except CompareError as e:
            left.append(LeftOut(device, str(e)))
            continue
        kept.append(ref)
        kept_devices.append(device)
    return kept, kept_devices, left


def reference_set(s: Session, ref: str, suite: str, units: str = "decimal") -> Reference:
    """Run ``ref`` (id, unique prefix, ``last``) against the reference set of ``suite``."""
    detail = run_detail(s, ref, light=True)
    devices = reference_devices(s, suite, detail.run.id)
    refs = [run_detail(s, d.run_id, light=True) for d in devices]
    return reference_of(detail, refs, suite, devices, units)


def as_json(r: Reference) -> str:
    return json.dumps({"format_version": FORMAT_VERSION, **asdict(r)}, indent=2, ensure_ascii=False)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"


def table_lines(r: Reference) -> list[str]:
    """The reference as plain text lines (``labctl compare --reference``)."""
    where = f" (lab {r.lab})" if r.lab else ""
    out = [f"run {r.run_id}{where} against {len(r.devices)} devices measured with {r.suite}:"]
    out += [f"  {d.lab or 'this lab'}: {d.host}:{d.device} (run {d.run_id})" for d in r.devices]
    out += [f"  left out: {x.device.lab or 'this lab'}: {x.device.host}:{x.device.device} (run {x.device.run_id}): "
            f"{x.reason}" for x in r.left_out]
    heads = ("cell", "figure", "this run", "min", "median", "max", "n", "rank")
    rows = [(f.cell, f.title, _fmt(f.value), _fmt(f.min), _fmt(f.median), _fmt(f.max), str(f.n),
             "-" if f.rank_pct is None else f"{f.rank_pct:.0f}%") for f in r.figures]
    widths = [max(len(x) for x in col) for col in zip(heads, *rows, strict=False)]
    out.append("")
    for line in (heads, *rows):
        out.append("  ".join(x.ljust(w) if i < 2 else x.rjust(w) for i, (x, w) in enumerate(zip(line, widths,
                                                                                                  strict=True))))
    out.append("rank: the share of the reference devices this run does better than (higher IOPS / MB/s, lower "
               "latency), ties counting half")
    return out
