"""``/`` (the queue with the scheduler's reasons, the hosts at a glance, a line for each failing notification sink)
and ``/hosts`` (health, quarantine, release for admins; the notification sinks and their delivery state, as
``GET /api/notifications``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from labcontract.errors import StoreError
from labcontract.protocol import Release
from orchestrator import notifysinks
from orchestrator.web import queries
from orchestrator.web.auth import Principal, require
from orchestrator.web.pages.common import need, qs, render

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def home(request: Request) -> HTMLResponse:
    need(request, "viewer")
    with request.app.state.web.sessions() as s:
        gone = queries.controller_gone(s)
        queue = queries.queue(s, controller_gone=gone)
        hosts = queries.host_rows(s)
        recent, _next = queries.run_page(s, limit=8)
        try:          # runs' ends that do not reach a sink are said where the morning starts, not only on /hosts
            failing = [r for r in notifysinks.listing(s) if r["active"] and r["state"] == "failing"]
        except StoreError:
            failing = []
    return render(request, "home.html", queue=queue, hosts=hosts, recent=recent, gone=gone, failing_sinks=failing)


@router.get("/hosts", response_class=HTMLResponse)
def hosts(request: Request, released: Annotated[str, Query(max_length=64)] = "",
          device: Annotated[str, Query(max_length=512)] = "") -> HTMLResponse:
    need(request, "viewer")
    with request.app.state.web.sessions() as s:
        rows = queries.host_rows(s)
    sinks_error = ""
    with request.app.state.web.sessions() as s:
        try:
            sinks = notifysinks.listing(s)
        except StoreError as e:           # the hosts are still shown: the section says why it is empty
            sinks, sinks_error = [], str(e)
    done = ""        # said only of a host (and DUT) the store knows: a link cannot make the page say anything
    host = next((h for h in rows if h["name"] == released), None)
    if host is not None and (not device or any(d["name"] == device for d in host.get("devices", ()))):
        done = f"released {released}{' ' + device if device else ''}"
    return render(request, "hosts.html", hosts=rows, done=done, sinks=sinks, sinks_error=sinks_error)


@router.post("/hosts/{host}/release")
def release(request: Request, who: Annotated[Principal, Depends(require("admin"))],
            host: Annotated[str, Path(max_length=64)],
            device: Annotated[str, Form(max_length=512)] = "") -> Response:
    """Return a quarantined host (or one of its DUTs) to scheduling: a Release command to the controller."""
    target = device or None
    request.app.state.web.commander.send(Release(host=host, device=target, reply_to="-"), who.actor,
                                         f"release of {host}{':' + device if device else ''}")
    return RedirectResponse(f"/hosts?{qs({'released': host, 'device': device})}", status_code=303)
