"""Canaries (``labctl canary``, docs/statistics.md "Canaries"): the canary schedules with their DUTs' last
verdicts and the name a DUT's canary has (viewer), and a canary added (admin, as every schedule is). Removing
one is removing its schedule (``DELETE /api/schedules/{name}``).

A canary is added here and not through ``POST /api/schedules`` because its schedule carries what a schedule
added by hand may not: its DUT resolved by the service, the built-in suite ``canary``, a 6 h expiry, and the
``--quarantine`` flag kept as the template's actor (orchestrator.canary.QUARANTINE_ACTOR), which no other body
may set. Every check is the one labctl makes against the store (orchestrator.canary.resolve and checked_name),
so a refusal reads the same with and without ``--api``."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request

from labcontract.errors import CommandRefused, Problem, SubmissionError
from labcontract.protocol import ScheduleAdd, Submit
from orchestrator import canary
from orchestrator.runs.client import checked_submission
from orchestrator.web.api.common import route, store
from orchestrator.web.api.control import build, load_web_suite, send
from orchestrator.web.api.models import PRINTABLE, CanaryBody, CanaryDut, CanaryOut, CommandDone

router = APIRouter(prefix="/api", tags=["canaries"])
# bounded, and no control character (a store may refuse a NUL), but not patterned: a host or DUT nobody declared is
# the resolver's to name (422 with the same problem as labctl's), not the request validator's
HostQuery = Annotated[str, Query(min_length=1, max_length=256, pattern=PRINTABLE)]
DeviceQuery = Annotated[str, Query(min_length=1, max_length=512, pattern=PRINTABLE)]


@route(router, "GET", "/canaries", "viewer", response_model=list[CanaryOut])
def canaries(request: Request) -> list[CanaryOut]:
    """Every canary schedule with its DUT's last verdict (``labctl canary list``)."""
    with store(request) as s:
        return [CanaryOut.model_validate(x) for x in canary.listing(s)]


@route(router, "GET", "/canaries/dut", "viewer", response_model=CanaryDut)
def canary_dut(request: Request, host: HostQuery, device: DeviceQuery) -> CanaryDut:
    """A declared DUT of ``host`` named by name, path or by-id link, and the name of its canary schedule;
    422 with every problem of the target."""
    with store(request) as s:
        name, path = canary.resolve(s, host, device)
    return CanaryDut(host=host, device=name, path=path, name=canary.schedule_name(host, name))


@route(router, "POST", "/canaries", "admin", response_model=CommandDone, status_code=201)
def add_canary(request: Request, body: CanaryBody) -> CommandDone:
    """Run the built-in suite ``canary`` on a DUT on a schedule (``labctl canary add``)."""
    from orchestrator.runs.cron import cron_problem

    web = request.app.state.web
    with store(request) as s:
        name = canary.checked_name(body.host, canary.resolve(s, body.host, body.device)[0])
    # judged as labctl judges it (its options' names in the problems), the suite named as the caller names it
    suite = checked_submission(lambda: load_web_suite(canary.SUITE, None), canary.SUITE, body.host, [body.device],
                               web.sessions)
    if (why := cron_problem(body.cron, time.time())) is not None:
        raise SubmissionError(suite.source, [Problem("--cron", why)])
    template = build(Submit, run_id="-", suite_source=suite.source, suite_text=suite.source_text, host=body.host,
                     devices=(body.device,), priority=body.priority,
                     actor=canary.QUARANTINE_ACTOR if body.quarantine else None, reply_to="-")
    try:
        send(request, build(ScheduleAdd, name=name, cron=body.cron, submit=template,
                            expires_after_s=canary.EXPIRES_AFTER_S, reply_to="-"), "canary schedule")
    except CommandRefused as e:        # as labctl shows the controller's refusal: the submission's problems
        raise SubmissionError(suite.source, [Problem("", m) for m in e.errors]) from None
    return CommandDone(ok=True, name=name, message=f"canary {name} added ({body.cron}"
                                                   f"{', quarantines on drift' if body.quarantine else ''})")
