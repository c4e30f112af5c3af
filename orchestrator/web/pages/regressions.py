"""``/regressions``: what ``labctl regressions`` lists (orchestrator.stats.history), filtered by since, host, suite
and whether the acknowledged ones show, with an acknowledge form for engineers (``POST
/regressions/{id}/ack``: the API's Acknowledge command, orchestrator.web.api.regressions.acknowledge, then
back to the page with the regression marked). The history is read in one of the service's bounded history
slots, as the API reads it."""

from __future__ import annotations

import re
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select

from labcontract.errors import InputError, Problem
from orchestrator.web.api.regressions import acknowledge, history_slot
from orchestrator.web.auth import Principal, require
from orchestrator.web.pages.common import need, qs, render, templates

router = APIRouter(include_in_schema=False)

MAX_ROWS = 500                  # rows a page shows at most (``limit``)
SINCE_LEN = 64                  # as GET /api/regressions bounds it
NAME_LEN = 128
REASON_LEN = 1024               # as the API's AckBody bounds it
ID_RE = re.compile(r"[0-9a-f]{12}")
SHOW_ACKED = ("", "1")          # the checkbox: absent, or 1

Since = Annotated[str, Query(max_length=SINCE_LEN)]
Name = Annotated[str, Query(max_length=NAME_LEN)]


def value(v: float) -> str:
    """A figure as ``labctl regressions`` prints it (orchestrator.labctl.regressions)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.1f}" if abs(v) >= 10 else f"{v:,.2f}" if abs(v) >= 0.1 \
        else f"{v:.3g}"


templates.env.filters["figure"] = value


def _filters(since: str, acked: str) -> tuple[float | None, bool]:
    """The checked filters (every problem at once: InputError, the error page with each)."""
    from orchestrator.stats.history import parse_since

    problems: list[Problem] = []
    after = None
    if since.strip():
        try:
            after = parse_since(since, time.time(), "since")
        except InputError as e:
            problems += e.problems
    if acked not in SHOW_ACKED:
        problems.append(Problem("acked", f"{acked[:16]!r}: 1 shows the acknowledged regressions too, empty hides "
                                         "them"))
    if problems:
        raise InputError("filters", problems)
    return after, acked == "1"


def _acks(s: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Who acknowledged each of ``ids`` and when (the store's regression_acks)."""
    from orchestrator.store.models import RegressionAck

    if not ids:
        return {}
    rows = s.execute(select(RegressionAck.regression_id, RegressionAck.actor, RegressionAck.acknowledged_at)
                     .where(RegressionAck.regression_id.in_(ids)))
    return {rid: {"by": actor, "at": at} for rid, actor, at in rows}


def family(r: Any) -> str:
    """Host, device model and firmware, suite (what ``labctl regressions`` heads a group with)."""
    device = " ".join(x for x in (r.model, f"fw {r.firmware}" if r.firmware else "") if x) or "no device"
    return f"{r.host} · {device} · suite {r.suite}"


@router.get("/regressions", response_class=HTMLResponse)
def regressions_page(request: Request, since: Since = "", host: Name = "", suite: Name = "",
                     acked: Annotated[str, Query(max_length=16)] = "",
                     done: Annotated[str, Query(max_length=64)] = "",
                     limit: Annotated[int, Query(ge=1, le=MAX_ROWS)] = 200) -> HTMLResponse:
    """The regressions of the run history, newest first; ``acked=1`` also the acknowledged ones; ``done``: the
    one just acknowledged (marked, and said so only when it is listed acknowledged)."""
    from orchestrator.stats.history import find_regressions

    need(request, "viewer")
    after, show_acked = _filters(since, acked)
    with history_slot(), request.app.state.web.sessions() as s:
        regs, status = find_regressions(s, since=after, host=host or None, suite=suite or None,
                                        include_acknowledged=show_acked)
        shown = regs[:limit]
        acks = _acks(s, [r.id for r in shown if r.acknowledged])
    rows = [{"r": r, "family": family(r), "ack": acks.get(r.id)} for r in shown]
    just = done.lower() if ID_RE.fullmatch(done.lower()) else ""
    marked = next((r for r in shown if r.id == just and r.acknowledged), None)
    filters = {"since": since, "host": host, "suite": suite, "acked": acked}
    return render(request, "regressions.html", rows=rows, total=len(regs), status=status, note=status.message(),
                  filters=filters, show_acked=show_acked, limit=limit, marked=marked.id if marked else "",
                  # fixed text and a listed id: a link cannot make the page say anything
                  done=f"regression {marked.id} acknowledged" if marked else "",
                  more_qs=qs(filters, limit=MAX_ROWS) if len(regs) > limit and limit < MAX_ROWS else None)


@router.post("/regressions/{regression_id}/ack")
def ack(request: Request, _who: Annotated[Principal, Depends(require("engineer"))],
        regression_id: Annotated[str, Path(max_length=64)],
        reason: Annotated[str, Form(max_length=REASON_LEN)] = "",
        since: Annotated[str, Form(max_length=SINCE_LEN)] = "",
        host: Annotated[str, Form(max_length=NAME_LEN)] = "",
        suite: Annotated[str, Form(max_length=NAME_LEN)] = "") -> Response:
    """Acknowledge a regression (its Acknowledge command to the controller, as the API sends it), then the page
    again with the filters kept, the acknowledged ones shown and this one marked."""
    rid = acknowledge(request, regression_id, reason.strip())
    target = qs({"since": since, "host": host, "suite": suite}, acked="1", done=rid)
    return RedirectResponse(f"/regressions?{target}#reg-{rid}", status_code=303)
