"""What every API module shares: the route decorator that binds a role, the error documentation, the models
of answers common to several resources, and a store session.

Every route is declared through :func:`route`: it adds the role's dependency (``orchestrator.web.auth.require``)
and records the role in the OpenAPI operation (``x-required-role``), so the documented role and the enforced one
cannot differ, and a test can check every operation against it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel
from sqlalchemy.orm import Session

from orchestrator.web.auth import Principal, require

Role = Literal["viewer", "engineer", "admin"]
ROLE_KEY = "x-required-role"
F = TypeVar("F", bound=Callable[..., Any])


class Problem(BaseModel):
    where: str
    problem: str


class ErrorBody(BaseModel):
    """Every error of the API: a one-line reason and, for invalid input, every problem."""

    detail: str
    errors: list[Problem]


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "no valid token"},
    403: {"model": ErrorBody, "description": "the token's role is too small"},
    404: {"model": ErrorBody, "description": "unknown id"},
    413: {"model": ErrorBody, "description": "request body too large"},
    422: {"model": ErrorBody, "description": "invalid input (every problem)"},
    503: {"model": ErrorBody, "description": "the controller, store or broker is unavailable"},
}
COMMAND_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS, 409: {"model": ErrorBody, "description": "the controller refused the command (its reasons)"}}


def route(router: APIRouter, method: str, path: str, role: Role, *, status_code: int = 200,
          **kw: Any) -> Callable[[F], F]:
    """Declare ``method path`` on ``router``, allowed to ``role`` and above."""
    responses = COMMAND_ERRORS if method != "GET" else ERRORS
    extra = {ROLE_KEY: role}
    decorator = router.api_route(path, methods=[method], dependencies=[Depends(require(role))],
                                 openapi_extra=extra, responses={**responses, **kw.pop("responses", {})},
                                 status_code=status_code, **kw)
    return decorator


def principal(request: Request) -> Principal:
    """The caller, as the route's role dependency authenticated it."""
    p = getattr(request.state, "principal", None)
    assert isinstance(p, Principal), "route() without its role dependency"
    return p


@contextmanager
def store(request: Request) -> Iterator[Session]:
    """A read-only session of the store (the controller is its only writer)."""
    with request.app.state.web.sessions() as s:
        yield s
