"""The retry policy applied to an attempt that failed by no fault of its step (suite key ``retry``).

A step kind says whether its steps may be retried (``retryable``, an attribute of the kind in
:mod:`orchestrator.kinds`): purges, precondition rounds and measurements may (each runs a whole job against
the run's own devices); application workloads, network cells and the controller's own playbooks may not. A
retry is a new attempt of the same step, dispatched only after the previous attempt is known to have stopped,
so a step never runs twice at the same time; with ``repurge`` a purge of the run's devices comes first (for the
kinds whose ``repurge_before_retry`` says so).
"""

from __future__ import annotations

from labcontract.suitebase import Retry, RetryCause
from orchestrator import kinds
from orchestrator.runs.preconditioning import suite_of
from orchestrator.states import StepState
from orchestrator.store.models import Attempt, Run, Step


def policy_of(run: Run) -> Retry:
    return suite_of(run).retry


def attempts_counted(run: Run, step: Step) -> int:
    """The step's attempts the policy counts: since the run's last rerun (a rerun starts the count again; the
    earlier attempts stay as the step's history)."""
    if run.rerun_at is None:
        return len(step.attempts)
    return sum(1 for a in step.attempts if a.dispatched_at is None or a.dispatched_at >= run.rerun_at)


def should_retry(run: Run, att: Attempt, cause: RetryCause | None) -> bool:
    policy = policy_of(run)
    return (cause is not None and cause in policy.when and kinds.get(att.step.kind).retryable
            and attempts_counted(run, att.step) < policy.max_attempts)


def repurge_step(run: Run, step: Step) -> Step | None:
    """A purge to run before the retry of ``step`` (the suite purges and asks for it), else None."""
    suite = suite_of(run)
    if not (suite.retry.repurge and suite.phases.purge and kinds.get(step.kind).repurge_before_retry):
        return None
    n = len(step.attempts) + 1
    # (seq, round) is unique in a run and orders its steps: a re-purge takes a negative round of the
    # step's seq, so it sorts before the step it precedes
    slot = -1 - sum(1 for st in run.steps if st.seq == step.seq and st.round < 0)
    return Step(id=f"{step.id}-rp{n}", seq=step.seq, round=slot, kind="purge",
                name=f"repurge.{step.name}.a{n}", cell=dict(step.cell),
                note=f"re-purge before attempt {n} of {step.name}", workload=None, job_text="",
                state=str(StepState.PENDING))
