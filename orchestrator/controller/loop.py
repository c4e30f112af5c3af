"""The controller's loop: one thread, pass after pass.

1. read agent events and CLI commands from their Redis streams (consumer group, so nothing read is lost
   across a restart: entries are acknowledged after the commit),
2. apply each in its own transaction (idempotent: an event for an attempt that already ended changes nothing),
3. schedule: dispatch the next step of every run whose host is up and whose device is free,
4. watch: re-send starts nobody took, mark steps LOST when their host goes silent.

Nothing accepted stops it: each duty runs behind :mod:`.boundary`, which sets an item that fails aside with its
reason (a schedule disabled, a step failed, a run marked) and goes on; only transient faults (waited out here) and
a lost lease (the loop ends) pass through.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from functools import cached_property

from sqlalchemy import select

from labcontract.protocol import CONTROLLER_PRESENCE_KEY
from orchestrator.controller.commands import CommandsMixin
from orchestrator.controller.events import EventsMixin
from orchestrator.controller.intake import Intake
from orchestrator.controller.stepping import DispatchMixin
from orchestrator.controller.transient import FaultLog, transient_kind
from orchestrator.controller.watchdogs import WatchdogsMixin

PENDING_AGAIN_S = 10.0      # read the streams' unacknowledged entries again this often (see run_forever)
PRESENCE_EVERY_S = 5.0      # the controller says it is here this often (announce)


def _backoff_bounds() -> tuple[float, float]:
    """The backoff's first and longest wait, as the package ``orchestrator.controller`` names them (tests
    shorten them there)."""
    pkg = sys.modules["orchestrator.controller"]
    return float(pkg.BACKOFF_FIRST_S), float(pkg.BACKOFF_MAX_S)


class Controller(EventsMixin, CommandsMixin, DispatchMixin, WatchdogsMixin):
    """The store's only writer: events, commands, dispatch and watchdogs (one mixin each), in one loop."""

    def setup(self) -> None:
        self.announce(force=True)     # before anything: labctl sends commands only where a controller registered
        self.intake.setup()           # groups on every stream; what a previous life read but did not acknowledge
        self.reconcile()

    def announce(self, *, force: bool = False) -> None:
        """Say in the broker that this lab's controller is here (``CONTROLLER_PRESENCE_KEY``, every
        :data:`PRESENCE_EVERY_S`): labctl refuses to send a command to a broker where none ever registered (it
        waited for a reply from no one, then called the run queued), and says when the last one was seen."""
        if self.redis is None:
            return
        now = time.monotonic()
        if not force and self._announced is not None and now - self._announced < PRESENCE_EVERY_S:
            return
        if force or self._first_announced is None:      # read once (a SET every 5 s after: no read of lab:live:*)
            first = time.time()
            raw = self.redis.get(CONTROLLER_PRESENCE_KEY)
            with contextlib.suppress(ValueError, TypeError, KeyError):     # (a value not ours: started over)
                first = float(json.loads(raw)["first_at"]) if raw else first
            self._first_announced = first
        self.redis.set(CONTROLLER_PRESENCE_KEY, json.dumps({"first_at": self._first_announced,
                                                           "last_at": time.time()}))
        self._announced = now

    @cached_property
    def intake(self) -> Intake:
        return Intake(self)

    def stop(self) -> None:
        """From a signal handler: the loop ends after this pass (or this backoff wait)."""
        self._stopping = True

    def run_forever(self, *, renew: Callable[[], None] | None = None, faults: FaultLog | None = None) -> None:
        """Pass after pass until stop(). ``renew``: extends the controller lease (raises LeaseLost, which
        ends the loop: another controller took over). A transient fault (orchestrator.controller.transient: store
        full or locked, PostgreSQL or Redis down, Redis restarted empty) is waited out with backoff, logged
        once per interval in ``faults``; nothing is acknowledged meanwhile, and after it the streams are
        set up again (groups recreated, entries read but not acknowledged read again)."""
        faults = faults if faults is not None else FaultLog()
        first, longest = _backoff_bounds()
        backoff, ready, pending_at = first, False, time.monotonic()
        while not self._stopping:
            try:
                if renew is not None:
                    renew()
                if not ready:
                    self.setup()
                    ready = True
                elif time.monotonic() - pending_at >= PENDING_AGAIN_S:
                    # entries a stale controller read (same consumer) and, fenced off, never acknowledged
                    self.intake.drain(pending=True)
                    pending_at = time.monotonic()
                self.step_once()
            except Exception as e:
                kind = transient_kind(e)
                if kind is None:
                    raise
                faults.fault(kind, e, backoff)
                ready = False
                self._nap(backoff, probe=self.redis.ping if kind == "redis" else self._store_answers)
                backoff = min(backoff * 2, longest)
                continue
            backoff = first
            faults.recovered()

    def _store_answers(self) -> None:
        """The backoff's probe of the store: a read (a full disk still reads: then the retries come every
        probe, each a cheap failed pass, logged once per interval)."""
        with self.sessions() as s:
            s.execute(select(1))

    def _nap(self, seconds: float, probe: Callable[[], object] | None = None) -> None:
        """Sleep, but end at once when stop() is called (SIGTERM during a 10 s backoff), or as soon as
        ``probe`` (tried every 0.5 s, e.g. a Redis PING) succeeds: the backoff spares the log, not the
        recovery."""
        until, probe_at = time.monotonic() + seconds, time.monotonic() + 0.5
        while not self._stopping and (left := until - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))
            if probe is not None and time.monotonic() >= probe_at:
                probe_at = time.monotonic() + 0.5
                try:
                    probe()
                    return
                except Exception:      # still down: keep waiting
                    continue

    def step_once(self) -> None:
        """One pass: each duty behind the boundary (a duty that fails is logged and counted, the pass goes on;
        orchestrator.controller.boundary)."""
        duty = self.boundary.duty
        duty("intake", lambda: self._drain(pending=False, block_ms=self.tuning.block_ms))
        duty("schedules", self.fire_schedules)
        duty("dispatch", self.schedule)
        duty("watchdogs", self.watch)
        duty("notifications", self.notify)
        duty("presence", self.announce)
        self.last_pass_at = time.time()

    def _drain(self, *, pending: bool, block_ms: int | None = None) -> None:
        self.intake.drain(pending=pending, block_ms=block_ms)
        self.last_drain_at = self.clock()
