"""The points of a latency-vs-load curve, planned when the curve's maximum has its result
(:mod:`labcontract.loadcurve`; called by the fio step kind as :mod:`.preconditioning` is for a round).

The points take the maximum's ``seq`` and rounds 1..N in ascending load, so the scheduler (which takes a run's
next step by ``(seq, round)``) runs them right after the maximum and before the plan's next cell, on the device
state the maximum left.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from labcontract.fiojob import render_job
from labcontract.fioresult import StepMetrics
from labcontract.loadcurve import CURVE, POINT, point_name, rates_per_job
from labcontract.suite import Workload, mixed
from orchestrator.states import StepState
from orchestrator.store.models import Run, Step

log = logging.getLogger("orchestrator.controller")


def is_maximum(step: Step) -> bool:
    """A measured step whose result starts a load curve."""
    return step.kind == "measure" and bool(step.cell.get(CURVE)) and POINT not in step.cell


def points_after(run: Run, step: Step, metrics: StepMetrics) -> tuple[list[Step], str]:
    """The curve's point steps after the maximum ``step`` measured ``metrics``, and a note of what was left out
    (a percentage whose rate is below one I/O per second per job, in a direction of a mixed workload; every point
    when the maximum reached nothing)."""
    base = Workload.model_validate(step.workload)
    devices = list(run.devices or [run.device])
    jobs = base.numjobs * len(devices)
    max_iops = float(metrics.combined.iops or 0.0)
    read_iops, write_iops = float(metrics.read.iops or 0.0), float(metrics.write.iops or 0.0)
    both = mixed(base)
    have = {st.id for st in run.steps}
    out: list[Step] = []
    left_out: list[str] = []
    pcts = sorted({int(p) for p in step.cell.get(CURVE) or []})
    for n, pct in enumerate(pcts, 1):
        rate = rates_per_job(read_iops, write_iops, pct, jobs, mixed=both)
        if rate is None:
            left_out.append(f"{pct}%")
            continue
        sid = f"{step.id}-l{pct:02d}"
        if sid in have:                       # planned once (a stored result is never stored twice)
            continue
        try:
            w = Workload.model_validate({**base.model_dump(mode="python"), "name": point_name(base.name, pct),
                                         "rate_iops": rate})
        except ValidationError as e:          # a name at its length bound; the maximum's result stands
            left_out.append(f"{pct}% ({e.errors()[0]['msg']})")
            continue
        cell = {k: v for k, v in step.cell.items() if k != CURVE}
        out.append(Step(id=sid, run_id=run.id, seq=step.seq, round=n, kind="measure", name=w.name,
                        cell={**cell, POINT: pct},
                        note=f"{pct}% of the maximum's {max_iops:,.0f} IOPS: rate_iops={rate} for each of {jobs} "
                             f"job(s)" + (f"; {step.note}" if step.note else ""),
                        workload=w.model_dump(mode="json"), job_text=render_job(w, devices),
                        state=str(StepState.PENDING)))
    note = ""
    if left_out:
        note = (f"load curve: {', '.join(left_out)} left out (the maximum reached {max_iops:,.0f} IOPS over "
                f"{jobs} job(s); a point needs at least 1 IOPS per job)")
    return out, note
