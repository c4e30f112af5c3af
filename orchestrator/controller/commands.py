"""Commands from the CLI and the web service (submit, cancel, schedules, release, pause, resume; rerun and tokens in
:mod:`.admin`) and scheduled submissions (end notifications in :mod:`.notifying`); and the judgement of a
submission against what agents registered.

Who sent a command (its actor): on ``lab:commands`` (labctl users) always "labctl", whatever the command says;
on ``lab:commands:web`` (only the broker user ``web`` may write it) the actor the web service names
("token:<name>"). Token commands are accepted from the web service's stream only."""

from __future__ import annotations

import logging
import time
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.errors import Problem, ProtocolError, SubmissionError, SuiteError
from labcontract.protocol import (
    COMMANDS_STREAM,
    TOKEN_COMMANDS,
    WEB_COMMANDS_STREAM,
    Acknowledge,
    AnyCommandType,
    Cancel,
    CancelStep,
    ImportArtifact,
    ImportRun,
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
    decode_command,
)
from labcontract.suite import Suite, parse_suite
from orchestrator.controller.admin import AdminMixin
from orchestrator.controller.boundary import REASON_MAX, reason_of
from orchestrator.controller.imports import ImportMixin
from orchestrator.controller.intake import command_refusal, valid_reply_to
from orchestrator.controller.notifying import NotifyMixin
from orchestrator.controller.transient import transient_kind
from orchestrator.runs import health, netgroups
from orchestrator.runs.cron import cron_problem, next_fire
from orchestrator.runs.planner import net_hosts_of, plan
from orchestrator.runs.submission import judge, new_run_id
from orchestrator.states import ACTIVE_STEP, TERMINAL_RUN, RunState, StepState, check_run
from orchestrator.store.models import Host, Run, Schedule, Step, find_device

log = logging.getLogger("orchestrator.controller")
REPLY_TTL_S = 300
LABCTL_ACTOR = "labctl"
WEB_ACTOR = "web"           # a command on the web stream naming no actor
TOKENS_WEB_ONLY = f"token commands are accepted only on the web service's stream ({WEB_COMMANDS_STREAM})"


def actor_of(cmd: AnyCommandType, stream: str) -> str:
    """Who the controller records as the sender (see the module doc)."""
    if stream == WEB_COMMANDS_STREAM:
        return cmd.actor or WEB_ACTOR
    return LABCTL_ACTOR


def command_target(cmd: AnyCommandType) -> str:
    """What a command acts on, for its log line."""
    for attr in ("run_id", "name", "host", "regression_id"):
        value = getattr(cmd, attr, None)
        if isinstance(value, str) and value:
            return value
    return "-"


class CommandsMixin(AdminMixin, NotifyMixin, ImportMixin):
    def handle_command(self, raw: str | bytes, stream: str = COMMANDS_STREAM) -> None:
        """Decode, apply and answer one command from ``stream``. One that cannot be decoded, or a token command
        that is not from the web service's stream, raises ProtocolError (dead-lettered by the intake), after an
        error reply when it names a proper reply list (a wrong protocol version is answered at once)."""
        try:
            cmd = decode_command(raw)
        except ProtocolError as e:
            why, reply_to = command_refusal(raw, e)
            if reply_to is not None:
                self._reply(reply_to, Reply(ok=False, errors=(why,)))
            raise ProtocolError(why) from e
        if isinstance(cmd, TOKEN_COMMANDS) and stream != WEB_COMMANDS_STREAM:
            self._reply(cmd.reply_to, Reply(ok=False, errors=(TOKENS_WEB_ONLY,)))
            raise ProtocolError(f"{cmd.type} on {stream}: {TOKENS_WEB_ONLY}")
        actor = actor_of(cmd, stream)
        log.info("command %s %s from %s (%s)", cmd.type, command_target(cmd), actor, stream,
                 extra={"run": cmd.run_id} if isinstance(cmd, Submit | Cancel | Pause | Resume | Rerun) else {})
        try:
            reply = self._apply_command(cmd, actor)
        except Exception as e:
            if transient_kind(e) is None:      # answered now, then set aside in lab:deadletter by the intake
                self._reply(cmd.reply_to, Reply(ok=False, errors=(
                    f"the controller could not apply this {cmd.type} and set it aside: {reason_of(e)}",)))
            raise
        self._reply(cmd.reply_to, reply)

    def _apply_command(self, cmd: AnyCommandType, actor: str) -> Reply:
        if isinstance(cmd, Submit):
            reply = self.submit(cmd, actor)
        elif isinstance(cmd, Rerun):
            reply = self.rerun(cmd, actor)
        elif isinstance(cmd, Acknowledge):
            reply = self.acknowledge(cmd, actor)
        elif isinstance(cmd, TokenCreate | TokenRevoke):
            reply = self.token_command(cmd, actor)
        elif isinstance(cmd, Cancel):
            reply = self.cancel(cmd)
        elif isinstance(cmd, ScheduleAdd | ScheduleRemove):
            reply = self.schedules(cmd)
        elif isinstance(cmd, Release):
            reply = self.release(cmd)
        elif isinstance(cmd, ImportArtifact):
            reply = self.import_artifact(cmd)
        elif isinstance(cmd, ImportRun):
            reply = self.import_run(cmd)
        else:
            reply = self.pause_or_resume(cmd)
        return reply

    def _reply(self, reply_to: str, reply: Reply) -> None:
        if valid_reply_to(reply_to):           # a reply list, never a stream, a queue or another key
            self.redis.lpush(reply_to, reply.model_dump_json())
            self.redis.expire(reply_to, REPLY_TTL_S)

    def submit(self, cmd: Submit, actor: str = LABCTL_ACTOR) -> Reply:
        with self.sessions.begin() as s:
            return self._submit_in(s, cmd, actor)

    def submission_problems(self, s: Session, cmd: Submit) -> tuple[Suite | None, list[Problem]]:
        """The same judgement labctl and the web service made before sending (orchestrator.runs.submission.judge:
        the controller trusts no client), then what only the controller can judge (its inventory)."""
        problems: list[Problem] = []
        suite = None
        try:
            suite = parse_suite(cmd.suite_text, cmd.suite_source)
        except SuiteError as e:
            problems += e.problems
        problems += judge(s, suite, cmd.host, cmd.devices, cmd.initiators, runtime=cmd.runtime_override,
                          scale=cmd.scale, repeat=cmd.repeat, max_rounds=cmd.max_rounds)
        if suite is not None and suite.network is None and suite.phases.provision and not problems:
            problems += self._provision_problems(s, cmd)
        return suite, problems

    def _provision_problems(self, s: Session, cmd: Submit) -> list[Problem]:
        if self.provisioner is None:
            return [Problem("phases.provision", "this suite provisions its DUTs through Ansible; the controller "
                                                "runs without an inventory (labctl controller --inventory DIR)")]
        host = s.get(Host, cmd.host)
        paths = [dev.path for d in cmd.devices if host and (dev := find_device(host, d)) is not None]
        return [Problem("--device", p) for p in self.provisioner.problems(cmd.host, paths)]

    def _submit_in(self, s: Session, cmd: Submit, actor: str) -> Reply:
        """Validate and queue a run in the caller's transaction (submissions and schedule firings)."""
        if s.get(Run, cmd.run_id) is not None:
            return Reply(ok=True, run_id=cmd.run_id)     # a re-sent submission
        suite, problems = self.submission_problems(s, cmd)
        if problems or suite is None:
            err = SubmissionError(cmd.suite_source, problems)
            log.warning("submission %s rejected: %s", cmd.run_id, err.summary)
            return Reply(ok=False, errors=tuple(str(p) for p in problems))
        if suite.network is not None:
            return self._submit_network(s, cmd, suite, actor)
        host = s.get(Host, cmd.host)
        assert host is not None
        named = [dev for d in cmd.devices if (dev := find_device(host, d)) is not None]
        paths = [dev.path for dev in named]
        run = Run(id=cmd.run_id, suite_name=suite.name, suite_source=cmd.suite_source,
                  suite_text=cmd.suite_text, suite_sha256=suite.sha256, host=cmd.host,
                  device=paths[0], devices=paths, runtime_override=cmd.runtime_override, scale=cmd.scale,
                  live=cmd.live, priority=cmd.priority, not_before=cmd.not_before, expires_at=cmd.expires_at,
                  state=str(RunState.QUEUED), submitted_at=self.clock(), submitted_by=actor,
                  max_rounds=cmd.max_rounds, rerun_count=0)
        smallest = min((dev.size_bytes for dev in named), default=None)   # an app suite's OP footprint
        for p in plan(suite, paths, runtime=cmd.runtime_override, scale=cmd.scale, device_bytes=smallest,
                      repeat=cmd.repeat):
            run.steps.append(Step(id=p.step_id(run.id), seq=p.seq, round=p.round, kind=p.kind, name=p.name,
                                  cell=p.cell, note=p.note,
                                  workload=p.workload.model_dump(mode="json") if p.workload else None,
                                  job_text=p.job_text, state=str(StepState.PENDING)))
        s.add(run)
        log.info("run queued: suite %s, %d steps on %s:%s (submitted by %s)", suite.name, len(run.steps), cmd.host,
                 ",".join(paths), actor, extra={"run": run.id, "host": cmd.host})
        return Reply(ok=True, run_id=cmd.run_id)

    def _submit_network(self, s: Session, cmd: Submit, suite: Suite, actor: str) -> Reply:
        """A network run: its hosts are the target and the initiators; a step per host and cell."""
        net = suite.network
        assert net is not None
        hosts = net_hosts_of(suite, cmd.host or None, cmd.initiators)     # both present: checked on submission
        run = Run(id=cmd.run_id, suite_name=suite.name, suite_source=cmd.suite_source,
                  suite_text=cmd.suite_text, suite_sha256=suite.sha256, host=hosts.target, device="net",
                  devices=[], topology=netgroups.topology(suite, hosts), runtime_override=cmd.runtime_override,
                  scale=cmd.scale, live=cmd.live, priority=cmd.priority, not_before=cmd.not_before,
                  expires_at=cmd.expires_at, state=str(RunState.QUEUED), submitted_at=self.clock(),
                  submitted_by=actor, rerun_count=0)
        index = {h: i for i, h in enumerate(hosts.all)}
        for p in plan(suite, [], runtime=cmd.runtime_override, scale=cmd.scale, net_hosts=hosts, repeat=cmd.repeat):
            assert p.host is not None and p.workload is not None
            run.steps.append(Step(id=f"{run.id}-s{p.seq:03d}-h{index[p.host]}", seq=p.seq, round=0, kind=p.kind,
                                  name=p.name, cell=p.cell, note=p.note, host=p.host,
                                  workload=p.workload.model_dump(mode="json"), job_text=p.job_text,
                                  state=str(StepState.PENDING)))
        s.add(run)
        log.info("network run queued: suite %s, %d steps; target %s, initiator(s) %s, path(s) %s", suite.name,
                 len(run.steps), hosts.target, ", ".join(hosts.initiators), ", ".join(net.paths),
                 extra={"run": run.id, "host": hosts.target})
        return Reply(ok=True, run_id=cmd.run_id)

    def cancel(self, cmd: Cancel) -> Reply:
        with self.sessions.begin() as s:
            run = s.get(Run, cmd.run_id)
            if run is None:
                return Reply(ok=False, errors=(f"unknown run {cmd.run_id!r}",))
            if run.state in TERMINAL_RUN:
                return Reply(ok=False, run_id=run.id, errors=(f"run {run.id} already ended ({run.state})",))
            run.reason = f"cancelled: {cmd.reason}"
            for step in run.steps:
                if step.state == StepState.PENDING:
                    step.state, step.reason, step.ended_at = str(StepState.CANCELLED), cmd.reason, self.clock()
                elif step.state in ACTIVE_STEP:
                    att = step.attempts[-1]
                    self.dispatcher.cancel(att.host, CancelStep(attempt_id=att.id, reason=cmd.reason))
            self._finish_run_if_done(run)
        return Reply(ok=True, run_id=cmd.run_id)

    def schedules(self, cmd: ScheduleAdd | ScheduleRemove) -> Reply:
        with self.sessions.begin() as s:
            existing = s.get(Schedule, cmd.name)
            if isinstance(cmd, ScheduleRemove):
                if existing is None:
                    return Reply(ok=False, errors=(f"no schedule {cmd.name!r}",))
                s.delete(existing)
                log.info("schedule %s removed", cmd.name)
                return Reply(ok=True)
            problems = [] if existing is None else [Problem("name", f"schedule {cmd.name!r} exists (rm it first)")]
            now = self.clock()
            # judged with the scheduler's own next_fire: a cron accepted here can always be fired (runs.cron)
            if (why := cron_problem(cmd.cron, now)) is not None:
                problems.append(Problem("--cron", why))
            _suite, more = self.submission_problems(s, cmd.submit)
            problems += more
            if problems:
                return Reply(ok=False, errors=tuple(str(p) for p in problems))
            s.add(Schedule(name=cmd.name, cron=cmd.cron, expires_after_s=cmd.expires_after_s,
                           submit=cmd.submit.model_dump(mode="json", exclude={"run_id", "reply_to", "not_before",
                                                                               "expires_at"}),
                           next_fire_at=next_fire(cmd.cron, now), created_at=now))
            log.info("schedule %s added: %s", cmd.name, cmd.cron)
            return Reply(ok=True)

    def release(self, cmd: Release) -> Reply:
        with self.sessions.begin() as s:
            host = s.get(Host, cmd.host)
            if host is None:
                return Reply(ok=False, errors=(f"unknown host {cmd.host!r}",))
            if cmd.device is not None and health.device_of(host, cmd.device) is None:
                return Reply(ok=False, errors=(f"{cmd.device!r} is not a device of host {cmd.host}",))
            released = health.release(host, cmd.device)
            if not released:
                return Reply(ok=False, errors=(f"nothing of {cmd.host}{':' + cmd.device if cmd.device else ''} "
                                               "is quarantined",))
            log.info("released from quarantine: %s", ", ".join(released), extra={"host": host.name})
            return Reply(ok=True)

    def fire_schedules(self) -> None:
        """Queue a run for every schedule that is due; once per due time, however long the controller was away.
        Each schedule in its own transaction, behind the boundary: one that cannot be fired is disabled with the
        reason, and the others fire."""
        now = self.clock()
        with self.sessions() as s:
            due = list(s.scalars(select(Schedule.name).where(Schedule.next_fire_at <= now,
                                                             Schedule.disabled_reason == "")
                                 .order_by(Schedule.next_fire_at)))
        for name in due:
            self.boundary.item("schedules", f"schedule {name}", partial(self._fire, name, now),
                               partial(self._disable_schedule, name))

    def _fire(self, name: str, now: float) -> None:
        with self.sessions.begin() as s:
            sch = s.get(Schedule, name)
            if sch is None or sch.disabled_reason or sch.next_fire_at > now:
                return
            run_id = new_run_id()
            cmd = Submit.model_validate({**sch.submit, "run_id": run_id, "reply_to": "",
                                         "expires_at": now + sch.expires_after_s if sch.expires_after_s else None})
            reply = self._submit_in(s, cmd, f"schedule:{sch.name}"[:64])
            sch.last_fired_at, sch.next_fire_at = now, next_fire(sch.cron, now)
            if reply.ok:
                sch.last_run_id, sch.last_error = run_id, ""
                log.info("schedule %s fired: run %s", sch.name, run_id, extra={"run": run_id})
            else:
                sch.last_error = "; ".join(reply.errors)
                log.error("schedule %s could not submit: %s", sch.name, sch.last_error)

    def _disable_schedule(self, name: str, why: str) -> None:
        with self.sessions.begin() as s:
            sch = s.get(Schedule, name)
            if sch is not None:
                sch.disabled_reason = f"disabled {time.strftime('%Y-%m-%d %H:%M')}: {why}"[:REASON_MAX]
                log.error("schedule %s disabled: %s (labctl schedule rm %s, then add it again)", name, why, name)

    def pause_or_resume(self, cmd: Pause | Resume) -> Reply:
        with self.sessions.begin() as s:
            run = s.get(Run, cmd.run_id)
            if run is None:
                return Reply(ok=False, errors=(f"unknown run {cmd.run_id!r}",))
            if isinstance(cmd, Pause):
                if run.state not in (RunState.QUEUED, RunState.RUNNING):
                    return Reply(ok=False, run_id=run.id, errors=(f"run {run.id} is {run.state}; only a queued or "
                                                                  "running run can be paused",))
                run.state = str(check_run(run.id, run.state, RunState.PAUSED))
                log.info("run paused: the running step finishes, no new step starts",
                         extra={"run": run.id, "host": run.host})
            else:
                if run.state != RunState.PAUSED:
                    return Reply(ok=False, run_id=run.id, errors=(f"run {run.id} is {run.state}, not paused",))
                target = RunState.RUNNING if run.started_at else RunState.QUEUED
                run.state = str(check_run(run.id, run.state, target))
                log.info("run resumed", extra={"run": run.id, "host": run.host})
            return Reply(ok=True, run_id=run.id)
