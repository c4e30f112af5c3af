"""Precondition rounds: record each round's four metrics and decide whether another round runs.

A precondition group is the steps of one ``seq`` with ``round`` 1, 2, ... The controller calls
:func:`after_round` when a round succeeded; it appends the round to the group's
:class:`PreconditionRecord`, judges SNIA steady state over the last ``window`` rounds of the
tracked value, and returns the next round's step (PENDING) or None when the group is done
(steady, or ``max_rounds`` reached).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.fiojob import render_job
from labcontract.fioresult import StepMetrics
from labcontract.steady import SteadyCriteria, detect
from labcontract.suite import Precondition, Suite, Workload, parse_suite, with_overrides
from orchestrator.runs.planner import round_workload
from orchestrator.states import StepState
from orchestrator.store.models import PreconditionRecord, Run, Step


@functools.lru_cache(maxsize=512)
def parsed_suite(text: str, source: str) -> Suite:
    """A stored run's suite (it parsed once at submission); cached: the scheduler asks every pass."""
    return parse_suite(text, source)


def suite_of(run: Run) -> Suite:
    return parsed_suite(run.suite_text, run.suite_source)


def precondition_of(run: Run) -> Precondition | None:
    """The run's precondition phase as planned: the suite's, with the run's --scale applied and its rounds capped
    by the run's own ``max_rounds`` (a submission's, never above the suite's)."""
    pc = with_overrides(suite_of(run), scale=run.scale).phases.precondition
    if pc is not None and run.max_rounds is not None and run.max_rounds < pc.max_rounds:
        pc = pc.model_copy(update={"max_rounds": run.max_rounds})
    return pc


def record(s: Session, run: Run, step: Step) -> PreconditionRecord:
    rec = s.scalar(select(PreconditionRecord).where(PreconditionRecord.run_id == run.id,
                                                    PreconditionRecord.seq == step.seq))
    if rec is None:
        pc = precondition_of(run)
        if pc is None:  # pragma: no cover - a precondition step only exists when the suite has one
            raise ValueError(f"run {run.id}: suite has no precondition phase")
        rec = PreconditionRecord(run_id=run.id, seq=step.seq, name=step.name.rsplit(".round", 1)[0],
                                 criteria=pc.model_dump(mode="json"), rounds=[], verdict="")
        s.add(rec)
    return rec


def round_values(m: StepMetrics) -> dict[str, Any]:
    c = m.combined
    return {"iops": c.iops, "lat_mean_ns": c.lat_mean_ns, "lat_max_ns": c.lat_max_ns,
            "lat_stddev_ns": c.lat_stddev_ns, "read_iops": m.read.iops, "write_iops": m.write.iops,
            "bw_bytes": c.bw_bytes}


def after_round(s: Session, run: Run, step: Step, metrics: StepMetrics, now: float | None = None) -> Step | None:
    rec = record(s, run, step)
    pc = Precondition.model_validate(rec.criteria)
    rounds = [*rec.rounds, {"round": step.round, **round_values(metrics)}]
    rec.rounds = rounds
    key = "iops" if pc.track == "iops" else "lat_mean_ns"
    values = [float(r[key] or 0.0) for r in rounds]
    verdict = detect(values, SteadyCriteria(window=pc.window, max_range_pct=pc.max_range_pct,
                                            max_excursion_pct=pc.max_excursion_pct))
    if verdict.steady or len(rounds) >= pc.max_rounds:
        rec.steady = verdict.steady
        rec.reached_round = verdict.round
        rec.verdict = verdict.reason if verdict.steady else \
            f"not steady after {len(rounds)} rounds (max_rounds {pc.max_rounds}): {verdict.reason}"
        rec.ended_at = now or time.time()
        return None
    rec.verdict = verdict.reason
    base = Workload.model_validate(step.workload).model_copy(update={"name": rec.name})
    nxt = round_workload(base, step.round + 1)
    return Step(id=f"{run.id}-s{step.seq:03d}-r{step.round + 1:03d}", run_id=run.id, seq=step.seq,
                round=step.round + 1, kind="precondition", name=nxt.name, cell={**step.cell, "round": step.round + 1},
                note=step.note, workload=nxt.model_dump(mode="json"), job_text=render_job(nxt, run.devices),
                state=str(StepState.PENDING))


def fail_group(s: Session, run: Run, step: Step, reason: str, now: float | None = None) -> None:
    rec = record(s, run, step)
    rec.steady = False
    rec.verdict = f"round {step.round} failed: {reason}"
    rec.ended_at = now or time.time()
