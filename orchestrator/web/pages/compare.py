"""``/compare``: two runs or more, the baseline chosen among them (``baseline=RUN``; by default the first
picked), the verdict summary first (every significant difference of a headline figure against the baseline,
:func:`orchestrator.compare.compare_details`, the numbers ``labctl compare`` prints), then the comparison's charts
(``/compare/view``, drawn by ``orchestrator.web.render``; a page saying it is being drawn until then:
``orchestrator.web.pages.frames``). The baseline is the comparison's first run, as in ``labctl compare`` and
``GET /api/compare``: the page orders the runs so, and its form picking other runs carries it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from labcontract.errors import CompareError, InputError, Problem
from orchestrator.cellmetrics import HEADLINE
from orchestrator.compare import ALPHA, Comparison, baseline_first, compare_details, ref_name
from orchestrator.reference import Reference, reference_set
from orchestrator.web import queries
from orchestrator.web.pages.common import need, render
from orchestrator.web.pages.frames import framed

router = APIRouter(include_in_schema=False)

MAX_COMPARE = 8
MAX_FINDINGS = 100           # significant differences listed on the page (the others: counted, and in the CSV)
Runs = Annotated[list[str], Query(max_length=MAX_COMPARE * 2)]


@dataclass(frozen=True)
class Finding:
    """A significant difference of one run against the baseline on one headline figure of one cell."""

    cell: str
    ref: str                 # B, C, ...
    run_id: str
    metric: str              # its title
    diff_pct: float | None   # the run's mean against the baseline's, in %
    better: bool
    p: float | None


@dataclass
class RunVerdicts:
    """One run against the baseline: how many (cell, headline figure) pairs fall under each verdict."""

    ref: str
    run_id: str
    worse: int = 0
    better: int = 0
    same: int = 0            # no significant difference
    unjudged: int = 0        # a single repeat on either side


@dataclass
class Summary:
    runs: list[RunVerdicts]
    findings: list[Finding] = field(default_factory=list)     # the worse first, the largest change first
    more: int = 0            # significant differences beyond MAX_FINDINGS
    metrics: list[str] = field(default_factory=list)


def summary(c: Comparison) -> Summary:
    """The verdicts of every run against the first (the baseline) on the headline figures (``Comparison.judged``,
    each difference judged as ``labctl compare`` judges it: ``Row.verdict``)."""
    runs = [RunVerdicts(ref_name(i), d.run.id) for i, d in enumerate(c.details)][1:]
    found: list[Finding] = []
    for row in c.rows:
        for i in range(1, len(row.entries)):
            counts = runs[i - 1]
            for m in c.judged:
                v = row.verdict(i, m.name)
                if v is None:
                    continue
                if v.kind == "significant":
                    better = ((v.diff or 0.0) > 0) == HEADLINE.get(m.name, True)
                    counts.better += better
                    counts.worse += not better
                    found.append(Finding(row.label, counts.ref, counts.run_id, m.title, row.diff(i, m.name), better,
                                         v.p))
                elif v.kind == "no significant difference":
                    counts.same += 1
                else:
                    counts.unjudged += 1
    found.sort(key=lambda f: (f.better, -abs(f.diff_pct or 0.0)))
    return Summary(runs, found[:MAX_FINDINGS], max(len(found) - MAX_FINDINGS, 0), [m.title for m in c.judged])


def compare_ids(run: list[str]) -> list[str]:
    ids = list(dict.fromkeys(r.strip() for r in run if r.strip()))
    if len(ids) > MAX_COMPARE:
        raise InputError("run", [Problem("run", f"at most {MAX_COMPARE} runs are compared at once")])
    for rid in ids:
        queries.check_run_id(rid)
    return ids


def with_baseline(ids: list[str], baseline: str) -> list[str]:
    """``ids`` with ``baseline`` first (none given: as they are; :func:`orchestrator.compare.baseline_first`, as
    ``labctl compare --baseline`` and the API order them); InputError when it is not one of them."""
    try:
        return baseline_first(ids, baseline.strip())
    except CompareError as e:
        raise InputError("baseline", [Problem("baseline", str(e))]) from None


@router.get("/compare", response_class=HTMLResponse)
def compare(request: Request, run: Runs = [],   # noqa: B006
            baseline: Annotated[str, Query(max_length=64)] = "",
            reference: Annotated[str, Query(max_length=128)] = "") -> HTMLResponse:
    """Two runs or more: the verdicts against the baseline, then their overlaid charts; fewer: pick them among
    the newest ended runs. ``reference=SUITE``: the baseline against every device measured with the suite
    (:mod:`orchestrator.reference`)."""
    need(request, "viewer")
    ids = with_baseline(compare_ids(run), baseline)
    verdicts: Summary | None = None
    why = ""
    with request.app.state.web.sessions() as s:
        chosen = []
        for rid in ids:
            r = queries.get_run(s, rid)
            chosen.append({"id": r.id, "suite": r.suite_name, "host": r.host, "state": r.state,
                           "ended_at": r.ended_at, "lab": r.lab or ""})
        ref, ref_why = reference_or_why(s, ids, reference.strip())
        if len(ids) >= 2:
            try:
                verdicts = summary(compare_details([queries.detail(s, rid, light=True) for rid in ids]))
            except CompareError as e:            # no cell in common, ...: said here and in the frame
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
        recent, _nxt = queries.run_page(s, limit=50)
    return render(request, "compare.html", chosen=chosen, recent=recent, selected=set(ids), verdicts=verdicts,
                  why=why, reference=ref, reference_why=ref_why, reference_suite=reference.strip(),
                  alpha=ALPHA, refs={rid: ref_name(i) for i, rid in enumerate(ids)},
                  baseline=ids[0] if ids else "",
                  view_qs=urlencode([("run", rid) for rid in ids]))


def reference_or_why(s: Session, ids: list[str], suite: str) -> tuple[Reference | None, str]:
    """The first run against the reference set of ``suite`` (none asked: None), or why there is none."""
    if not suite:
        return None, ""
    if not ids:
        return None, "pick the run to set against the reference set"
    try:
        return reference_set(s, ids[0], suite), ""
    except CompareError as e:
        return None, str(e).splitlines()[0]


@router.get("/compare/view", response_class=HTMLResponse)
def compare_frame(request: Request, run: Runs = []) -> Response:  # noqa: B006
    """The comparison's HTML report, the first run its baseline; while it is drawn, a page saying so, which the
    report then takes the place of (:func:`orchestrator.web.pages.frames.framed`)."""
    need(request, "viewer")
    ids = compare_ids(run)
    if len(ids) < 2:
        raise InputError("run", [Problem("run", "pick two runs or more to compare")])
    return framed(request, "compare", ids)
