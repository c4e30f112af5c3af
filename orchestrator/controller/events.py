"""Events from agents: registration, heartbeats, a step started, ended, unknown. The generic outcome of an
end (refused, timeout, cancelled, error, corrupt artifacts) is handled here; a successful end is stored by
the step's kind (orchestrator.kinds)."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, defer

from labcontract.errors import ProtocolError, StepOutputError
from labcontract.protocol import (
    AnyEvent,
    Heartbeat,
    OtherVersion,
    Register,
    ReportStep,
    StepEnded,
    StepStarted,
    StepUnknown,
)
from orchestrator import kinds
from orchestrator.controller.core import ControllerCore
from orchestrator.controller.intake import judge, mark_incompatible
from orchestrator.controller.liveness import SEEN
from orchestrator.runs import health
from orchestrator.states import TERMINAL_STEP, StepState
from orchestrator.store.models import Artifact, Attempt, Device, Host

log = logging.getLogger("orchestrator.controller")


class EventsMixin(ControllerCore):
    def handle_event(self, ev: AnyEvent | OtherVersion, source: str | None = None) -> None:
        """Apply one event; ``source``: the host whose stream it came on (None: trusted as ``ev.host``)."""
        with self.sessions.begin() as s:
            self._apply_event(s, ev, source)

    def _apply_event(self, s: Session, ev: AnyEvent | OtherVersion, source: str | None = None) -> None:
        """Raises ProtocolError for an event refused (see intake.judge): nothing of it is applied."""
        source = ev.host if source is None else source
        if isinstance(ev, OtherVersion):
            mark_incompatible(s, ev, self.clock())
        elif isinstance(ev, Register):
            self._on_register(s, ev)
        elif isinstance(ev, Heartbeat):
            self._on_heartbeat(s, ev)
        elif judge(att := s.get(Attempt, ev.attempt_id), ev.attempt_id, ev.type, source):
            if isinstance(ev, StepStarted):
                self._on_started(s, ev)
            elif isinstance(ev, StepEnded):
                self._on_ended(s, ev)
            else:
                self._on_unknown(s, ev)
        elif isinstance(ev, StepEnded) and att is not None:
            self._duplicate_end(att, ev)

    def _on_heartbeat(self, s: Session, ev: Heartbeat) -> None:
        """The host is seen now (an unknown host: nothing). Without health checks only the liveness column is
        written, for every such heartbeat of the transaction in one statement as it commits (:mod:`.liveness`):
        neither the host's row nor its facts are loaded (a lab's every heartbeat)."""
        now = self.clock()
        if not ev.health:
            s.info.setdefault(SEEN, {})[ev.host] = now
            return
        host = s.get(Host, ev.host, options=[defer(Host.facts)])
        if host is not None:
            host.last_seen = now
            health.apply(host, ev.health, now, self.tuning.quarantine_after)

    def _duplicate_end(self, att: Attempt, ev: StepEnded) -> None:
        """An end of an attempt that already ended changes nothing; its artifacts are still judged (refused, so
        dead-lettered with the reason, when one is not the artifact stored and does not inflate to what it
        declares: a gzip bomb aimed at an ended attempt)."""
        kept = {(a.name, a.sha256, a.size) for a in att.artifacts}
        for art in ev.artifacts:
            if (art.name, art.sha256, art.size) not in kept:
                art.content()                  # ProtocolError: refused
        log.info("end of attempt %s received again (%s); already applied, nothing changed", att.id, ev.outcome,
                 extra=self._ctx(att))

    def _on_register(self, s: Session, ev: Register) -> None:
        host = s.get(Host, ev.host)
        now = self.clock()
        if host is None:
            host = Host(name=ev.host)
            s.add(host)
        host.agent_version, host.protocol_version = ev.agent_version, ev.v
        host.incompatible, host.clock_skew_s = "", ev.sent_at - now
        host.facts = ev.facts.model_dump(mode="json")
        host.step_kinds = {k.action: k.version for k in ev.facts.step_kinds} or None
        host.registered_at = host.last_seen = now
        declared = {d.name: d for d in ev.duts}
        for dev in host.devices:
            dev.declared = dev.name in declared
        existing = {d.name: d for d in host.devices}
        for dut in ev.duts:
            dev = existing.get(dut.name) or Device(host=ev.host, name=dut.name)
            if dev.name not in existing:
                host.devices.append(dev)
            dev.path, dev.kind, dev.size_bytes = dut.path, dut.kind, dut.size_bytes
            dev.model, dev.firmware, dev.by_id = dut.model, dut.firmware, dut.by_id
            dev.serial = dev.serial or dut.serial     # the identity registered first; a change is a health failure
            dev.wipe_ok, dev.observed = dut.wipe_ok, dut.observed.as_dict() if dut.observed is not None else None
            dev.declared = True
        if ev.health:
            health.apply(host, ev.health, now, self.tuning.quarantine_after)
        log.info("host registered: %s (agent %s, %d DUT(s))", ev.host, ev.agent_version, len(ev.duts),
                 extra={"host": ev.host})
        # Ask where every attempt we think is on this host stands: re-adoption and ends
        # reported while we were away come back through the normal event path.
        for att in self._active_attempts(s, ev.host, with_steps=True):
            if att.id not in ev.running and not self._is_local(att.step):
                self.dispatcher.report(ev.host, ReportStep(attempt_id=att.id))

    def _on_started(self, s: Session, ev: StepStarted) -> None:
        att = self._attempt(s, ev.attempt_id)
        if att is None or att.state == StepState.RUNNING:
            return
        if att.state in TERMINAL_STEP or att.state == StepState.LOST:
            # fio of an attempt the controller lost or ended still runs on the host: an orphan
            self._stop_orphan(att)
            return
        att.pid, att.fio_started_at = ev.pid, ev.fio_started_at
        att.started_at = att.started_at or self.clock()
        self._move(att, StepState.RUNNING, "")
        what = "re-adopted after an agent restart" if ev.adopted else "started"
        log.info("%s %s (pid %s)", "fio" if att.step.kind in ("measure", "precondition") else att.step.kind, what,
                 ev.pid, extra=self._ctx(att))

    def _on_unknown(self, s: Session, ev: StepUnknown) -> None:
        att = self._attempt(s, ev.attempt_id)
        if att is None or att.state in TERMINAL_STEP:
            return
        if att.state == StepState.DISPATCHED:
            return  # the start may still be on its way; watch() re-sends it when overdue
        log.error("attempt %s failed: agent has no record of it", att.id, extra=self._ctx(att))
        self._end(att, "the agent has no record of this attempt (state lost)", cause="lost")
        self._finish_run_if_done(att.step.run)

    def _on_ended(self, s: Session, ev: StepEnded) -> None:
        att = self._attempt(s, ev.attempt_id)
        if att is None or att.state in TERMINAL_STEP:
            return   # duplicate report: already applied
        att.exit_code = ev.exit_code
        att.fio_started_at = att.fio_started_at or ev.fio_started_at
        att.fio_ended_at = ev.fio_ended_at
        stored: dict[str, bytes] = {}
        corrupt: dict[str, str] = {}
        for art in ev.artifacts:
            try:
                data = art.content()          # bounded: a gzip bomb is refused before it inflates
            except ProtocolError as e:
                corrupt[art.name] = str(e)
                continue
            rel, sha = self.artifacts.put(data, art.sha256)
            s.add(Artifact(attempt_id=att.id, name=art.name, sha256=sha, size=len(data), path=rel))
            stored[art.name] = data
        run = att.step.run
        kind = kinds.get(att.step.kind)
        lost = " (finished while its host was unreachable; output collected on its return)" \
            if att.state == StepState.LOST else ""
        if corrupt:
            self._end(att, f"artifact(s) {', '.join(corrupt)} arrived corrupted: {'; '.join(corrupt.values())}"[:4096],
                      cause="error")
        elif ev.outcome == "refused":
            self._move(att, StepState.FAILED, f"refused by agent: {ev.reason}")
            self._abandon_rest(run, f"not run: an earlier step was refused ({ev.reason})")
        elif ev.outcome == "timeout" or (ev.outcome == "cancelled" and att.stop_cause == "timeout"):
            self._end(att, f"timeout: {ev.reason}" if ev.outcome == "timeout" else ev.reason, cause="timeout")
        elif ev.outcome == "cancelled" and att.stop_cause == "orphan":
            self._end(att, "host lost mid-step; the orphaned fio was stopped when the host returned", cause="lost")
        elif ev.outcome == "cancelled":
            self._move(att, StepState.CANCELLED, ev.reason or "cancelled")
        elif ev.outcome == "error" or ev.exit_code != 0:
            tail = stored.get("fio.stderr", b"").decode(errors="replace").strip().splitlines()[-3:]
            what = "fio" if att.step.kind in ("measure", "precondition") else f"the {att.step.kind} step"
            why = ev.reason or f"{what} exited with code {ev.exit_code}"
            self._end(att, why + (": " + " | ".join(tail) if tail else ""), cause="error")
        else:
            try:
                kind.store(self, s, att, stored)
            except StepOutputError as e:
                self._end(att, str(e)[:4096], cause="error")
            else:
                self._move(att, StepState.SUCCEEDED, lost.strip(" ()"))
        kind.after_end(self, s, att)
        log.info("step ended: %s %s", att.state, att.reason, extra=self._ctx(att))
        self._finish_run_if_done(run)
