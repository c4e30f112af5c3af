"""``/login`` and ``/logout``: a token typed once becomes a session cookie (orchestrator.web.auth)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from labcontract.errors import AccessError
from orchestrator.web.auth import COOKIE, MAX_TOKEN_CHARS, Principal, login, require, same_site
from orchestrator.web.pages.common import render, safe_next

router = APIRouter(include_in_schema=False)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> HTMLResponse:
    return render(request, "login.html", next=safe_next(next), error=None, notice=None)


@router.post("/login")
def login_post(request: Request, token: Annotated[str, Form(max_length=MAX_TOKEN_CHARS)] = "",
               next: Annotated[str, Form(max_length=1024)] = "/") -> Response:
    """A valid token: the session cookie and back to ``next`` (a local path); otherwise the form again, 401."""
    target = safe_next(next)
    if not same_site(request):      # login CSRF: another site must not log this browser in as its own token
        return render(request, "login.html", 403, next="/", error="log in from this site's own form", notice=None)
    if not token.strip():
        return render(request, "login.html", 401, next=target, error="enter your token", notice=None)
    try:
        who, cookie = login(request, token)
    except AccessError as e:
        return render(request, "login.html", 401, next=target, error=str(e), notice=None)
    cfg = request.app.state.web.cfg
    resp = RedirectResponse(target, status_code=303)
    resp.set_cookie(COOKIE, cookie, max_age=cfg.session_ttl_s, path="/", httponly=True, samesite="strict",
                    secure=cfg.cookie_secure)
    request.state.principal = who
    return resp


@router.post("/logout")
def logout(request: Request, _who: Annotated[Principal, Depends(require("viewer"))]) -> Response:
    if _who.csrf is not None:
        request.app.state.web.cookies.end(_who.csrf)     # a copy of the cookie dies with the logout too
    resp = RedirectResponse("/login", status_code=303)
    cfg = request.app.state.web.cfg
    resp.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=cfg.cookie_secure)
    return resp
