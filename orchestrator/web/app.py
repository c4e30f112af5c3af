"""The FastAPI application: state, the request-size guard, security headers, errors, and the routers.

Routers are a registry (``orchestrator.web.api.ROUTERS``, ``orchestrator.web.pages.ROUTERS``): a new group of
routes is one module with a ``router`` plus its line in that registry (:class:`labcontract.registry.Registry`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labcontract.errors import (
    AccessError,
    Busy,
    CommandRefused,
    Forbidden,
    InputError,
    LabError,
    NotFound,
    ReportError,
    ServiceError,
    StoreError,
)
from labcontract.transport import redis_client
from orchestrator.web.auth import Sessions, load_secret
from orchestrator.web.commands import Commander
from orchestrator.web.config import WebConfig
from orchestrator.web.headers import CSP

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).parent / "static"


@dataclass
class WebState:
    cfg: WebConfig
    sessions: sessionmaker[Session]
    cookies: Sessions
    commander: Commander
    _redis: redis.Redis
    # set by the pages package: renders an error as an HTML page for a browser (status, detail, problems)
    html_error: Callable[[Request, int, str, list[dict[str, str]]], Response] | None = None
    extras: dict[str, Any] = field(default_factory=dict)     # per-feature state (e.g. the live fan-out)

    def redis(self) -> redis.Redis:
        return self._redis


class BodyLimit:
    """Refuses a request body over ``limit`` bytes with 413 before the route parses it: from Content-Length
    when declared, and while streaming (chunked bodies) otherwise."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.limit + 1
                if declared > self.limit or declared < 0:
                    await self._refuse(send)
                    return
        # read the body here, up to the limit, and hand it on whole: an error raised from inside the app's
        # receive would be caught by FastAPI's body parsing and answered 400, not refused with 413
        chunks: list[bytes] = []
        seen = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":          # the client went away
                return
            body = msg.get("body", b"")
            seen += len(body)
            if seen > self.limit:
                await self._refuse(send)
                return
            chunks.append(body)
            if not msg.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()                      # http.disconnect, for a streaming response

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        body = (b'{"detail":"request body larger than %d bytes","errors":[]}' % self.limit)
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _status(e: LabError) -> int:
    for cls, code in ((Forbidden, 403), (AccessError, 401), (NotFound, 404), (InputError, 422), (Busy, 429),
                      (CommandRefused, 409), (ReportError, 422), (ServiceError, 503), (StoreError, 400)):
        if isinstance(e, cls):
            return code
    return 400


def _problems(e: LabError) -> list[dict[str, str]]:
    if isinstance(e, InputError):
        return [{"where": p.location, "problem": p.message} for p in e.problems]
    if isinstance(e, CommandRefused):
        return [{"where": "", "problem": m} for m in e.errors]
    return []


def error_response(request: Request, status: int, detail: str, errors: list[dict[str, str]]) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {"Retry-After": "5"} if status == 429 else None
    web: WebState = request.app.state.web
    if web.html_error is not None and not request.url.path.startswith("/api/"):
        resp = web.html_error(request, status, detail, errors)
        if headers:
            resp.headers.update(headers)
        return resp
    return JSONResponse({"detail": detail, "errors": errors}, status_code=status, headers=headers)


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(LabError)
    async def lab_error(request: Request, e: LabError) -> Response:
        status = _status(e)
        detail = e.summary if isinstance(e, InputError) else str(e)
        return error_response(request, status, detail, _problems(e))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> Response:
        # FastAPI decodes a JSON body before any dependency runs: who asks is checked first, so that a caller
        # without a token learns nothing about the route (401, not 422)
        if request.url.path.startswith("/api/") and getattr(request.state, "principal", None) is None:
            from orchestrator.web.auth import require

            try:
                await require("viewer")(request)
            except LabError as err:
                return error_response(request, _status(err), str(err), [])
        errors = [{"where": ".".join(str(x) for x in err.get("loc", ())), "problem": str(err.get("msg", ""))}
                  for err in e.errors()[:100]]
        return error_response(request, 422, f"{len(errors)} problem(s) in the request", errors)

    @app.exception_handler(OperationalError)
    async def store_down(request: Request, e: OperationalError) -> Response:
        log.warning("store unavailable: %s", type(e.orig).__name__ if e.orig else e)
        return error_response(request, 503, "the store is unavailable; try again shortly", [])

    @app.exception_handler(redis.RedisError)
    async def broker_down(request: Request, e: redis.RedisError) -> Response:
        return error_response(request, 503, f"the broker is unavailable: {type(e).__name__}", [])


def create_app(cfg: WebConfig, *, sessions: sessionmaker[Session] | None = None) -> FastAPI:
    """The service over ``cfg``'s store and broker (``sessions``: an existing sessionmaker, for tests)."""
    if sessions is None:
        from orchestrator.store.db import make_engine
        from orchestrator.store.db import sessions as make_sessions

        sessions = make_sessions(make_engine(cfg.store_url))
    client = redis_client(cfg.broker_url)
    app = FastAPI(title="storagelab", version="1", docs_url=None, redoc_url=None, openapi_url=None,   # pages.apidocs
                  description="The lab as a service: runs, results, reports and commands (docs/web.md). "
                              "Every route needs a token: `Authorization: Bearer <token>`.")
    app.state.web = WebState(cfg, sessions, Sessions(load_secret(cfg.secret_file), cfg.session_ttl_s),
                             Commander(client, sessions, cfg.command_timeout_s), client)
    _install_errors(app)

    @app.middleware("http")
    async def headers(request: Request, call_next: Callable[[Request], Any]) -> Response:
        response: Response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        if request.url.path.startswith("/api/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    from orchestrator.web import api, pages

    for name in (*api.ROUTERS.values(), *pages.ROUTERS.values()):
        app.include_router(importlib.import_module(name).router)
    pages.install(app)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)   # outermost: before anything reads the body
    return app
