"""Administration (admin): releasing quarantined hosts and DUTs, schedules, API tokens. Every change is a
command to the controller; a token is made here, shown once in the answer, and only its SHA-256 travels."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Path, Request
from sqlalchemy import select

from labcontract.errors import NotFound
from labcontract.protocol import Release, ScheduleAdd, ScheduleRemove, Submit, TokenCreate, TokenRevoke
from orchestrator.store.models import ApiToken, Host, Schedule
from orchestrator.web.api.common import route, store
from orchestrator.web.api.control import build, check_web_submission, send
from orchestrator.web.api.models import CommandDone, NewToken, ReleaseBody, ScheduleBody, TokenBody, TokenOut

router = APIRouter(prefix="/api", tags=["admin"])
Name = Annotated[str, Path(max_length=64)]
HostPath = Annotated[str, Path(max_length=64)]


@route(router, "POST", "/hosts/{host}/release", "admin", response_model=CommandDone)
def release(request: Request, host: HostPath, body: ReleaseBody | None = None) -> CommandDone:
    """Return a quarantined host (device null: with all its DUTs) or one DUT to scheduling."""
    device = (body or ReleaseBody()).device
    with store(request) as s:
        if s.get(Host, host) is None:
            raise NotFound("host", host)
    send(request, build(Release, host=host, device=device, reply_to="-"), "release")
    return CommandDone(ok=True, name=host, message=f"release of {host}{':' + device if device else ''} accepted")


@route(router, "POST", "/schedules", "admin", response_model=CommandDone, status_code=201)
def add_schedule(request: Request, body: ScheduleBody) -> CommandDone:
    """A recurring submission (cron, local time of the controller); checked as a submission is."""
    suite = check_web_submission(request.app.state.web.sessions, body.suite, body.suite_yaml, body.host,
                                 body.devices, runtime=body.runtime, scale=body.scale)
    template = build(Submit, run_id="-", suite_source=suite.source, suite_text=suite.source_text, host=body.host,
                      devices=tuple(body.devices), runtime_override=body.runtime, scale=body.scale, live=body.live,
                      priority=body.priority, reply_to="-")
    send(request, build(ScheduleAdd, name=body.name, cron=body.cron, submit=template,
                        expires_after_s=body.expires_after_s, reply_to="-"), "schedule")
    return CommandDone(ok=True, name=body.name, message=f"schedule {body.name} added")


@route(router, "DELETE", "/schedules/{name}", "admin", response_model=CommandDone)
def remove_schedule(request: Request, name: Name) -> CommandDone:
    with store(request) as s:
        if s.get(Schedule, name) is None:
            raise NotFound("schedule", name)
    send(request, build(ScheduleRemove, name=name, reply_to="-"), "schedule removal")
    return CommandDone(ok=True, name=name, message=f"schedule {name} removed")


@route(router, "GET", "/tokens", "admin", response_model=list[TokenOut])
def tokens(request: Request) -> list[TokenOut]:
    """Every token (never the token itself: only its hash is stored, and not shown either)."""
    with store(request) as s:
        return [TokenOut(name=t.name, role=t.role, created_at=t.created_at, created_by=t.created_by or "",
                         expires_at=t.expires_at, revoked_at=t.revoked_at)
                for t in s.scalars(select(ApiToken).order_by(ApiToken.name))]


@route(router, "POST", "/tokens", "admin", response_model=NewToken, status_code=201)
def create_token(request: Request, body: TokenBody) -> NewToken:
    """A new token of ``role``; the answer is the only place it is ever shown."""
    from orchestrator.tokens import new_token, token_hash

    token = new_token()
    expires_at = time.time() + body.expires_in_s if body.expires_in_s is not None else None
    send(request, build(TokenCreate, name=body.name, role=body.role, token_sha256=token_hash(token),
                        expires_at=expires_at, reply_to="-"), "token creation")
    return NewToken(name=body.name, role=body.role, token=token, expires_at=expires_at)


@route(router, "DELETE", "/tokens/{name}", "admin", response_model=CommandDone)
def revoke_token(request: Request, name: Name) -> CommandDone:
    """Revoke a token: it stops working at once (and every browser session made with it)."""
    with store(request) as s:
        if s.get(ApiToken, name) is None:
            raise NotFound("token", name)
    send(request, build(TokenRevoke, name=name, reply_to="-"), "token revocation")
    return CommandDone(ok=True, name=name, message=f"token {name} revoked")
