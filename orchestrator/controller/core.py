"""The controller's state and the lifecycle of runs and steps (attempt moves, retries, ends of runs), shared
by the parts of the controller (events, commands, dispatch, watchdogs): each a mixin of :class:`ControllerCore`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload, sessionmaker

from labcontract.protocol import CancelStep, ReportStep, StartStep
from labcontract.suitebase import RetryCause
from orchestrator import canary, kinds
from orchestrator.artifacts import ArtifactStore
from orchestrator.config import ControllerTuning
from orchestrator.controller import liveness, retries
from orchestrator.controller.boundary import Boundary
from orchestrator.controller.dispatch import Dispatcher
from orchestrator.controller.hostcache import HostCache
from orchestrator.controller.notify import Delivery, Notifier
from orchestrator.runs.provisioning import Provisioner
from orchestrator.states import ACTIVE_STEP, TERMINAL_RUN, TERMINAL_STEP, RunState, StepState, check_run, check_step
from orchestrator.store.models import Attempt, Host, Run, Step

log = logging.getLogger("orchestrator.controller")


class Seen(Protocol):
    """What the liveness checks read of a host (a Host, or a plain row of these columns)."""

    name: str
    last_seen: float | None
    clock_skew_s: float | None


class ControllerCore:
    def __init__(self, sessions: sessionmaker[Session], client: redis.Redis, dispatcher: Dispatcher,
                 artifacts: ArtifactStore, tuning: ControllerTuning | None = None,
                 clock: Callable[[], float] = time.time, notifier: Notifier | None = None,
                 provisioner: Provisioner | None = None) -> None:
        self.sessions, self.redis, self.dispatcher = sessions, client, dispatcher
        liveness.listen(sessions)                  # heartbeats are written as each transaction commits
        self.host_cache = HostCache(sessions)      # the scheduler's hosts, loaded again when one is written
        self.artifacts = artifacts
        self.tuning = tuning or ControllerTuning()
        self.clock = clock
        self.notifier = notifier
        self.delivery: Delivery | None = None      # the notifier's sinks at work, made at the first notify pass
        self._announced: float | None = None       # time.monotonic() of the last presence (loop.announce)
        self._first_announced: float | None = None  # when a controller of this lab first said it was here
        self.provisioner = provisioner
        self._stopping = False
        self.boundary = Boundary()                 # duties and their items: set aside, never a stop (boundary.py)
        self._asked: dict[str, float] = {}           # attempt id -> last stop/report request (throttle)
        self.last_pass_at: float | None = None     # time.time() of the last completed loop pass (/health)
        self.last_drain_at = clock()               # self.clock() when the intake last read the streams (loop)

    def host_up(self, host: Host | Seen | None) -> bool:
        """Whether the host heartbeated within ``heartbeat_timeout_s`` (a row or any record of its ``last_seen``)."""
        return bool(host and host.last_seen and self.clock() - host.last_seen <= self.tuning.heartbeat_timeout_s)

    def _note_skews(self, hosts: Sequence[Host | Seen]) -> None:
        """The hosts' clock skews (measured at registration) for the dispatcher's message expiry."""
        skews = getattr(self.dispatcher, "skew_s", None)
        if isinstance(skews, dict):
            fresh = {h.name: h.clock_skew_s for h in hosts if h.clock_skew_s is not None}
            if fresh != skews:
                skews.clear()
                skews.update(fresh)

    def _active_attempts(self, s: Session, host: str | None = None, *, with_steps: bool = False) -> list[Attempt]:
        """``with_steps``: each attempt's step comes in the same query (what a pass over every attempt reads of it;
        the rest of a step loads when touched), not one query per attempt."""
        q = select(Attempt).where(Attempt.state.in_([str(x) for x in ACTIVE_STEP]))
        if with_steps:
            q = q.options(joinedload(Attempt.step).load_only(Step.id, Step.run_id, Step.kind, Step.name, Step.state))
        if host is not None:
            q = q.where(Attempt.host == host)
        return list(s.scalars(q))

    def _attempt(self, s: Session, attempt_id: str) -> Attempt | None:
        att = s.get(Attempt, attempt_id)
        if att is None:
            log.warning("event for unknown attempt %s ignored", attempt_id)
        return att

    def _ctx(self, att: Attempt) -> dict[str, str]:
        return {"run": att.step.run_id, "step": att.step.name, "host": att.host}

    @staticmethod
    def _is_local(step: Step) -> bool:
        """A step the controller runs itself (a playbook), not an agent."""
        return kinds.get(step.kind).local

    def _start_msg(self, run: Run, step: Step, att: Attempt) -> StartStep:
        return kinds.get(step.kind).start_message(self, run, step, att)

    def _move(self, att: Attempt, target: StepState, reason: str = "") -> None:
        check_step("attempt", att.id, att.state, target)
        att.state = str(target)
        step = att.step
        if step.state != target:
            check_step("step", step.id, step.state, target)
            step.state = str(target)
        if reason:
            att.reason = step.reason = reason
        if target in TERMINAL_STEP:
            att.ended_at = step.ended_at = self.clock()

    def _end(self, att: Attempt, reason: str, *, cause: RetryCause | None) -> None:
        """A failed attempt: its step goes back to PENDING for another attempt when the suite's retry
        policy covers ``cause`` and attempts remain (after a re-purge if the suite asks), else fails."""
        step, run = att.step, att.step.run
        if run.state in TERMINAL_RUN or run.reason.startswith("cancel") or not retries.should_retry(run, att, cause):
            self._move(att, StepState.FAILED, reason)
            return
        check_step("attempt", att.id, att.state, StepState.FAILED)
        att.state, att.reason, att.ended_at = str(StepState.FAILED), reason, self.clock()
        step.state = str(check_step("step", step.id, step.state, StepState.PENDING))
        limit = retries.policy_of(run).max_attempts
        step.reason = f"retrying ({cause}): attempt {retries.attempts_counted(run, step)} of {limit} failed: {reason}"
        purge = retries.repurge_step(run, step)
        if purge is not None:
            run.steps.append(purge)
        log.warning("attempt %s failed (%s); step retried%s: %s", att.id, cause,
                    " after a re-purge" if purge is not None else "", reason, extra=self._ctx(att))

    def _stop_orphan(self, att: Attempt) -> None:
        """Stop the fio of an attempt that is LOST (or already ended in the store) on the host that came
        back; a LOST attempt then ends through the normal path and its step is retried per policy."""
        if att.state == StepState.LOST:
            att.stop_cause = "orphan"
        reason = (f"orphan of attempt {att.id} (host {att.host} was lost at "
                  f"{time.strftime('%H:%M:%S', time.localtime(att.lost_at or self.clock()))}); stopped so the "
                  "step is never run twice")
        log.warning("stopping orphaned fio of attempt %s", att.id, extra=self._ctx(att))
        self.dispatcher.cancel(att.host, CancelStep(attempt_id=att.id, reason=reason))
        self.dispatcher.report(att.host, ReportStep(attempt_id=att.id))
        self._asked[att.id] = self.clock()

    def _abandon_rest(self, run: Run, reason: str) -> None:
        for step in run.steps:
            if step.state == StepState.PENDING:
                check_step("step", step.id, step.state, StepState.FAILED)
                step.state, step.reason, step.ended_at = str(StepState.FAILED), reason, self.clock()

    def _finish_run_if_done(self, run: Run) -> None:
        if run.state in TERMINAL_RUN or any(st.state not in TERMINAL_STEP for st in run.steps):
            return
        failed = [st for st in run.steps if st.state == StepState.FAILED]
        cancelled = [st for st in run.steps if st.state == StepState.CANCELLED]
        if run.state == RunState.QUEUED:
            run.state = str(RunState.RUNNING)
        if cancelled and run.reason.startswith("cancel"):
            target, reason = RunState.CANCELLED, run.reason
        elif failed or cancelled:
            first = (failed or cancelled)[0]
            target = RunState.FAILED
            reason = f"{len(failed)} of {len(run.steps)} steps failed; first: {first.name}: {first.reason}"
        else:
            target, reason = RunState.SUCCEEDED, ""
        run.state = str(check_run(run.id, run.state, target))
        run.reason, run.ended_at = reason, self.clock()
        log.info("run ended: %s %s", run.state, reason, extra={"run": run.id, "host": run.host})
        canary.after_run_end(run, self.clock())     # a canary's figures against its DUT's history
