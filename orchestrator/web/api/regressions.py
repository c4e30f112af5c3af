"""Regressions of the run history (orchestrator.stats.history): the list (viewer), as ``labctl regressions
--json`` prints it, and acknowledging one (engineer): an ``Acknowledge`` command to the controller on the web
service's stream, sent as the caller, like every command of the API; nothing here writes the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field

from labcontract.errors import Busy, NotFound
from labcontract.protocol import Acknowledge
from orchestrator.web.api.common import route, store
from orchestrator.web.api.control import build, send
from orchestrator.web.api.models import Closed, CommandDone

router = APIRouter(prefix="/api", tags=["regressions"])
RegressionId = Annotated[str, Path(max_length=64)]
MAX_READS = 2           # history reads at once (each reads every ended run: seconds at 10,000 runs); beyond: Busy
WAIT_S = 10.0           # a request waits this long for a slot, holding one of the server's threads
MAX_WAITING = 2         # requests waiting for a slot; beyond, Busy at once (never the server's pool exhausted)
_reading = threading.BoundedSemaphore(MAX_READS)
_waiting = threading.BoundedSemaphore(MAX_WAITING)


@contextmanager
def history_slot() -> Iterator[None]:
    """A slot to read the run history: a viewer's loop of parallel GET /api/regressions (or an engineer's of
    acks, each re-reading the history) gets 429 instead of taking every thread of the service (red team)."""
    if not _reading.acquire(blocking=False):
        if not _waiting.acquire(blocking=False):
            raise Busy(f"{MAX_READS} history reads are running and {MAX_WAITING} wait; try again in a few seconds")
        try:
            got = _reading.acquire(timeout=WAIT_S)
        finally:
            _waiting.release()
        if not got:
            raise Busy(f"{MAX_READS} history reads are running; try again in a few seconds")
    try:
        yield
    finally:
        _reading.release()


class RegressionOut(BaseModel):
    id: str
    host: str
    model: str
    firmware: str
    suite: str
    cell: str
    cell_key: dict[str, str]
    metric: str
    run_id: str
    before: float
    after: float
    change_pct: float
    confidence: float
    acknowledged: bool
    ack_reason: str | None
    rule: str               # "change" (a change point) or "last" (the latest runs against their history)
    noise_cov_pct: float | None = None    # the series' CoV over the history its last run is judged against
    detectable_pct: float | None = None   # the smallest one-run change that history can tell from noise
    started_at: float | None


class RegressionList(BaseModel):
    regressions: list[RegressionOut]
    series: int             # series judged
    too_short: int          # series shorter than the detector needs
    need: int               # runs a series needs
    changed: list[str] = []  # runs where a suite changed under its name: their new series are too short


class AckBody(Closed):
    reason: Annotated[str, Field(max_length=1024)] = ""


@route(router, "GET", "/regressions", "viewer", response_model=RegressionList)
def list_regressions(request: Request,
                     since: Annotated[str | None, Query(max_length=64, description="a duration ago (7d, 12h) or "
                                                        "a date (YYYY-MM-DD[ HH:MM])")] = None,
                     host: Annotated[str | None, Query(max_length=128)] = None,
                     all: bool = False) -> dict[str, Any]:
    """Where a headline figure of a cell got worse by more than 5% across its history, newest first; ``all``
    also lists the acknowledged ones."""
    from orchestrator.stats.history import find_regressions, parse_since

    after = parse_since(since, time.time(), "since") if since is not None else None
    with history_slot(), store(request) as s:
        regs, status = find_regressions(s, since=after, host=host, include_acknowledged=all)
    return {"regressions": [r.as_dict() for r in regs], "series": status.series, "too_short": status.too_short,
            "need": status.need, "changed": list(status.changed)}


@route(router, "POST", "/regressions/{regression_id}/ack", "engineer", response_model=CommandDone)
def ack(request: Request, regression_id: RegressionId, body: AckBody | None = None) -> CommandDone:
    """Acknowledge a regression: it is not flagged again (404 for an id the history does not hold)."""
    rid = acknowledge(request, regression_id, (body or AckBody()).reason)
    return CommandDone(ok=True, name=rid, message=f"acknowledgement of regression {rid} accepted")


def acknowledge(request: Request, regression_id: str, reason: str) -> str:
    """The Acknowledge command of a regression the history holds, sent as the caller (the API's route and the
    regressions page); its id, lowercased. NotFound for an id the history does not hold; an acknowledged one is
    not sent again."""
    from orchestrator.stats.history import find_regressions

    rid = regression_id.lower()
    if len(rid) != 12 or any(c not in "0123456789abcdef" for c in rid):
        raise NotFound("regression", regression_id[:64])
    with history_slot(), store(request) as s:
        regs, _ = find_regressions(s, include_acknowledged=True)
    match = next((r for r in regs if r.id == rid), None)
    if match is None:
        raise NotFound("regression", rid)
    if not match.acknowledged:
        send(request, build(Acknowledge, regression_id=rid, reason=reason, reply_to="-"), "acknowledgement")
    return rid
