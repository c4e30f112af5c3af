"""The lab at a glance (viewer): who am I, the queue with the scheduler's reasons, the hosts and their health,
the schedules, the notification sinks and their delivery state, the built-in suites."""

from __future__ import annotations

import functools
import re
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from labcontract.suite import builtin_suites
from orchestrator import notifysinks
from orchestrator.web import queries
from orchestrator.web.api.common import principal, route, store
from orchestrator.web.api.models import HostOut, NotifySinkOut, QueueEntry, ScheduleOut, SuiteOut, WhoAmI

router = APIRouter(prefix="/api", tags=["lab"])


@route(router, "GET", "/whoami", "viewer", response_model=WhoAmI)
def whoami(request: Request) -> WhoAmI:
    p = principal(request)
    return WhoAmI(name=p.name, role=p.role)


@route(router, "GET", "/queue", "viewer", response_model=list[QueueEntry])
def queue(request: Request) -> list[QueueEntry]:
    """Runs not ended: started first, then by priority; ``status`` is what the scheduler says of each
    (``labctl queue``), or that the controller is unreachable."""
    with store(request) as s:
        gone = queries.controller_gone(s)
        return [QueueEntry.model_validate(q) for q in queries.queue(s, controller_gone=gone)]


@route(router, "GET", "/hosts", "viewer", response_model=list[HostOut])
def hosts(request: Request) -> list[HostOut]:
    """Every host with its state, health checks, quarantine and DUTs."""
    with store(request) as s:
        return [HostOut.model_validate(h) for h in queries.host_rows(s)]


@route(router, "GET", "/hosts/show", "viewer", response_class=Response,
       responses={200: {"content": {"text/plain": {}}}})
def hosts_shown(request: Request, width: Annotated[int, Query(ge=40, le=1000)] = 200,
                color: Literal["none", "standard", "256", "truecolor"] = "none") -> Response:
    """What ``labctl hosts`` prints (state, heartbeat, clock, platform, DUTs, why one is not used), drawn ``width``
    columns wide in ``color``: ``labctl --api hosts``."""
    import time

    from orchestrator.hostview import print_hosts
    from orchestrator.textout import drawn

    with store(request) as s:
        text = drawn(lambda console: print_hosts(console, s, time.time()), width,
                     None if color == "none" else color)
    return Response(text, media_type="text/plain; charset=utf-8")


@route(router, "GET", "/schedules", "viewer", response_model=list[ScheduleOut])
def schedules(request: Request) -> list[ScheduleOut]:
    with store(request) as s:
        return [ScheduleOut.model_validate(x) for x in queries.list_schedules(s)]


@route(router, "GET", "/notifications", "viewer", response_model=list[NotifySinkOut])
def notifications(request: Request) -> list[NotifySinkOut]:
    """The sinks the controller delivers the end of each run to (its lab file's [notify] and its --notify-*
    options), redacted, with their delivery state: ``labctl notifications``."""
    with store(request) as s:
        return [NotifySinkOut.model_validate(x) for x in notifysinks.listing(s)]


@functools.lru_cache(maxsize=1)
def _suites() -> tuple[tuple[str, str], ...]:
    out = []
    for name, path in builtin_suites().items():
        m = re.search(r"^description:\s*(.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
        out.append((name, m.group(1).strip().strip("'\"") if m else ""))
    return tuple(out)


@route(router, "GET", "/suites", "viewer", response_model=list[SuiteOut])
def suites(request: Request) -> list[SuiteOut]:
    """The built-in suites a submission may name (``labctl suite list``)."""
    return [SuiteOut(name=n, description=d) for n, d in _suites()]
