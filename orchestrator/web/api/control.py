"""Changing runs (engineer): submit, cancel, pause, resume, rerun. Each is a command to the controller on the
web service's stream (orchestrator.web.commands), sent as the caller (``token:<name>``), which the controller
records; nothing here writes the store.

A submission is checked first as ``labctl submit`` checks it (the suite and the target, every problem at once:
422), so a bad one never reaches the controller; what the controller still refuses comes back as 422 too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Path, Request
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import CommandRefused, InputError, Problem, SubmissionError, SuiteError
from labcontract.protocol import Cancel, Message, Pause, Rerun, Resume, Submit
from labcontract.suite import Suite, builtin_suites, load_suite, parse_suite
from orchestrator.runs.client import checked_submission
from orchestrator.runs.submission import API_KEYS
from orchestrator.web import queries
from orchestrator.web.api.common import principal, route, store
from orchestrator.web.api.models import CancelBody, CommandDone, EmptyBody, SubmitBody, Submitted

router = APIRouter(prefix="/api", tags=["control"])
RunId = Annotated[str, Path(max_length=64)]
YAML_SOURCE = "submitted-suite.yaml"


def load_web_suite(name: str | None, text: str | None) -> Suite:
    """A built-in suite by name (never a path: the server's files are not the caller's) or a suite's text."""
    if (name is None) == (text is None):
        raise SuiteError("suite", [Problem("suite", "give either suite (a built-in suite's name) or suite_yaml "
                                                    "(a suite's text), not both")])
    if name is not None:
        known = builtin_suites()
        if name not in known:
            raise SuiteError(name[:128], [Problem("suite", f"no built-in suite {name[:128]!r} (built-in: "
                                                           f"{', '.join(known)})")])
        # named as the caller named it: the server's path to its built-in suites is not the caller's business
        return load_suite(name).model_copy(update={"source": name})
    assert text is not None
    return parse_suite(text, YAML_SOURCE)


def check_web_submission(db: sessionmaker[Session], name: str | None, text: str | None, host: str,
                         devices: Sequence[str], initiators: Sequence[str] = (), **options: Any) -> Suite:
    """Every problem of a suite given by name or text and of its target at once (SubmissionError), else the
    suite: judged as labctl and the controller judge it (orchestrator.runs.submission.judge), named by the API's
    fields; ``options`` are the submission's runtime, scale, repeat and max_rounds."""
    return checked_submission(lambda: load_web_suite(name, text), name or YAML_SOURCE, host, devices, db,
                              initiators, keys=API_KEYS, **options)


M = TypeVar("M", bound=Message)


def build(model: type[M], **fields: Any) -> M:
    """A command from checked input; a field the command still refuses is a 422 naming it, never a 500."""
    try:
        return model(**fields)
    except ValidationError as e:
        raise InputError(model.__name__, [Problem(".".join(str(x) for x in err["loc"]), err["msg"])
                                          for err in e.errors()[:100]]) from None


def send(request: Request, cmd: Message, what: str) -> None:
    request.app.state.web.commander.send(cmd, principal(request).actor, what)


@route(router, "POST", "/runs", "engineer", response_model=Submitted, status_code=201)
def submit(request: Request, body: SubmitBody) -> Submitted:
    """Queue a suite on a host's DUTs; the run id. 422 with every problem of the suite and the target."""
    from orchestrator.runs.submission import new_run_id

    web = request.app.state.web
    suite = check_web_submission(web.sessions, body.suite, body.suite_yaml, body.host, body.devices,
                                 body.initiators, runtime=body.runtime, scale=body.scale, repeat=body.repeat,
                                 max_rounds=body.max_rounds)
    run_id = new_run_id()
    cmd = build(Submit, run_id=run_id, suite_source=suite.source, suite_text=suite.source_text, host=body.host,
                 devices=tuple(body.devices), initiators=tuple(body.initiators), runtime_override=body.runtime,
                 scale=body.scale, live=body.live, priority=body.priority, not_before=body.not_before,
                 expires_at=body.expires_at, max_rounds=body.max_rounds, repeat=body.repeat, reply_to="-")
    try:
        send(request, cmd, "submission")
    except CommandRefused as e:
        raise SubmissionError(suite.source, [Problem("", m) for m in e.errors]) from None
    return Submitted(run_id=run_id)


def _run_command(request: Request, run_id: str, cmd: Message, what: str) -> CommandDone:
    with store(request) as s:
        queries.get_run(s, run_id)
    send(request, cmd, what)
    return CommandDone(ok=True, run_id=run_id, message=f"{what} of {run_id} accepted")


@route(router, "POST", "/runs/{run_id}/cancel", "engineer", response_model=CommandDone)
def cancel(request: Request, run_id: RunId, body: CancelBody | None = None) -> CommandDone:
    """Cancel a queued or running run (its running step is stopped)."""
    reason = (body or CancelBody()).reason
    queries.check_run_id(run_id)
    return _run_command(request, run_id, build(Cancel, run_id=run_id, reason=reason, reply_to="-"), "cancel")


@route(router, "POST", "/runs/{run_id}/pause", "engineer", response_model=CommandDone)
def pause(request: Request, run_id: RunId, body: EmptyBody | None = None) -> CommandDone:
    """Pause a run: its running step finishes, no new step starts; it keeps its devices."""
    queries.check_run_id(run_id)
    return _run_command(request, run_id, build(Pause, run_id=run_id, reply_to="-"), "pause")


@route(router, "POST", "/runs/{run_id}/resume", "engineer", response_model=CommandDone)
def resume(request: Request, run_id: RunId, body: EmptyBody | None = None) -> CommandDone:
    queries.check_run_id(run_id)
    return _run_command(request, run_id, build(Resume, run_id=run_id, reply_to="-"), "resume")


@route(router, "POST", "/runs/{run_id}/rerun", "engineer", response_model=CommandDone)
def rerun(request: Request, run_id: RunId, body: EmptyBody | None = None) -> CommandDone:
    """Run again the failed and cancelled steps of a run that ended; the others keep their results."""
    queries.check_run_id(run_id)
    return _run_command(request, run_id, build(Rerun, run_id=run_id, reply_to="-"), "rerun")
