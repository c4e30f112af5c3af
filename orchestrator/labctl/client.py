"""What the CLI does against a running lab: validate, submit and cancel through the controller.

The CLI never writes the store; it sends commands on the controller's stream and waits for
the answer. Reads (runs, hosts) go to the store directly, read-only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import redis
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import Problem, ServiceError, SubmissionError, SuiteError
from labcontract.protocol import (
    COMMANDS_STREAM,
    PROTOCOL_VERSION,
    REPLY_PREFIX,
    Cancel,
    Message,
    Pause,
    Release,
    Reply,
    Resume,
    ScheduleAdd,
    ScheduleRemove,
    Submit,
)
from labcontract.suite import Suite, load_suite
from orchestrator.controller import new_run_id, submission_problems
from orchestrator.netgroups import net_problems


def check_submission(ref: str, host: str, devices: Sequence[str],
                     sessions: sessionmaker[Session] | None, initiators: Sequence[str] = ()) -> Suite:
    """Every problem with a submission at once: the suite's and the target's (a network suite: its
    target, initiators and paths)."""
    problems: list[Problem] = []
    suite = None
    source = ref
    try:
        suite = load_suite(ref)
        source = suite.source
    except SuiteError as e:
        problems += e.problems
        source = e.source
    if suite is not None and suite.network is not None:
        if devices:
            problems.append(Problem("--device", "a network suite measures paths, not DUTs: name no device"))
        if sessions is not None:
            with sessions() as s:
                problems += net_problems(s, suite, host or None, initiators)
    elif initiators:
        problems.append(Problem("--initiator", "only a network suite (key network) takes initiators"))
    elif sessions is not None:
        with sessions() as s:
            problems += submission_problems(s, host, devices, suite)
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


class ControllerClient:
    def __init__(self, client: redis.Redis, *, timeout_s: float = 30) -> None:
        self.redis, self.timeout_s = client, timeout_s

    def _call(self, cmd: Message, reply_to: str) -> Reply | None:
        try:
            self.redis.xadd(COMMANDS_STREAM, {"data": cmd.model_dump_json()})
            got = self.redis.blpop([reply_to], timeout=self.timeout_s)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise ServiceError(f"cannot reach the broker: {e}") from e
        if got is None:
            return None
        return parse_reply(got[1])

    def submit(self, suite: Suite, host: str, devices: Sequence[str], runtime: int | None = None,
               scale: float | None = None, live: bool = True, *, priority: int = 0,
               not_before: float | None = None, expires_at: float | None = None,
               initiators: Sequence[str] = ()) -> tuple[str, Reply | None]:
        run_id = new_run_id()
        reply_to = REPLY_PREFIX + uuid.uuid4().hex
        cmd = Submit(run_id=run_id, suite_source=suite.source, suite_text=suite.source_text, host=host,
                     devices=tuple(devices), initiators=tuple(initiators), runtime_override=runtime, scale=scale,
                     live=live, priority=priority,
                     not_before=not_before, expires_at=expires_at, reply_to=reply_to)
        reply = self._call(cmd, reply_to)
        if reply is not None and not reply.ok:
            raise SubmissionError(suite.source, [Problem("", e) for e in reply.errors])
        return run_id, reply

    def schedule_add(self, name: str, cron: str, suite: Suite, host: str, devices: Sequence[str], *,
                     runtime: int | None = None, scale: float | None = None, live: bool = True, priority: int = 0,
                     expires_after_s: int | None = None) -> Reply | None:
        reply_to = REPLY_PREFIX + uuid.uuid4().hex
        template = Submit(run_id="-", suite_source=suite.source, suite_text=suite.source_text, host=host,
                          devices=tuple(devices), runtime_override=runtime, scale=scale, live=live, priority=priority,
                          reply_to="-")
        return self._call(ScheduleAdd(name=name, cron=cron, submit=template, expires_after_s=expires_after_s,
                                      reply_to=reply_to), reply_to)

    def schedule_rm(self, name: str) -> Reply | None:
        reply_to = REPLY_PREFIX + uuid.uuid4().hex
        return self._call(ScheduleRemove(name=name, reply_to=reply_to), reply_to)

    def pause(self, run_id: str) -> Reply | None:
        reply_to = REPLY_PREFIX + uuid.uuid4().hex
        return self._call(Pause(run_id=run_id, reply_to=reply_to), reply_to)

    def resume(self, run_id: str) -> Reply | None:
        reply_to = REPLY_PREFIX + uuid.uuid4().hex
        return self._call(Resume(run_id=run_id, reply_to=reply_to), reply_to)

    def release(self, host: str, device: str | None) -> Reply | None:
        reply_to = REPLY_PREFIX + uuid.uuid4().hex
        return self._call(Release(host=host, device=device, reply_to=reply_to), reply_to)

    def cancel(self, run_id: str, reason: str) -> Reply | None:
        reply_to = REPLY_PREFIX + uuid.uuid4().hex
        return self._call(Cancel(run_id=run_id, reason=reason, reply_to=reply_to), reply_to)
