"""What the run page shows beside its steps, computed once for the page and its live feed (web/live.py) alike:

- each step's honest progress (:func:`step_progress`): a step that ended without starting shows none, one that
  stopped part-way shows where it stopped, a running one its agent's elapsed / expected seconds;
- the run's ETA (:func:`eta`) from its planned steps' durations and what has run, and how much longer it may be
  while a precondition group is not steady yet (each further round it may still plan);
- where preconditioning stands (:func:`preconditioning`): round k of at most N, the current window's figures;
- the commands the run's state allows (:func:`actions`);
- the steady-state verdicts, overrides and warnings as ``labctl run show`` prints them (:func:`run_facts`, from
  orchestrator.runfacts and orchestrator.provenance: the same read side, not a second computation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from labcontract.errors import LabError
from labcontract.rounds import is_wipc
from orchestrator.provenance import override_warnings
from orchestrator.runfacts import overridden, override_rows, precondition_fact, precondition_labels
from orchestrator.states import TERMINAL_RUN
from orchestrator.store.models import PreconditionRecord, Run, Step

ACTIVE_RUN = ("QUEUED", "RUNNING", "PAUSED")
RERUN_STATES = ("FAILED", "CANCELLED", "LOST")     # orchestrator.controller.admin.RERUN_STATES


def expected_s(workload: dict[str, Any] | None) -> float:
    """A step's planned seconds of fio (runtime and ramp); 0 for a step without a workload."""
    w = workload if isinstance(workload, dict) else {}
    try:
        return max(float(w.get("runtime", 0) or 0) + float(w.get("ramp_time", 0) or 0), 0.0)
    except (TypeError, ValueError):
        return 0.0


def clamp(x: float) -> float:
    return round(min(max(x, 0.0), 1.0), 4)


def step_progress(state: str, workload: dict[str, Any] | None, fio_started: float | None,
                  stopped: float | None, now: float, live: tuple[float, float] | None = None) -> float:
    """0..1: SUCCEEDED is 1; a step that ended (failed, cancelled) without fio ever starting is 0, one that
    stopped part-way is where it stopped (``stopped``: when fio ended or the attempt did); a running step is its
    agent's ``live`` (elapsed, expected) seconds or the time since fio started, below 1 until it ended."""
    return progress(state, expected_s(workload), fio_started, stopped, now, live)


def progress(state: str, exp: float, fio_started: float | None, stopped: float | None, now: float,
             live: tuple[float, float] | None = None) -> float:
    """:func:`step_progress` of a step whose planned seconds of fio are ``exp`` (the live poller keeps them per
    step instead of decoding every step's workload each second)."""
    if state == "SUCCEEDED":
        return 1.0
    if state in ("FAILED", "CANCELLED"):
        if not fio_started:
            return 0.0
        if stopped is None or exp <= 0:
            return 0.0
        return min(clamp((stopped - fio_started) / exp), 0.99)
    if state not in ("DISPATCHED", "RUNNING", "LOST"):      # PENDING (again, after a rerun: its old attempt)
        return 0.0
    if live is not None and live[1] > 0:
        return clamp(live[0] / live[1])
    if fio_started and exp > 0:
        return min(clamp((now - fio_started) / exp), 0.99)
    return 0.0


def eta(steps: Sequence[dict[str, Any]], precond: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Seconds left: ``eta_s`` of the planned steps not done (each its expected seconds less its progress),
    ``eta_max_s`` with every further round a precondition group not steady yet may still plan. Each step:
    ``state``, ``progress``, ``expected_s``; ``precond``: :func:`preconditioning`'s groups. None when no step
    that is left has a known duration."""
    left = [st for st in steps if st["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED")]
    if not left:
        return {"eta_s": 0.0, "eta_max_s": 0.0, "text": "nothing left to run"}
    known = [st for st in left if st["expected_s"] > 0]
    if not known:
        return None
    eta_s = sum(st["expected_s"] * (1 - st["progress"]) for st in known)
    more = sum(max((g["max_rounds"] or 0) - g["planned"], 0) * g["round_s"] for g in precond
               if g["steady"] is None)
    return {"eta_s": round(eta_s, 1), "eta_max_s": round(eta_s + more, 1), "text": eta_text(eta_s, eta_s + more)}


def _span(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def eta_text(eta_s: float, eta_max_s: float) -> str:
    """``about 2 min 05 s left`` (``, up to 9 min 00 s if preconditioning needs every round``)."""
    more = f", up to {_span(eta_max_s)} if preconditioning needs every round" if eta_max_s > eta_s + 0.5 else ""
    return f"about {_span(eta_s)} left{more} (planned steps' durations)"


def preconditioning(steps: Sequence[dict[str, Any]], records: Iterable[PreconditionRecord],
                    max_rounds: int | None, labels: Mapping[int, str] | None = None) -> list[dict[str, Any]]:
    """Per precondition group (steps of one ``seq`` with rounds): its verdict fact (orchestrator.runfacts), the
    rounds planned, the round running, the planned round's seconds. ``max_rounds``: the run's cap as planned,
    for a group whose first round has not ended (no record yet)."""
    labels = labels or {}
    by_seq = {rec.seq: precondition_fact(rec, labels.get(rec.seq)) for rec in records}
    groups: dict[int, list[dict[str, Any]]] = {}
    for st in steps:
        if st["kind"] == "precondition" and not is_wipc(st.get("cell")):   # a WIPC pass is no steady-state group
            groups.setdefault(st["seq"], []).append(st)
    out = []
    for seq, rounds in sorted(groups.items()):
        fact = by_seq.get(seq) or {"seq": seq, "name": labels.get(seq) or rounds[0]["name"].rsplit(".round", 1)[0],
                                   "state": "running",
                                   "steady": None, "rounds": 0, "max_rounds": max_rounds, "window": None,
                                   "track": "", "reached_round": None, "verdict": "", "line": ""}
        running = next((r["round"] for r in rounds if r["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED",
                                                                           "PENDING")), None)
        out.append({**fact, "planned": len(rounds), "running": running, "round_s": rounds[-1]["expected_s"]})
    return out


def actions(run_state: str, step_states: Iterable[str]) -> list[str]:
    """The commands the run's state allows: cancel and pause (or resume) while it is active, rerun once it ended
    with a failed, cancelled or lost step."""
    if run_state in ACTIVE_RUN:
        return ["cancel", "resume" if run_state == "PAUSED" else "pause"]
    if run_state in TERMINAL_RUN and any(s in RERUN_STATES for s in step_states):
        return ["rerun"]
    return []


def planned_max_rounds(run: Run) -> int | None:
    """The run's precondition rounds at most, as planned (the suite's, capped by the submission's max_rounds)."""
    from orchestrator.runs.preconditioning import precondition_of

    try:
        pc = precondition_of(run)
    except (LabError, ValueError):
        return None
    return pc.max_rounds if pc is not None else None


def records(s: Session, run_id: str) -> list[PreconditionRecord]:
    return list(s.scalars(select(PreconditionRecord).where(PreconditionRecord.run_id == run_id)
                          .order_by(PreconditionRecord.seq)))


def labels(s: Session, run_id: str) -> dict[int, str]:
    """Each precondition group's name (orchestrator.runfacts.precondition_labels), from its first round's step."""
    first = (select(Step.seq, func.min(Step.round).label("r")).where(Step.run_id == run_id, Step.kind == "precondition")
             .group_by(Step.seq).subquery())
    steps = s.scalars(select(Step).join(first, and_(Step.seq == first.c.seq, Step.round == first.c.r))
                      .where(Step.run_id == run_id, Step.kind == "precondition"))
    return precondition_labels(steps)


def page_view(s: Session, run: Run, steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the run page shows beside its steps (``steps``: orchestrator.web.queries.step_dict's): the verdicts of
    its precondition groups, its overrides and warnings as ``labctl run show`` prints them, where preconditioning
    stands, the ETA and the commands its state allows."""
    recs = records(s, run.id)
    labels = precondition_labels(run.steps)
    precond = preconditioning(steps, recs, planned_max_rounds(run), labels) if any(
        st["kind"] == "precondition" and not is_wipc(st.get("cell")) for st in steps) else []
    return {"preconditions": [precondition_fact(r, labels.get(r.seq)) for r in recs],
            "overrides": overridden(override_rows(run)),
            "warnings": override_warnings(run), "preconditioning": precond,
            "eta": eta(steps, precond) if run.state not in TERMINAL_RUN else None,
            "actions": actions(run.state, (st["state"] for st in steps))}
