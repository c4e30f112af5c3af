"""What the CLI (and the web service) does against a running lab: validate, submit and cancel through the
controller.

The CLI never writes the store; it sends commands on the controller's stream and waits for
the answer. Reads (runs, hosts) go to the store directly, read-only. Token commands, and every command of the
web service, go on the web service's stream (broker user ``web``), whose commands' actor the controller records.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import redis
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import Problem, ServiceError, SubmissionError, SuiteError
from labcontract.protocol import (
    COMMANDS_STREAM,
    CONTROLLER_PRESENCE_KEY,
    PROTOCOL_VERSION,
    REPLY_PREFIX,
    WEB_COMMANDS_STREAM,
    Acknowledge,
    Artifact,
    Cancel,
    ImportArtifact,
    ImportRun,
    Message,
    Pause,
    Release,
    Reply,
    Rerun,
    Resume,
    ScheduleAdd,
    ScheduleRemove,
    Submit,
    TokenCreate,
    TokenRevoke,
)
from labcontract.suite import Suite, load_suite
from labcontract.transport import SOCKET_TIMEOUT
from orchestrator.runs.submission import CLI_KEYS, Keys, judge, new_run_id


def check_submission(ref: str, host: str, devices: Sequence[str], sessions: sessionmaker[Session] | None,
                     initiators: Sequence[str] = (), **options: Any) -> Suite:
    """Every problem with a submission at once: the suite's and the target's (a network suite: its
    target, initiators and paths); ``options`` are :func:`~orchestrator.runs.submission.judge`'s."""
    return checked_submission(lambda: load_suite(ref), ref, host, devices, sessions, initiators, **options)


def checked_submission(load: Callable[[], Suite], source: str, host: str, devices: Sequence[str],
                       sessions: sessionmaker[Session] | None, initiators: Sequence[str] = (), *,
                       keys: Keys = CLI_KEYS, runtime: int | None = None, scale: float | None = None,
                       repeat: int | None = None, max_rounds: int | None = None) -> Suite:
    """:func:`check_submission` for a suite ``load`` returns (a file, a built-in, text from a form), judged by
    :func:`~orchestrator.runs.submission.judge` as the controller will judge it; ``keys`` name the inputs in the
    problems (options for the CLI, fields for the web)."""
    problems: list[Problem] = []
    suite = None
    try:
        suite = load()
        source = suite.source
    except SuiteError as e:
        problems += e.problems
        source = e.source
    options: dict[str, Any] = {"runtime": runtime, "scale": scale, "repeat": repeat, "max_rounds": max_rounds,
                               "keys": keys}
    if sessions is None:
        problems += judge(None, suite, host, devices, initiators, **options)
    else:
        with sessions() as s:
            problems += judge(s, suite, host, devices, initiators, **options)
    if problems or suite is None:
        raise SubmissionError(source, problems)
    return suite


def parse_reply(raw: str | bytes) -> Reply:
    """The controller's answer. One from a controller of another protocol version (or one refusing ours) is
    shown as it is, a ServiceError naming both versions, never as a validation error or a 30 s wait."""
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise ServiceError(f"the controller's reply is not JSON: {e}") from e
    if not isinstance(data, dict):
        raise ServiceError("the controller's reply is not a JSON object")
    found = data.get("errors")
    errors: list[Any] = found if isinstance(found, list) else []
    if data.get("v") != PROTOCOL_VERSION or any("is not spoken here" in str(e) for e in errors):
        why = "; ".join(str(e)[:500] for e in errors) or f"it speaks protocol {str(data.get('v'))[:20]}"
        raise ServiceError(f"the controller refused this labctl (protocol {PROTOCOL_VERSION}): {why}")
    try:
        return Reply.model_validate(data)
    except ValueError as e:
        raise ServiceError(f"the controller's reply is malformed: {e}") from e


BLPOP_SLICE_S = max(SOCKET_TIMEOUT - 3, 1)    # each blocking wait well within the client's socket timeout


def wait_reply(client: redis.Redis, reply_to: str, timeout_s: float) -> Any:
    """The controller's reply on ``reply_to`` within ``timeout_s``, else None. Waited in slices: one blocking pop
    as long as the socket timeout would end in the client's TimeoutError (taken for a broker that cannot be
    reached) instead of the silence it is."""
    got: Any = None
    deadline = time.monotonic() + timeout_s
    while got is None and (left := deadline - time.monotonic()) > 0:
        got = client.blpop([reply_to], timeout=max(min(left, BLPOP_SLICE_S), 0.05))
    return got


def _reply_to() -> str:
    return REPLY_PREFIX + uuid.uuid4().hex


WEB_USER_HINT = "token commands need the broker user web (--broker redis://web@...)"


PRESENCE_WAIT_S = 12.0     # twice the controller's presence interval, and a little


def no_controller(client: redis.Redis) -> str:
    """Why a command is not sent: no controller ever registered at this broker."""
    kw = client.connection_pool.connection_kwargs
    where = f"{kw.get('host', kw.get('path', '?'))}:{kw.get('port', '')}".rstrip(":")
    return (f"no controller of a lab has ever registered at the broker at {where}: nothing was sent (is labctl "
            "pointed at your lab? --broker / LAB_BROKER_URL, or --lab-dir / LAB_DIR where make demo and labctl lab "
            "up leave their lab.env; else start the controller: labctl controller)")


class ControllerClient:
    """Sends commands on ``stream`` (labctl's :data:`COMMANDS_STREAM`, or the web service's
    :data:`WEB_COMMANDS_STREAM`, which only broker user ``web`` may write), each naming ``actor``, and waits up to
    ``timeout_s`` for the controller's reply (None: no answer in time)."""

    def __init__(self, client: redis.Redis, timeout_s: float = 30, *, stream: str = COMMANDS_STREAM,
                 actor: str | None = None) -> None:
        if stream not in (COMMANDS_STREAM, WEB_COMMANDS_STREAM):
            raise ValueError(f"not a commands stream: {stream!r}")
        self.redis, self.timeout_s, self.stream, self.actor = client, timeout_s, stream, actor

    def _call(self, cmd: Message, reply_to: str) -> Reply | None:
        try:
            if not self._controller_registered():
                raise ServiceError(no_controller(self.redis))
            self.redis.xadd(self.stream, {"data": cmd.model_dump_json()})
            got = wait_reply(self.redis, reply_to, self.timeout_s)
        except redis.exceptions.NoPermissionError as e:
            hint = f"; {WEB_USER_HINT}" if self.stream == WEB_COMMANDS_STREAM else ""
            raise ServiceError(f"the broker refused the command on {self.stream} ({e}){hint}") from e
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise ServiceError(f"cannot reach the broker: {e}") from e
        if got is None:
            return None
        return parse_reply(got[1])

    def _controller_registered(self) -> bool:
        """Whether a controller of a lab ever said it was here: at once when its key is there; else it is waited for
        up to :data:`PRESENCE_WAIT_S` (a broker emptied or restarted without its data has it back at the controller's
        next presence, every 5 s)."""
        deadline = time.monotonic() + PRESENCE_WAIT_S
        while not self.redis.exists(CONTROLLER_PRESENCE_KEY):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
        return True

    def controller_seen(self) -> float | None:
        """When this lab's controller last said it was here (seconds since the epoch); None: never, or unreadable."""
        try:
            raw = self.redis.get(CONTROLLER_PRESENCE_KEY)
            return float(json.loads(raw)["last_at"]) if raw else None
        except (ValueError, TypeError, KeyError, redis.RedisError):
            return None

    def submit(self, suite: Suite, host: str, devices: Sequence[str], runtime: int | None = None,
               scale: float | None = None, live: bool = True, *, priority: int = 0,
               not_before: float | None = None, expires_at: float | None = None,
               initiators: Sequence[str] = (), max_rounds: int | None = None, repeat: int | None = None,
               run_id: str | None = None) -> tuple[str, Reply | None]:
        run_id = run_id or new_run_id()
        reply_to = _reply_to()
        cmd = Submit(run_id=run_id, suite_source=suite.source, suite_text=suite.source_text, host=host,
                     devices=tuple(devices), initiators=tuple(initiators), runtime_override=runtime, scale=scale,
                     live=live, priority=priority, not_before=not_before, expires_at=expires_at,
                     max_rounds=max_rounds, repeat=repeat, actor=self.actor, reply_to=reply_to)
        reply = self._call(cmd, reply_to)
        if reply is not None and not reply.ok:
            raise SubmissionError(suite.source, [Problem("", e) for e in reply.errors])
        return run_id, reply

    def schedule_add(self, name: str, cron: str, suite: Suite, host: str, devices: Sequence[str], *,
                     runtime: int | None = None, scale: float | None = None, live: bool = True, priority: int = 0,
                     expires_after_s: int | None = None, max_rounds: int | None = None) -> Reply | None:
        reply_to = _reply_to()
        template = Submit(run_id="-", suite_source=suite.source, suite_text=suite.source_text, host=host,
                          devices=tuple(devices), runtime_override=runtime, scale=scale, live=live, priority=priority,
                          max_rounds=max_rounds, reply_to="-")
        return self._call(ScheduleAdd(name=name, cron=cron, submit=template, expires_after_s=expires_after_s,
                                      actor=self.actor, reply_to=reply_to), reply_to)

    def schedule_rm(self, name: str) -> Reply | None:
        reply_to = _reply_to()
        return self._call(ScheduleRemove(name=name, actor=self.actor, reply_to=reply_to), reply_to)

    def pause(self, run_id: str) -> Reply | None:
        reply_to = _reply_to()
        return self._call(Pause(run_id=run_id, actor=self.actor, reply_to=reply_to), reply_to)

    def resume(self, run_id: str) -> Reply | None:
        reply_to = _reply_to()
        return self._call(Resume(run_id=run_id, actor=self.actor, reply_to=reply_to), reply_to)

    def rerun(self, run_id: str) -> Reply | None:
        reply_to = _reply_to()
        return self._call(Rerun(run_id=run_id, actor=self.actor, reply_to=reply_to), reply_to)

    def acknowledge(self, regression_id: str, reason: str = "") -> Reply | None:
        reply_to = _reply_to()
        return self._call(Acknowledge(regression_id=regression_id, reason=reason, actor=self.actor,
                                      reply_to=reply_to), reply_to)

    def release(self, host: str, device: str | None) -> Reply | None:
        reply_to = _reply_to()
        return self._call(Release(host=host, device=device, actor=self.actor, reply_to=reply_to), reply_to)

    def cancel(self, run_id: str, reason: str) -> Reply | None:
        reply_to = _reply_to()
        return self._call(Cancel(run_id=run_id, reason=reason, actor=self.actor, reply_to=reply_to), reply_to)

    def import_artifact(self, name: str, data: bytes) -> Reply | None:
        """An artifact of another lab's run, for the artifact store (labctl import)."""
        reply_to = _reply_to()
        return self._call(ImportArtifact(artifact=Artifact.of(name, data), reply_to=reply_to), reply_to)

    def import_run(self, lab: str, run_json: str) -> Reply | None:
        """A run of lab ``lab`` (a labcontract.rundoc.RunDoc as JSON), once its artifacts are sent."""
        reply_to = _reply_to()
        return self._call(ImportRun(lab=lab, run_json=run_json, reply_to=reply_to), reply_to)

    def token_create(self, name: str, role: str, token_sha256: str, expires_at: float | None) -> Reply | None:
        """Only the token's hash is sent (the token itself never leaves where it was made)."""
        reply_to = _reply_to()
        cmd = TokenCreate.model_validate({"name": name, "role": role, "token_sha256": token_sha256,
                                          "expires_at": expires_at, "actor": self.actor, "reply_to": reply_to})
        return self._call(cmd, reply_to)

    def token_revoke(self, name: str) -> Reply | None:
        reply_to = _reply_to()
        return self._call(TokenRevoke(name=name, actor=self.actor, reply_to=reply_to), reply_to)
