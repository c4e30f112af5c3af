"""The controller's boundary: nothing it accepts may stop it.

Commands and events are applied one entry at a time by the intake: an entry that is refused, or whose handler
raises, is answered (a command with a reply naming the reason) and set aside in ``lab:deadletter``.

Every duty of a loop pass (firing schedules, dispatch, watchdogs, notifications and the history they judge, the
reconciliation at start) runs here, item by item. An item whose handling raises an exception that is not a
transient fault is **set aside** with its reason, by a function its duty gives:

=================  ==========================================================================================
duty               what is set aside, and where it shows
=================  ==========================================================================================
``schedules``      the schedule is disabled with the reason (``labctl schedule list``, the web service)
``dispatch``       the step fails with the reason, the rest of its run is not run (``labctl run show``)
``watchdogs``      the attempt fails with the reason
``notifications``  the run is marked (``Run.set_aside``) and not notified again
``history``        the run is marked; its notification goes without the regressions
``reconcile``      nothing to mark: the attempt is asked about again by the watchdogs
=================  ==========================================================================================

then logged, counted (``lab_controller_set_aside_total{duty}``), and the duty goes on with its next item. A
duty that fails outside any item is logged (with its traceback once a minute per duty), counted
(``lab_controller_duty_failures_total{duty}``), and the pass goes on with the next duty.

What passes through: transient faults (the store or the broker away: the loop waits them out, see
:mod:`.transient`) and :class:`~orchestrator.controller.lease.LeaseLost` (a BaseException: another controller
took over, this one stops writing).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from orchestrator.controller.transient import transient_kind

log = logging.getLogger("orchestrator.controller")

T = TypeVar("T")
DUTIES = ("intake", "schedules", "dispatch", "watchdogs", "notifications", "history", "reconcile")
REASON_MAX = 2000            # of a reason stored on a schedule or a run
TRACEBACK_EVERY_S = 60.0     # a duty's traceback is logged at most this often (its one-line error every time)


def reason_of(e: BaseException) -> str:
    """One line: the exception's type and message, bounded."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}"[:REASON_MAX]


@dataclass
class Boundary:
    """Runs duties and their items (see the module doc); thread-safe counters for the exporter."""

    clock: Callable[[], float] = time.monotonic
    set_aside_total: dict[str, int] = field(default_factory=dict)     # duty -> items set aside
    failures_total: dict[str, int] = field(default_factory=dict)      # duty -> failures outside any item
    _traced: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def duty(self, name: str, fn: Callable[[], object]) -> None:
        """Run one duty of a pass; an exception that is not a transient fault is logged and counted."""
        try:
            fn()
        except Exception as e:
            if transient_kind(e) is not None:
                raise
            self._count(self.failures_total, name)
            log.error("duty %s failed (%s); the controller goes on", name, reason_of(e),
                      exc_info=self._trace(f"duty {name}"))

    def item(self, duty: str, what: str, fn: Callable[[], T], set_aside: Callable[[str], object]) -> T | None:
        """``fn()``, or None when it raised: then ``set_aside(reason)`` records why ``what`` was set aside."""
        try:
            return fn()
        except Exception as e:
            if transient_kind(e) is not None:
                raise
            reason = reason_of(e)
            self._count(self.set_aside_total, duty)
            log.error("%s: %s set aside: %s", duty, what, reason, exc_info=self._trace(f"item {duty}"))
            try:
                set_aside(reason)
            except Exception as e2:
                if transient_kind(e2) is not None:
                    raise
                log.error("%s: %s could not be marked as set aside (%s)", duty, what, reason_of(e2))
            return None

    def totals(self) -> tuple[dict[str, int], dict[str, int]]:
        with self._lock:
            return dict(self.set_aside_total), dict(self.failures_total)

    def _count(self, totals: dict[str, int], duty: str) -> None:
        with self._lock:
            totals[duty] = totals.get(duty, 0) + 1

    def _trace(self, key: str) -> bool:
        now = self.clock()
        if now - self._traced.get(key, -TRACEBACK_EVERY_S) < TRACEBACK_EVERY_S:
            return False
        self._traced[key] = now
        return True


__all__ = ["DUTIES", "Boundary", "reason_of"]
