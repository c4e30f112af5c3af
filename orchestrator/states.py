"""The state machines of runs, steps and attempts, and the only allowed transitions."""

from __future__ import annotations

from enum import StrEnum

from labcontract.errors import InvalidTransition


class RunState(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"            # holds its devices; its running step finishes, no new step starts
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"          # could not start before its expiry


class StepState(StrEnum):
    PENDING = "PENDING"          # planned, not dispatched
    DISPATCHED = "DISPATCHED"    # start sent to the agent's queue
    RUNNING = "RUNNING"          # agent reported fio started
    LOST = "LOST"                # agent stopped heartbeating while the step ran
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_RUN = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.EXPIRED})
TERMINAL_STEP = frozenset({StepState.SUCCEEDED, StepState.FAILED, StepState.CANCELLED})
ACTIVE_STEP = frozenset({StepState.DISPATCHED, StepState.RUNNING, StepState.LOST})

_RUN = {
    RunState.QUEUED: {RunState.RUNNING, RunState.PAUSED, RunState.CANCELLED, RunState.FAILED, RunState.EXPIRED},
    RunState.RUNNING: {RunState.PAUSED, RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED},
    RunState.PAUSED: {RunState.QUEUED, RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED},
}
_STEP = {
    StepState.PENDING: {StepState.DISPATCHED, StepState.CANCELLED, StepState.FAILED},
    StepState.DISPATCHED: {StepState.RUNNING, StepState.LOST, *TERMINAL_STEP},
    StepState.RUNNING: {StepState.LOST, *TERMINAL_STEP},
    StepState.LOST: {StepState.RUNNING, *TERMINAL_STEP},
}
_RETRY = {StepState.DISPATCHED, StepState.RUNNING, StepState.LOST}   # a step (not an attempt) may go back
                                                                      # to PENDING for another attempt


def check_run(run_id: str, current: str, target: RunState) -> RunState:
    if target not in _RUN.get(RunState(current), set()):
        raise InvalidTransition("run", run_id, current, target)
    return target


def check_step(kind: str, ident: str, current: str, target: StepState) -> StepState:
    """Steps and attempts share one machine (an attempt is a step's current try); only a step goes
    back from an active state to PENDING, when it is retried."""
    retry = kind == "step" and target == StepState.PENDING and StepState(current) in _RETRY
    if not retry and target not in _STEP.get(StepState(current), set()):
        raise InvalidTransition(kind, ident, current, target)
    return target
