"""Watchdogs: re-send starts nobody took, mark steps LOST when their host goes silent, stop what runs past its
deadline or as an orphan, pick up the ends of the steps the controller runs itself, and at start ask agents
where every active attempt stands."""

from __future__ import annotations

import logging
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.protocol import CancelStep, ReportStep, StartStep
from orchestrator.controller.boundary import reason_of
from orchestrator.controller.core import ControllerCore
from orchestrator.controller.transient import transient_kind
from orchestrator.runs.provisioning import LocalOutcome
from orchestrator.states import TERMINAL_STEP, StepState
from orchestrator.store.models import Artifact, Attempt, Host, Run

log = logging.getLogger("orchestrator.controller")


class WatchdogsMixin(ControllerCore):
    def watch(self) -> None:
        """One watchdog pass over every active attempt. Should it fail on an attempt's data (not a transient
        fault), it is done again one attempt at a time behind the boundary: the attempt that still fails is failed
        with the reason, and the others are watched."""
        try:
            self._watch()
        except Exception as e:
            if transient_kind(e) is not None:
                raise
            log.error("a watchdog pass failed (%s); watching its attempts one at a time", reason_of(e))
            with self.sessions() as s:
                ids = [att.id for att in self._active_attempts(s)]
            for attempt_id in ids:
                self.boundary.item("watchdogs", f"attempt {attempt_id}", partial(self._watch, only=attempt_id),
                                   partial(self._fail_attempt, attempt_id))

    def _fail_attempt(self, attempt_id: str, why: str) -> None:
        with self.sessions.begin() as s:
            att = s.get(Attempt, attempt_id)
            if att is not None and att.state not in TERMINAL_STEP:
                self._move(att, StepState.FAILED, f"the controller could not watch this attempt: {why}")
                self._finish_run_if_done(att.step.run)

    def _watch(self, only: str | None = None) -> None:
        """The watchdog pass; ``only``: that attempt alone."""
        now = self.clock()
        resend: list[StartStep] = []
        cancels: list[tuple[str, CancelStep]] = []
        with self.sessions.begin() as s:
            # what the watchdog reads of the hosts, in plain rows: no host object, nor its facts, each pass
            hosts = {h.name: h for h in s.execute(select(Host.name, Host.last_seen, Host.incompatible,
                                                         Host.clock_skew_s))}
            self._note_skews(list(hosts.values()))
            touched: set[str] = set()
            for att in self._active_attempts(s, with_steps=True):
                if only is not None and att.id != only:
                    continue
                if self._is_local(att.step):
                    self._watch_local(s, att)
                    continue
                up = self.host_up(hosts.get(att.host))
                if att.state == StepState.RUNNING and not up:
                    row = hosts.get(att.host)
                    why = (f"host {att.host} is incompatible: {row.incompatible}" if row is not None
                           and row.incompatible else f"host {att.host} stopped heartbeating")
                    self._move(att, StepState.LOST, why)
                    att.lost_at = now
                    seen = row.last_seen if row is not None else None
                    # when this controller last *applied* a heartbeat of the host, and when it last read its events:
                    # an intake that fell behind makes a live host look silent (tell the two apart in the log)
                    log.warning("step LOST: host silent for more than %.0fs (last heartbeat applied %s ago; events "
                                "last read %.1fs ago)", self.tuning.heartbeat_timeout_s,
                                "never" if seen is None else f"{now - seen:.1f}s", now - self.last_drain_at,
                                extra=self._ctx(att))
                elif att.state == StepState.LOST:
                    if self._lost_too_long(att, up, now):
                        touched.add(att.step.run_id)
                elif att.state == StepState.RUNNING and self._overdue(att, now):
                    if (cancel := self._stop_overdue(att, now)) is not None:
                        cancels.append((att.host, cancel))
                elif (att.state == StepState.DISPATCHED and up and att.dispatched_at is not None
                      and now - att.dispatched_at > self.tuning.dispatch_expires_s + 5):
                    if att.dispatch_count >= self.tuning.dispatch_retries:
                        self._move(att, StepState.FAILED,
                                   f"agent on {att.host} did not start it after {att.dispatch_count} dispatches")
                        touched.add(att.step.run_id)
                    else:
                        att.dispatch_count += 1
                        att.dispatched_at = now
                        resend.append(self._start_msg(att.step.run, att.step, att))
            for run_id in touched:
                run = s.get(Run, run_id)
                if run is not None:
                    self._finish_run_if_done(run)
        for host, cancel in cancels:           # after the commit, like every dispatch
            self.dispatcher.cancel(host, cancel)
        for msg in resend:
            log.warning("re-sending start of attempt %s", msg.attempt_id,
                        extra={"run": msg.run_id, "host": msg.host})
            self.dispatcher.start(msg)

    def _lost_too_long(self, att: Attempt, up: bool, now: float) -> bool:
        """A LOST attempt whose host is back: stop the orphan (and ask for its end). One whose host stays
        away past ``lost_give_up_s``: the step fails and the run ends (no retry: an orphan may still run
        there; it is stopped if the host ever returns). True when the run may have ended."""
        if up:
            if now - self._asked.get(att.id, 0.0) >= self.tuning.ask_again_s:
                self._stop_orphan(att)
            return False
        if att.lost_at is None or now - att.lost_at < self.tuning.lost_give_up_s:
            return False
        reason = f"host {att.host} silent for {now - att.lost_at:.0f}s after the step was lost; gave up"
        self._move(att, StepState.FAILED, reason)
        self._abandon_rest(att.step.run, f"not run: {reason}")
        log.error("step failed: %s", reason, extra=self._ctx(att))
        return True

    def _overdue(self, att: Attempt, now: float) -> bool:
        """Past the agent's own deadline and a grace: the agent did not stop it, the controller does.
        Measured on the controller's clock only (when it saw the step start, else when it dispatched it):
        ``fio_started_at`` is the agent's clock, which may be minutes off; skew never fails a step."""
        began = att.started_at or att.dispatched_at
        return began is not None and now > began + att.timeout_s + self.tuning.timeout_grace_s

    def _stop_overdue(self, att: Attempt, now: float) -> CancelStep | None:
        """The cancel to send once the transaction that records ``stop_cause`` has committed (a stale
        controller, whose commit fails the lease check, sends nothing)."""
        if att.stop_cause == "timeout" and now - self._asked.get(att.id, 0.0) < self.tuning.ask_again_s:
            return None
        att.stop_cause = "timeout"
        reason = f"ran past its deadline of {att.timeout_s}s; stopped by the controller"
        log.warning("attempt %s %s", att.id, reason, extra=self._ctx(att))
        self._asked[att.id] = now
        return CancelStep(attempt_id=att.id, reason=reason)

    def reconcile(self) -> None:
        """At start: ask agents where every active attempt stands (each behind the boundary: an attempt that cannot
        be asked about is left to the watchdogs)."""
        with self.sessions() as s:
            for att in self._active_attempts(s):
                if self._is_local(att.step):
                    continue                          # a playbook of an earlier life: watch() ends it
                self.boundary.item("reconcile", f"attempt {att.id}", partial(self._ask, att), lambda _why: None)

    def _ask(self, att: Attempt) -> None:
        log.info("asking for the state of attempt %s", att.id, extra=self._ctx(att))
        self.dispatcher.report(att.host, ReportStep(attempt_id=att.id))


    def _watch_local(self, s: Session, att: Attempt) -> None:
        outcome: LocalOutcome | None
        if self.provisioner is None:
            outcome = LocalOutcome(ok=False, reason="the controller runs without an inventory")
        else:
            outcome = self.provisioner.poll(att.id)
        if outcome is None:
            if att.state == StepState.DISPATCHED:
                att.started_at = att.fio_started_at = self.clock()
                self._move(att, StepState.RUNNING)
            return
        for name, data in outcome.artifacts.items():
            rel, sha = self.artifacts.put(data)
            s.add(Artifact(attempt_id=att.id, name=name, sha256=sha, size=len(data), path=rel))
        att.fio_ended_at = self.clock()
        att.step.note = outcome.note
        if outcome.ok:
            self._move(att, StepState.SUCCEEDED)
        else:
            self._end(att, outcome.reason, cause="lost" if "restarted" in outcome.reason else "error")
            if att.step.state == StepState.FAILED:    # measuring an unprovisioned device proves nothing
                self._abandon_rest(att.step.run, f"not run: {att.step.name} failed ({outcome.reason})")
        log.info("%s ended: %s %s", att.step.kind, att.state, att.reason, extra=self._ctx(att))
        self._finish_run_if_done(att.step.run)
