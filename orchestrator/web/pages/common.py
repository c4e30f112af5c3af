"""What every page shares: the templates (Jinja2, autoescaped), who is looking, and errors as pages.

Pages are sync functions (FastAPI runs them in its thread pool) reading the store through
``orchestrator.web.queries``; every change is a form POST carrying the session's CSRF secret, checked by
``orchestrator.web.auth.require`` before the route runs, and sent to the controller as a command.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from labcontract.errors import AccessError, Forbidden
from orchestrator.tokens import role_at_least
from orchestrator.web.auth import Principal, page_principal
from orchestrator.web.headers import FRAMED_CSP

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
templates = Jinja2Templates(directory=str(TEMPLATES))
MAX_NEXT = 512
FRAMED = re.compile(r"/runs/[^/]+/report|/compare/view")


def when(ts: float | None) -> str:
    """Epoch seconds as the lab's clocks show them (UTC), or an empty cell."""
    if ts is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def ago(ts: float | None) -> str:
    if ts is None:
        return "never"
    s = max(time.time() - ts, 0)
    return f"{s:.0f}s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


def duration(a: float | None, b: float | None) -> str:
    if a is None:
        return ""
    s = max((b if b is not None else time.time()) - a, 0)
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def qs(params: dict[str, Any], **extra: Any) -> str:
    """A query string of the non-empty ``params`` (plus ``extra``), for links that keep the filters."""
    items = [(k, v) for k, v in {**params, **extra}.items() if v not in (None, "")]
    return urlencode(items)


templates.env.filters["when"] = when
templates.env.filters["ago"] = ago
templates.env.globals["duration"] = duration
templates.env.globals["qs"] = qs


def safe_next(target: str | None) -> str:
    """Where a login may send the browser: a path of this site only (never ``//host`` or ``https://...``)."""
    if not target or len(target) > MAX_NEXT or not target.startswith("/") or target.startswith("//") \
            or "\\" in target or any(ord(c) < 0x20 for c in target):
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return "/"
    return target


def need(request: Request, role: str = "viewer") -> Principal:
    """The page's viewer with at least ``role``: AccessError (the login form, 401) or Forbidden (403)."""
    who = page_principal(request)
    if who is None:
        raise AccessError("log in with your token to see this page")
    if not role_at_least(who.role, role):
        raise Forbidden(who.name, who.role, role)
    request.state.principal = who
    return who


def can(who: Principal | None, role: str) -> bool:
    return who is not None and role_at_least(who.role, role)


def render(request: Request, name: str, status_code: int = 200, **ctx: Any) -> HTMLResponse:
    who = ctx.pop("who", None) or getattr(request.state, "principal", None)
    return templates.TemplateResponse(request, name, {"who": who, "can": can, **ctx}, status_code=status_code,
                                      headers={"Cache-Control": "no-store"})


def framed(path: str) -> bool:
    """A page the site frames itself (a report, a compare): its errors must show inside the frame too."""
    return FRAMED.fullmatch(path) is not None


def html_error(request: Request, status: int, detail: str, errors: list[dict[str, str]]) -> Response:
    """An error on a page, for a browser: 401 is the login form (back here after logging in), anything else
    an error page with the reason and every problem."""
    if status == 401:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "") \
            if request.method == "GET" else "/"
        resp = render(request, "login.html", 401, who=None, next=safe_next(target), error=None, notice=detail)
    else:
        who = getattr(request.state, "principal", None)
        resp = render(request, "error.html", status, who=who, status=status, detail=detail, errors=errors)
    if framed(request.url.path):
        resp.headers["Content-Security-Policy"] = FRAMED_CSP
        resp.headers["X-Frame-Options"] = "SAMEORIGIN"
    return resp
