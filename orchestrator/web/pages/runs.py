"""``/runs`` (filters, pages), ``/runs/{id}`` (live progress, commands, the report when done); ``/compare`` is
``orchestrator.web.pages.compare``.

Reports and compares are the issue-13 HTML documents drawn by ``orchestrator.web.render``; a page embeds them
in a sandboxed iframe (no scripts, a unique origin) served by ``/runs/{id}/report`` and ``/compare/view``
with a CSP of their own that lets only this site frame them.
"""

from __future__ import annotations

import calendar
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from labcontract.errors import Busy, InputError, Problem
from labcontract.protocol import Cancel, Message, Pause, Rerun, Resume
from orchestrator.runhistory import HistoryCache
from orchestrator.states import RunState
from orchestrator.web import queries, runview
from orchestrator.web.api.regressions import history_slot
from orchestrator.web.auth import Principal, require
from orchestrator.web.pages.common import need, qs, render
from orchestrator.web.pages.frames import framed

router = APIRouter(include_in_schema=False)

Text = Annotated[str, Query(max_length=128)]
RunId = Annotated[str, Path(max_length=64)]
ACTIVE = ("QUEUED", "RUNNING", "PAUSED")


def _day(value: str, where: str, problems: list[Problem]) -> float | None:
    """A YYYY-MM-DD date (UTC midnight) as epoch seconds."""
    if not value:
        return None
    try:
        return float(calendar.timegm(time.strptime(value, "%Y-%m-%d")))
    except ValueError:
        problems.append(Problem(where, f"{value[:32]!r} is not a date (YYYY-MM-DD)"))
        return None


@router.get("/runs", response_class=HTMLResponse)
def runs(request: Request, state: Text = "", suite: Text = "", host: Text = "", model: Text = "",
         firmware: Text = "", op_mode: Text = "", since: Text = "", until: Text = "", before: Text = "",
         limit: Annotated[int, Query(ge=1, le=queries.MAX_LIMIT)] = 50) -> HTMLResponse:
    need(request, "viewer")
    problems: list[Problem] = []
    if state and state not in {str(s) for s in RunState}:
        problems.append(Problem("state", f"{state[:32]!r} is not a run state ({', '.join(RunState)})"))
    t0, t1 = _day(since, "since", problems), _day(until, "until", problems)
    if problems:
        raise InputError("filters", problems)
    f = queries.RunFilter(state=state or None, suite=suite or None, host=host or None, model=model or None,
                          firmware=firmware or None, op_mode=op_mode or None, since=t0,
                          until=None if t1 is None else t1 + 86400)
    with request.app.state.web.sessions() as s:
        page, nxt = queries.run_page(s, f, limit=limit, before=before or None)
    filters = {"state": state, "suite": suite, "host": host, "model": model, "firmware": firmware,
               "op_mode": op_mode, "since": since, "until": until}
    return render(request, "runs.html", runs=page, filters=filters, states=[str(s) for s in RunState],
                  next_qs=qs(filters, before=nxt) if nxt else None, first_qs=qs(filters) if before else None)


HISTORIES = HistoryCache()
MAX_ARTIFACT_ROWS = 300        # a run's raw output listed on its page (a long preconditioning has thousands)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: RunId,
             done: Literal["cancel", "pause", "resume", "rerun"] | None = None) -> HTMLResponse:
    need(request, "viewer")
    with request.app.state.web.sessions() as s:
        run = queries.run_dict(s, run_id)
        view = runview.page_view(s, queries.get_run(s, run_id), run["steps"])
        artifacts = queries.run_artifacts(s, run_id)          # each step's raw output: job file, fio.json, stderr
        ended = run["state"] not in ACTIVE
        busy = ""
        try:    # its cells against their history (issue 16), read in one of the service's bounded history slots
            hist = HISTORIES.get(s, run_id, guard=history_slot) if ended else None
        except Busy:
            hist, busy = None, "not read now: the service is busy reading histories; reload in a few seconds"
    marks = hist.step_marks((st["id"], st["kind"], st["cell"]) for st in run["steps"]) if hist else {}
    return render(request, "run.html", run=run, ended=ended, active=not ended, view=view,
                  history=hist.summary() if hist else busy, regressed=marks, artifacts=artifacts[:MAX_ARTIFACT_ROWS],
                  more_artifacts=max(len(artifacts) - MAX_ARTIFACT_ROWS, 0),
                  done=f"{done} accepted" if done else "")    # fixed texts: a link cannot make the page say anything


COMMANDS: dict[str, type[Message]] = {"cancel": Cancel, "pause": Pause, "resume": Resume, "rerun": Rerun}


@router.post("/runs/{run_id}/{action}")
def run_action(request: Request, who: Annotated[Principal, Depends(require("engineer"))], run_id: RunId,
               action: Literal["cancel", "pause", "resume", "rerun"],
               reason: Annotated[str, Form(max_length=4096)] = "") -> Response:
    """Cancel, pause, resume or rerun: the command to the controller (its refusal: the error page, 409)."""
    with request.app.state.web.sessions() as s:
        queries.get_run(s, run_id)
    fields: dict[str, str] = {"run_id": run_id, "reply_to": "-"}
    if action == "cancel":
        fields["reason"] = reason.strip() or f"cancelled by {who.name}"
    cmd = COMMANDS[action].model_validate(fields)
    request.app.state.web.commander.send(cmd, who.actor, f"{action} of run {run_id}")
    return RedirectResponse(f"/runs/{run_id}?{qs({'done': action})}", status_code=303)


@router.get("/runs/{run_id}/report", response_class=HTMLResponse)
def report_frame(request: Request, run_id: RunId) -> Response:
    """The run's HTML report, to be framed by its run page (or opened on its own): a page saying it is being drawn
    when the drawing takes longer than a moment, streamed on with the report (orchestrator.web.pages.frames)."""
    need(request, "viewer")
    return framed(request, "report", [run_id])
