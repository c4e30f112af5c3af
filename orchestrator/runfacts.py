"""What a run was asked to be and how its preconditioning went, in the words ``labctl run show`` prints them: the
one read side of the terminal (orchestrator.report, orchestrator.provenance) and the web's run page and live feed
(orchestrator.web.runview), so that the two never say different things of the same run.

- :func:`precondition_line`: ``precondition <group>: steady|NOT steady|running, N round(s): <verdict>``, the
  verdict as the controller stored it (orchestrator.runs.preconditioning: ``steady at round N: window a-b range
  x% ≤ y%, excursion ...`` or ``not steady after N rounds (max_rounds M): ...``);
- :func:`precondition_fact`: the same line with its parts (rounds so far, at most how many, the window, the
  reached round) for a page to lay out;
- :func:`override_rows`: the overrides the run was submitted with (runtime, scale, max rounds, repeat), each
  against what its suite says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labcontract.errors import LabError
from labcontract.suite import Precondition, Rounds, Suite
from orchestrator.cells import cell_label
from orchestrator.store.models import PreconditionRecord, Run, Step

Rows = list[tuple[str, str]]


def steady_word(steady: bool | None) -> str:
    return "running" if steady is None else "steady" if steady else "NOT steady"


def precondition_labels(steps: Iterable[Step]) -> dict[int, str]:
    """Each precondition group (``seq``) by its cell's one name (:func:`orchestrator.cells.cell_label`, as the
    reports title its charts), from the first of its round steps."""
    out: dict[int, str] = {}
    for st in steps:
        if st.kind == "precondition" and st.seq not in out:
            out[st.seq] = cell_label(st.cell or {}, st.workload)
    return out


def precondition_line(pc: PreconditionRecord, label: str | None = None) -> str:
    """The line ``labctl run show`` prints for a precondition group (``label``: its cell's name, else its record's
    name, when no step of it is left)."""
    return (f"precondition {label or pc.name}: {steady_word(pc.steady)}, {len(pc.rounds or [])} round(s): "
            f"{pc.verdict}")


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def precondition_fact(pc: PreconditionRecord, label: str | None = None) -> dict[str, Any]:
    """A precondition group's verdict for a page: its line and the parts of it."""
    crit = pc.criteria if isinstance(pc.criteria, dict) else {}
    return {"seq": pc.seq, "name": pc.name, "state": steady_word(pc.steady), "steady": pc.steady,
            "rounds": len(pc.rounds or []), "max_rounds": _int(crit.get("max_rounds")),
            "window": _int(crit.get("window")), "track": str(crit.get("track") or ""),
            "reached_round": pc.reached_round, "verdict": pc.verdict or "", "line": precondition_line(pc, label)}


def _suite(run: Run) -> Suite | None:
    try:
        from orchestrator.runs.preconditioning import suite_of  # cached: one parse per suite text

        return suite_of(run)
    except (LabError, ValueError):
        return None


def planned_repeat(run: Run) -> int:
    """How many times each measured cell runs (the steps' ``repeat`` keys: a submission's --repeat or the
    suite's own)."""
    reps = [st.cell.get("repeat") for st in run.steps if st.kind == "measure" and isinstance(st.cell, dict)]
    return max((r for r in reps if isinstance(r, int)), default=1)


def override_rows(run: Run) -> Rows:
    """The run's overrides as ``labctl run show`` lists them in its Run section ("none" for one not given)."""
    suite = _suite(run)
    pc: Precondition | Rounds | None = None
    if suite is not None:
        pc = suite.phases.precondition or suite.phases.rounds
    rows: Rows = [("runtime override", f"{run.runtime_override} s per cell" if run.runtime_override is not None
                   else "none"),
                  ("scale", f"x{run.scale:g}" if run.scale is not None else "none")]
    if run.max_rounds is not None:
        said = f" (suite says {pc.max_rounds})" if pc is not None else ""
        rows.append(("max rounds", f"{run.max_rounds}{said}"))
    elif pc is not None:
        rows.append(("max rounds", f"none (suite says {pc.max_rounds})"))
    if suite is not None and suite.phases.rounds is not None:
        rows.append(("repeat", f"each round's, the steady-state window's {suite.phases.rounds.window} rounds "
                               "reported per cell"))
    elif suite is not None and suite.app is None and run.topology is None:
        n = planned_repeat(run)
        rows.append(("repeat", f"{n} per cell" + (f" (suite says {suite.repeat})" if n != suite.repeat else "")))
    return rows


def overridden(rows: Rows) -> Rows:
    """The rows of :func:`override_rows` that name an override actually given."""
    return [(k, v) for k, v in rows
            if not v.startswith("none") and (k in ("runtime override", "scale") or "suite says" in v)]
