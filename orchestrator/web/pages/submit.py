"""``/submit``: a built-in suite or a suite's YAML on a host's DUTs. An invalid submission comes back as the
same form with the input kept and EVERY problem listed (the form's fields and the suite's and target's, as
``POST /api/runs`` finds them: ``orchestrator.web.api.control``)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from labcontract.errors import InputError, Problem
from labcontract.suite import MAX_SUITE_BYTES, builtin_suites
from orchestrator.web import queries
from orchestrator.web.api import control
from orchestrator.web.api.models import SubmitBody
from orchestrator.web.auth import Principal, require
from orchestrator.web.pages.common import need, render

router = APIRouter(include_in_schema=False)
Short = Annotated[str, Form(max_length=256)]
FIELDS = ("suite", "suite_yaml", "host", "devices", "runtime", "scale", "priority", "max_rounds", "repeat")


def _number(raw: str, where: str, kind: type[int] | type[float], problems: list[Problem]) -> Any:
    raw = raw.strip()
    if not raw:
        return None
    try:
        return kind(raw)
    except ValueError:
        problems.append(Problem(where, f"{raw[:32]!r} is not {'a whole number' if kind is int else 'a number'}"))
        return None


def body_of(form: dict[str, str]) -> tuple[SubmitBody | None, list[Problem]]:
    """The API's submission from the form's text fields, and every problem of the fields themselves."""
    problems: list[Problem] = []
    devices = [d for d in re.split(r"[\s,]+", form["devices"]) if d]
    fields: dict[str, Any] = {
        "suite": form["suite"] or None, "suite_yaml": form["suite_yaml"] if not form["suite"] else None,
        "host": form["host"].strip(), "devices": devices,
        "runtime": _number(form["runtime"], "runtime", int, problems),
        "scale": _number(form["scale"], "scale", float, problems),
        "priority": _number(form["priority"], "priority", int, problems) or 0,
        "max_rounds": _number(form["max_rounds"], "max_rounds", int, problems),
        "repeat": _number(form["repeat"], "repeat", int, problems)}
    if fields["suite"] is None and not (fields["suite_yaml"] or "").strip():
        problems.append(Problem("suite", "choose a built-in suite or paste a suite's YAML"))
    try:
        return SubmitBody.model_validate(fields), problems
    except ValidationError as e:
        problems += [Problem(".".join(str(x) for x in err["loc"]), err["msg"]) for err in e.errors()[:100]]
        loose = {k: v for k, v in fields.items()
                 if not any(err["loc"] and err["loc"][0] == k for err in e.errors())}
        try:
            return SubmitBody.model_validate(loose), problems
        except ValidationError:
            return None, problems


def _form_page(request: Request, form: dict[str, str], problems: list[Problem], status: int) -> HTMLResponse:
    with request.app.state.web.sessions() as s:
        hosts = queries.host_rows(s)
    return render(request, "submit.html", status, form=form, problems=problems, suites=list(builtin_suites()),
                  hosts=hosts)


@router.get("/submit", response_class=HTMLResponse)
def submit_form(request: Request, suite: str = "") -> HTMLResponse:
    need(request, "engineer")
    form = dict.fromkeys(FIELDS, "")
    form["suite"] = suite[:128] if suite in builtin_suites() else ""
    return _form_page(request, form, [], 200)


@router.post("/submit")
def submit_post(request: Request, _who: Annotated[Principal, Depends(require("engineer"))],
                suite: Short = "", suite_yaml: Annotated[str, Form(max_length=MAX_SUITE_BYTES)] = "",
                host: Short = "", devices: Annotated[str, Form(max_length=4096)] = "", runtime: Short = "",
                scale: Short = "", priority: Short = "", max_rounds: Short = "", repeat: Short = "") -> Response:
    """Queue the run and go to its page; or the form again (422) with the input and every problem."""
    form = {"suite": suite, "suite_yaml": suite_yaml, "host": host, "devices": devices, "runtime": runtime,
            "scale": scale, "priority": priority, "max_rounds": max_rounds, "repeat": repeat}
    body, problems = body_of(form)
    if body is not None and (body.suite is not None or body.suite_yaml):
        try:
            control.check_web_submission(request.app.state.web.sessions, body.suite, body.suite_yaml, body.host,
                                         body.devices, body.initiators, runtime=body.runtime, scale=body.scale,
                                         repeat=body.repeat, max_rounds=body.max_rounds)
        except InputError as e:
            problems += e.problems
    if problems or body is None:
        return _form_page(request, form, problems, 422)
    try:
        run_id = control.submit(request, body).run_id
    except InputError as e:       # what the controller still refused
        return _form_page(request, form, e.problems, 422)
    return RedirectResponse(f"/runs/{run_id}", status_code=303)
