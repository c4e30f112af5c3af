"""The controller's Prometheus exporter: every controller metric of :mod:`labcontract.telemetry`.

Computed from the store at each scrape with a few cheap queries (counts grouped by state, the
hosts' last heartbeat, the devices of running runs), read-only and in a session of its own.
``lab_controller_steps_completed_total`` / ``_failed_total`` are the counts of SUCCEEDED /
FAILED steps in the store: monotonic as long as the store is (nothing deletes steps).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.registry import Collector
from sqlalchemy import func, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from labcontract import telemetry as T
from labcontract.metrics_http import Family, counter, gauge
from orchestrator.config import ControllerTuning
from orchestrator.controller.boundary import DUTIES, Boundary
from orchestrator.controller.transient import FAULT_KINDS, FaultLog
from orchestrator.states import RunState, StepState
from orchestrator.store.models import Host, Run, Step

__all__ = ["ControllerCollector"]
log = logging.getLogger(__name__)

#: /health turns 503 when the controller's loop has not completed a pass for this long.
LOOP_STALE_S = 60.0


class ControllerCollector(Collector):
    """A custom collector over the store; register it in a registry of its own.

    ``last_pass`` (optional) returns the ``time.time()`` of the controller loop's last completed
    pass, for ``/health``.
    """

    def __init__(self, sessions: sessionmaker[Session], tuning: ControllerTuning | None = None, *,
                 clock: Callable[[], float] = time.time, last_pass: Callable[[], float | None] | None = None,
                 started_at: float | None = None, faults: FaultLog | None = None,
                 boundary: Boundary | None = None) -> None:
        self.sessions = sessions
        self.faults = faults
        self.boundary = boundary
        self.tuning = tuning or ControllerTuning()
        self.clock = clock
        self.last_pass = last_pass
        self.started_at = clock() if started_at is None else started_at

    def collect(self) -> Iterator[Family]:
        now = self.clock()
        yield from self._faults()
        try:
            with self.sessions() as s:
                runs = {state: n for state, n in s.execute(select(Run.state, func.count()).group_by(Run.state))}
                steps = {state: n for state, n in s.execute(select(Step.state, func.count()).group_by(Step.state))}
                hosts = [(name, seen) for name, seen in
                         s.execute(select(Host.name, Host.last_seen).order_by(Host.name))]
                held = [(host, device, devices) for host, device, devices in
                        s.execute(select(Run.host, Run.device, Run.devices).where(Run.state == RunState.RUNNING))]
        except SQLAlchemyError as e:        # the store is down: the fault series above still tell why
            log.debug("store unreadable for /metrics: %s", e)
            return
        fam_runs = gauge(T.CTRL_RUNS)
        for run_state in RunState:
            fam_runs.add_metric([run_state.value], runs.get(run_state.value, 0))
        fam_steps = gauge(T.CTRL_STEPS)
        for step_state in StepState:
            fam_steps.add_metric([step_state.value], steps.get(step_state.value, 0))
        queue = gauge(T.CTRL_QUEUE)
        queue.add_metric([], runs.get(RunState.QUEUED.value, 0))
        completed = counter(T.CTRL_STEPS_COMPLETED)
        completed.add_metric([], steps.get(StepState.SUCCEEDED.value, 0))
        failed = counter(T.CTRL_STEPS_FAILED)
        failed.add_metric([], steps.get(StepState.FAILED.value, 0))
        up, age = gauge(T.CTRL_AGENT_UP), gauge(T.CTRL_AGENT_HEARTBEAT_AGE)
        for name, last_seen in hosts:
            if last_seen is None:
                up.add_metric([name], 0)
                continue
            seconds = max(now - last_seen, 0.0)
            up.add_metric([name], 1 if seconds <= self.tuning.heartbeat_timeout_s else 0)
            age.add_metric([name], seconds)
        reservations = gauge(T.CTRL_RESERVATIONS)
        reservations.add_metric([], len({(host, d) for host, device, devices in held
                                         for d in (devices or [device])}))
        yield from (fam_runs, fam_steps, queue, completed, failed, up, age, reservations)

    def _faults(self) -> Iterator[Family]:
        """lab_controller_degraded{kind} and lab_controller_transient_faults_total{kind}: served also
        while the store is unreadable (then the store's series are absent)."""
        degraded, total = gauge(T.CTRL_DEGRADED), counter(T.CTRL_TRANSIENT_FAULTS)
        current = self.faults.kind if self.faults is not None else None
        totals = dict(self.faults.totals) if self.faults is not None else {}
        for kind in FAULT_KINDS:
            degraded.add_metric([kind], 1 if current == kind else 0)
            total.add_metric([kind], totals.get(kind, 0))
        yield from (degraded, total)
        set_aside, failures = self.boundary.totals() if self.boundary is not None else ({}, {})
        fam_aside, fam_failed = counter(T.CTRL_SET_ASIDE), counter(T.CTRL_DUTY_FAILURES)
        for duty in DUTIES:
            fam_aside.add_metric([duty], set_aside.get(duty, 0))
            fam_failed.add_metric([duty], failures.get(duty, 0))
        yield from (fam_aside, fam_failed)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """``/health``: healthy when the store answers and the controller loop is passing."""
        now = self.clock()
        data: dict[str, Any] = {"up": 1}
        healthy = True
        try:
            with self.sessions() as s:
                s.execute(text("SELECT 1"))
            data["store"] = "ok"
        except Exception as e:
            healthy, data["store"] = False, f"error: {e}"
        if self.last_pass is not None:
            last = self.last_pass()
            loop_age = now - (last if last is not None else self.started_at)
            data["loop_age_s"] = round(loop_age, 3)
            if loop_age > LOOP_STALE_S:
                healthy = False
        if self.faults is not None and self.faults.degraded:
            data["degraded"] = f"{self.faults.kind}: {self.faults.reason}"
        data["healthy"] = healthy
        return healthy, data
