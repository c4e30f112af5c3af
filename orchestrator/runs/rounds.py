"""A rounds run (SNIA PTS-E's form, :mod:`labcontract.rounds`): record the tracked cell's figures each round,
judge steady state when a round ends, and queue the next round (every measured cell of the OP mode again).

One :class:`~orchestrator.store.models.PreconditionRecord` per OP mode, at the ``seq`` of the mode's first
measured cell, named ``rounds.<cell>``: its rounds are the tracked cell's four metrics per round (what the verdict
judged), its ``reached_round`` the end of the steady-state window whose rounds the reports average
(:func:`labcontract.rounds.window_rounds`). The controller calls :func:`after_cell` when a rounds run's measured
step stored its result and :func:`fail_cell` when one failed for good (no further round then).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.fiojob import render_job
from labcontract.fioresult import StepMetrics
from labcontract.rounds import ROUND, round_of, track_key
from labcontract.steady import SteadyCriteria, detect
from labcontract.suite import Rounds, Workload, tracked_cell
from orchestrator.runs.planner import round_cell_workload
from orchestrator.runs.preconditioning import round_values, suite_of
from orchestrator.states import StepState
from orchestrator.store.models import PreconditionRecord, Run, Step


def rounds_of(run: Run) -> Rounds | None:
    """The run's rounds phase, its ``max_rounds`` capped by the submission's own (never above the suite's)."""
    rounds = suite_of(run).phases.rounds
    if rounds is not None and run.max_rounds is not None and run.max_rounds < rounds.max_rounds:
        rounds = rounds.model_copy(update={"max_rounds": run.max_rounds})
    return rounds


def is_rounds_step(step: Step) -> bool:
    return step.kind == "measure" and round_of(step.cell or {}) is not None


def _group(run: Run, step: Step) -> list[Step]:
    """The measured steps of ``step``'s OP mode in ``step``'s round, in plan order."""
    mode, r = step.cell.get("op_mode", "stock"), step.round
    return sorted((st for st in run.steps if is_rounds_step(st) and st.round == r
                   and st.cell.get("op_mode", "stock") == mode), key=lambda st: st.seq)


def _record(s: Session, run: Run, step: Step, rounds: Rounds) -> PreconditionRecord:
    mode = str(step.cell.get("op_mode", "stock"))
    first = min(st.seq for st in run.steps if is_rounds_step(st) and st.cell.get("op_mode", "stock") == mode)
    rec = s.scalar(select(PreconditionRecord).where(PreconditionRecord.run_id == run.id,
                                                    PreconditionRecord.seq == first))
    if rec is None:
        tracked = tracked_cell(suite_of(run), mode).workload.name
        rec = PreconditionRecord(run_id=run.id, seq=first, name=f"rounds.{tracked}",
                                 criteria={**rounds.model_dump(mode="json"), "form": "rounds", "cell_name": tracked,
                                           "op_mode": mode},
                                 rounds=[], verdict="")
        s.add(rec)
    return rec


def _is_tracked(rec: PreconditionRecord, step: Step) -> bool:
    return step.name == f"{rec.criteria.get('cell_name')}.round{step.round}"


def after_cell(s: Session, run: Run, step: Step, metrics: StepMetrics, now: float | None = None) -> list[Step]:
    """Record the tracked cell's figures; at the round's last cell, judge steady state and return the next
    round's steps (PENDING), or none when the mode is done (steady, ``max_rounds``, or a cell failed)."""
    rounds = rounds_of(run)
    if rounds is None:      # pragma: no cover - a rounds step exists only when the suite has the phase
        return []
    rec = _record(s, run, step, rounds)
    if _is_tracked(rec, step):
        rec.rounds = [*rec.rounds, {"round": step.round, **round_values(metrics)}]
    group = _group(run, step)
    if rec.ended_at is not None or step is not group[-1]:
        return []
    return _judge(run, rec, rounds, group, step.round, now)


def _judge(run: Run, rec: PreconditionRecord, rounds: Rounds, group: list[Step], r: int,
           now: float | None) -> list[Step]:
    values = [float(x.get(track_key(rounds.track)) or 0.0) for x in rec.rounds]
    verdict = detect(values, SteadyCriteria(window=rounds.window, max_range_pct=rounds.max_range_pct,
                                            max_excursion_pct=rounds.max_excursion_pct))
    if verdict.steady or r >= rounds.max_rounds:
        rec.steady = verdict.steady
        rec.reached_round = verdict.round
        rec.verdict = verdict.reason if verdict.steady else \
            f"not steady after {r} rounds (max_rounds {rounds.max_rounds}): {verdict.reason}"
        rec.ended_at = now or time.time()
        return []
    rec.verdict = verdict.reason
    return [next_round_step(run, st, r + 1) for st in group]


def next_round_step(run: Run, step: Step, r: int) -> Step:
    w = round_cell_workload(Workload.model_validate(step.workload), r)
    cell: dict[str, Any] = {**step.cell, ROUND: r}
    return Step(id=f"{run.id}-s{step.seq:03d}-r{r:03d}", run_id=run.id, seq=step.seq, round=r, kind="measure",
                name=w.name, cell=cell, note=step.note, workload=w.model_dump(mode="json"),
                job_text=render_job(w, run.devices), state=str(StepState.PENDING))


def fail_cell(s: Session, run: Run, step: Step, reason: str, now: float | None = None) -> None:
    """A cell of the round failed for good: no further round (its window could not be judged), said so."""
    rounds = rounds_of(run)
    if rounds is None:      # pragma: no cover
        return
    rec = _record(s, run, step, rounds)
    if rec.ended_at is None:
        rec.steady = False
        rec.verdict = f"round {step.round}: {step.name} failed: {reason}"
        rec.ended_at = now or time.time()
