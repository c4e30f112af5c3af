"""Dispatch: which steps start (orchestrator.runs.scheduling decides), their attempts and start messages (built by
the step's kind), the safety interlock before a start, expiry and quarantine of runs, and the start of the
steps the controller runs itself."""

from __future__ import annotations

import logging
import time
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from labcontract import interlock
from labcontract.errors import LabError
from labcontract.protocol import StartStep
from orchestrator import kinds
from orchestrator.controller.core import ControllerCore
from orchestrator.controller.transient import transient_kind
from orchestrator.runs.provisioning import LocalStep
from orchestrator.runs.scheduling import StepSummary, decide, run_unavailable
from orchestrator.states import TERMINAL_RUN, TERMINAL_STEP, RunState, StepState, check_run, check_step
from orchestrator.store.models import Attempt, Host, Run, Step, find_device

log = logging.getLogger("orchestrator.controller")


def step_operation(step: Step) -> str | None:
    """What a step does to its devices, for the interlock: purge, op_mode, write, or None."""
    return kinds.get(step.kind).operation(step)


class DispatchMixin(ControllerCore):
    def schedule(self) -> None:
        """Expire what can no longer start; dispatch what the scheduling rules allow (orchestrator.runs.scheduling).

        A step that cannot be started (a value that breaks its job or its message: data, not a fault) must not
        stop the loop, nor the other runs: the pass is then done again one step at a time, and the step that
        still fails is failed with the reason. Transient faults propagate (the loop waits them out)."""
        try:
            self._schedule()
        except Exception as e:
            if transient_kind(e) is not None:
                raise
            log.error("a scheduling pass failed (%s: %s); starting its steps one at a time", type(e).__name__, e)
            self._schedule_one_by_one()

    def _schedule_one_by_one(self) -> None:
        with self.sessions() as s:
            runs = list(s.scalars(select(Run).where(Run.state.in_([RunState.QUEUED, RunState.RUNNING]))))
            hosts = {h.name: h for h in s.scalars(select(Host).options(selectinload(Host.devices)))}
            summary = StepSummary.of(s, [r.id for r in runs], kinds=any(h.step_kinds for h in hosts.values()))
            picked = [(run.id, step.id, step.name) for run, step in
                      decide(runs, hosts, self.clock(), self.host_up, summary,
                             kinds.agent_kinds()).dispatch[:self.tuning.dispatch_batch]]
        for run_id, step_id, name in picked:
            self.boundary.item("dispatch", f"step {name} of run {run_id}",
                               partial(self._schedule, only=(run_id, step_id)),
                               partial(self._fail_unstartable, step_id))

    def _fail_unstartable(self, step_id: str, reason: str) -> None:
        why = f"could not be started: {reason[:500]}"
        with self.sessions.begin() as s:
            step = s.get(Step, step_id)
            if step is None or step.state != StepState.PENDING:
                return
            check_step("step", step.id, step.state, StepState.FAILED)
            step.state, step.reason, step.ended_at = str(StepState.FAILED), why, self.clock()
            if step.run.state == RunState.QUEUED:
                step.run.started_at = self.clock()
            self._abandon_rest(step.run, f"not run: {step.name} {why}")
            self._finish_run_if_done(step.run)

    def _schedule(self, only: tuple[str, str] | None = None) -> None:
        """One scheduling pass; ``only`` (run id, step id): start that step alone, if it is still due."""
        now = self.clock()
        with self.sessions.begin() as s:
            runs = list(s.scalars(select(Run).where(Run.state.in_(
                [RunState.QUEUED, RunState.RUNNING, RunState.PAUSED]))))
            for run in runs:
                if run.state == RunState.QUEUED and run.expires_at is not None and now >= run.expires_at:
                    self._expire(run)
            hosts = self.host_cache.hosts(s)      # kept between passes, loaded again when one is written
            # lazy: only the runs this pass starts have their next step read
            summary = StepSummary.of(s, [r.id for r in runs], kinds=any(h.step_kinds for h in hosts.values()),
                                     lazy=True)
            for run in runs:
                self._stop_if_quarantined(run, hosts, summary)
            live = [r for r in runs if r.state not in TERMINAL_RUN]
            decision = decide(live, hosts, now, self.host_up, summary, kinds.agent_kinds(),
                              limit=self.tuning.dispatch_batch if only is None else None)
            due = decision.dispatch if only is None else \
                [(run, step) for run, step in decision.dispatch if (run.id, step.id) == only]
            started = [(run, step, self._new_attempt(s, run, step, now))
                       for run, step in self._with_groups(due)
                       if not self._interlocked(run, step, hosts.get(run.host))]
            to_send = [msg for _run, step, msg in started if not self._is_local(step)]
            local = [self._local_step(run, step, msg) for run, step, msg in started if self._is_local(step)]
        self.dispatcher.start_many(to_send)       # after the commit: a crash here is healed by watch()
        for job in local:
            self._start_local(job)

    @staticmethod
    def _with_groups(picked: list[tuple[Run, Step]]) -> list[tuple[Run, Step]]:
        """Every picked step with the steps its kind starts in the same pass (a network cell: every host's)."""
        out: list[tuple[Run, Step]] = []
        for run, step in picked:
            out += [(run, st) for st in kinds.get(step.kind).cohort(run, step)]
        return out

    def _new_attempt(self, s: Session, run: Run, step: Step, now: float | None = None) -> StartStep:
        now = self.clock() if now is None else now
        if run.state == RunState.QUEUED:
            run.state, run.started_at = str(check_run(run.id, run.state, RunState.RUNNING)), now
        expected = kinds.get(step.kind).expected_seconds(self, step)
        number = len(step.attempts) + 1
        att = Attempt(id=f"{step.id}-a{number}", number=number, host=step.host or run.host, device=run.device,
                      state=str(StepState.DISPATCHED), dispatch_count=1, dispatched_at=now,
                      timeout_s=expected + self.tuning.step_timeout_margin_s)
        step.attempts.append(att)
        check_step("step", step.id, step.state, StepState.DISPATCHED)
        step.state = str(StepState.DISPATCHED)
        log.info("dispatching attempt %s", att.id, extra={"run": run.id, "step": step.name, "host": att.host})
        return self._start_msg(run, step, att)

    def _local_step(self, run: Run, step: Step, msg: StartStep) -> LocalStep:
        return LocalStep(attempt_id=msg.attempt_id, run_id=run.id, step=step.name, kind=step.kind, host=run.host,
                         devices=tuple(run.devices or [run.device]), op_mode=str(step.cell.get("op_mode", "")),
                         purge=bool(step.cell.get("purge", True)), phase=str(step.cell.get("phase", "before")))

    def _start_local(self, job: LocalStep) -> None:
        """Start a step the controller runs itself (a playbook); its end is picked up by watch()."""
        try:
            if self.provisioner is None:
                raise LabError("the controller runs without an inventory (labctl controller --inventory DIR)")
            self.provisioner.start(job)
        except Exception as e:                      # a broken inventory or playbook: the step fails, the loop lives
            log.error("could not start %s: %s", job.kind, e, extra={"run": job.run_id, "step": job.step,
                                                                   "host": job.host})
            with self.sessions.begin() as s:
                att = s.get(Attempt, job.attempt_id)
                if att is not None and att.state not in TERMINAL_STEP:
                    self._move(att, StepState.FAILED, f"could not start the playbook: {e}")
                    self._abandon_rest(att.step.run, f"not run: {job.step} failed")
                    self._finish_run_if_done(att.step.run)

    def _interlocked(self, run: Run, step: Step, host: Host | None) -> bool:
        """The safety interlock before dispatch, on what the agent last observed of each device: a purge
        or a writing step on a device that is mounted, in use, carries a signature (unless wipe_ok) or
        backs the root filesystem fails here, naming the device and the reasons; nothing is sent."""
        kind = kinds.get(step.kind)
        op = kind.operation(step)
        if op is None or host is None:
            return False
        declared = [interlock.DeclaredDut(name=d.name, path=d.path, wipe_ok=d.wipe_ok)
                    for d in host.devices if d.declared]
        # a device not observed (an older agent) is judged by the agent at start
        observed = [interlock.observed_from_dict(dev.observed) for path in run.devices or [run.device]
                    if (dev := find_device(host, path)) is not None and dev.observed is not None]
        # a kind whose devices may carry the lab's own filesystem: the agent judges that signature (its marker)
        refusals = [interlock.refusal_message(obs.path, op, reasons) for obs in observed
                    if (reasons := interlock.refusal_reasons(obs.path, declared, obs, op, lab_fs=kind.lab_fs))]
        if not refusals:
            return False
        why = "interlock: " + "; ".join(refusals)
        step.state, step.reason, step.ended_at = str(check_step("step", step.id, step.state, StepState.FAILED)), \
            why, self.clock()
        self._abandon_rest(run, f"not run: an earlier step was refused ({why})")
        if run.state == RunState.QUEUED:
            run.started_at = self.clock()
        self._finish_run_if_done(run)
        log.error("step refused before dispatch: %s", why, extra={"run": run.id, "step": step.name, "host": run.host})
        return True

    def _stop_if_quarantined(self, run: Run, hosts: dict[str, Host], summary: StepSummary) -> None:
        """A started run whose host or DUT went into quarantine ends (failed, with the reason) once its
        running step is over; a queued one waits for a release (see scheduling)."""
        if run.state not in (RunState.RUNNING, RunState.PAUSED) or run.id in summary.busy:
            return
        why = run_unavailable(run, hosts)
        if why is None:
            return
        self._abandon_rest(run, f"not run: {why}")
        self._finish_run_if_done(run)

    def _expire(self, run: Run) -> None:
        reason = "expired: not started before " + time.strftime("%Y-%m-%d %H:%M", time.localtime(run.expires_at))
        for st in run.steps:
            if st.state == StepState.PENDING:
                st.state, st.reason, st.ended_at = str(StepState.CANCELLED), reason, self.clock()
        run.state = str(check_run(run.id, run.state, RunState.EXPIRED))
        run.reason, run.ended_at = reason, self.clock()
        log.warning("run %s", reason, extra={"run": run.id, "host": run.host})

