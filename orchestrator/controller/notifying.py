"""End notifications from the loop: the runs the store says are due handed to the sinks
(orchestrator.controller.notify), what they took written down (``runs.notified_sinks``, ``notified_at``), and each
sink's delivery state kept in the store (orchestrator.controller.sinkstate) for the web service and
``labctl notifications``."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from sqlalchemy import select

from labcontract.errors import LabError
from orchestrator.controller.boundary import REASON_MAX
from orchestrator.controller.core import ControllerCore
from orchestrator.controller.notify import Delivered, Delivery, encode, from_schedule, payload, regressed_payload
from orchestrator.controller.sinkstate import SinkStates
from orchestrator.states import TERMINAL_RUN
from orchestrator.store.models import Result, Run

log = logging.getLogger("orchestrator.controller")


class NotifyMixin(ControllerCore):
    sink_states: SinkStates | None = None      # made with the delivery, at the first notify pass

    def _mark_run(self, run_id: str, what: str, why: str, *, notified: bool = False) -> None:
        """A run a duty was set aside for: the reason on the run (``notified``: its notification is not tried
        again)."""
        with self.sessions.begin() as s:
            run = s.get(Run, run_id)
            if run is not None:
                run.set_aside = "; ".join(x for x in (run.set_aside, f"{what}: {why}") if x)[:REASON_MAX]
                if notified:
                    run.notified_at = self.clock()

    def _regressions_of(self, run_id: str) -> tuple[list[dict[str, Any]], str]:
        """A scheduled run's regressions against its history and what the history could say (``no regression
        against its 12-run history ...``, ``the suite changed on r...: new series, history too short``), for its
        notification (none when they cannot be judged: the notification still goes). Behind the boundary: a
        judgement that fails marks the run."""
        from orchestrator.runhistory import run_history

        def judged() -> tuple[list[dict[str, Any]], str]:
            with self.sessions() as s:
                try:
                    h = run_history(s, run_id)
                except LabError as e:
                    log.warning("regressions of run %s not judged: %s", run_id, e, extra={"run": run_id})
                    return [], f"history not judged: {e}"
                return ([r.as_dict() for r in h.regressions], h.summary()) if h is not None else ([], "")

        got = self.boundary.item("history", f"history of run {run_id}", judged,
                                 lambda why: self._mark_run(run_id, "history not judged", why))
        return got or ([], "")

    def notify(self) -> None:
        """Hand the end notifications the store says are due to the notifier's sinks, and write down what they took
        (see orchestrator.controller.notify): each run behind the boundary (one whose notification cannot be built
        is marked and not tried again). Nothing here waits on a sink: a sink that fails is retried by its own
        thread while the loop goes on."""
        if self.notifier is None or not self.notifier.enabled:
            if self.sink_states is None:      # sinks of an earlier configuration are no longer delivered to
                self.sink_states = SinkStates(self.sessions, [], {}, self.clock)
                self.sink_states.start()
            return
        if self.delivery is None:
            sinks = self.notifier.sinks()
            self.sink_states = SinkStates(self.sessions, sinks, self.notifier.origins, self.clock)
            self.sink_states.start()
            self.delivery = Delivery(sinks, background=self.notifier.background)
        delivery = self.delivery
        self._took(delivery.collect())
        with self.sessions() as s:
            query = select(Run.id).where(Run.state.in_([str(x) for x in TERMINAL_RUN]), Run.notified_at.is_(None))
            if delivery.in_flight:
                query = query.where(Run.id.not_in(list(delivery.in_flight)))
            due = list(s.scalars(query.limit(20)))
        for run_id in due:
            self.boundary.item("notifications", f"notification of run {run_id}",
                               partial(self._hand_run, run_id, delivery),
                               partial(self._mark_run, run_id, "notification not sent", notified=True))
        self._took(delivery.collect())

    def _hand_run(self, run_id: str, delivery: Delivery) -> None:
        """Build one ended run's bodies (its history judged once) and hand them to the sinks that have not taken it."""
        with self.sessions() as s:
            run = s.get(Run, run_id)
            scheduled = run is not None and run.notified_at is None and from_schedule(run) is not None
        regs, history = self._regressions_of(run_id) if scheduled else ([], "")
        with self.sessions.begin() as s:
            run = s.get(Run, run_id)
            if run is None or run.notified_at is not None:
                return
            pending = [k for k in delivery.sinks if k not in (run.notified_sinks or [])]
            if not pending:
                run.notified_at = self.clock()
                return
            results = {r.step_id: r for r in s.scalars(select(Result).where(Result.run_id == run.id))}
            bodies = [payload(run, results)]
            if scheduled:
                bodies[0]["regressions"] = regs
                bodies[0]["history"] = history
                if regs:
                    bodies.append(regressed_payload(run, regs))
            data = [encode(b) for b in bodies]
        delivery.hand(run_id, data, pending)

    def _took(self, delivered: list[Delivered]) -> None:
        """Write down the sinks that took a run (a run every sink took is notified) and each sink's state."""
        assert self.delivery is not None
        if self.sink_states is not None:
            self.sink_states.record(delivered, self.delivery.pending())
        took: dict[str, list[str]] = {}
        for d in delivered:
            if not d.error:
                took.setdefault(d.run, []).append(d.sink)
        for run_id, sinks in took.items():
            with self.sessions.begin() as s:
                run = s.get(Run, run_id)
                if run is None:
                    continue
                done = list(dict.fromkeys([*(run.notified_sinks or []), *sinks]))
                run.notified_sinks = done
                if run.notified_at is None and set(self.delivery.sinks) <= set(done):
                    run.notified_at = self.clock()
