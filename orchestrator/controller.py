"""The controller: the store's only writer.

One loop, one thread:

1. read agent events and CLI commands from their Redis streams (consumer group, so
   nothing read is lost across a restart: entries are acknowledged after the commit),
2. apply each in its own transaction (idempotent: an event for an attempt that already
   ended changes nothing),
3. schedule: dispatch the next step of every run whose host is up and whose device is free,
4. watch: re-send starts nobody took, mark steps LOST when their host goes silent.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any

import redis
from croniter import croniter
from sqlalchemy import select
from sqlalchemy.orm import Session, defer, selectinload, sessionmaker

from labcontract import interlock
from labcontract.errors import FioError, LabError, Problem, ProtocolError, SubmissionError, SuiteError
from labcontract.fiojob import device_section, render_job
from labcontract.fioresult import StepMetrics, latency_bins, parse_fio_groups
from labcontract.fioseries import parse_status_stream, series_summary, split_status_stream
from labcontract.protocol import (
    PROTOCOL_VERSION,
    AnyEvent,
    Cancel,
    CancelStep,
    Heartbeat,
    NetStart,
    OtherVersion,
    Pause,
    Register,
    Release,
    Reply,
    ReportStep,
    Resume,
    ScheduleAdd,
    ScheduleRemove,
    StartStep,
    StepEnded,
    StepStarted,
    StepUnknown,
    Submit,
    decode_command,
)
from labcontract.suite import RetryCause, Suite, Workload, capacity_problems, override_problems, parse_suite
from orchestrator import health, netgroups, opmode, preconditioning, retries
from orchestrator.artifacts import ArtifactStore
from orchestrator.config import ControllerTuning
from orchestrator.dispatch import Dispatcher
from orchestrator.intake import Intake, command_refusal, judge, mark_incompatible, valid_reply_to
from orchestrator.notify import Notifier, payload
from orchestrator.planner import net_hosts_of, plan
from orchestrator.provisioning import LOCAL_KINDS, LocalOutcome, LocalStep, Provisioner
from orchestrator.scheduling import StepSummary, decide, run_unavailable
from orchestrator.states import (
    ACTIVE_STEP,
    TERMINAL_RUN,
    TERMINAL_STEP,
    RunState,
    StepState,
    check_run,
    check_step,
)
from orchestrator.store.models import Artifact, Attempt, Device, Host, NetGroup, Result, Run, Schedule, Step
from orchestrator.transient import BACKOFF_FIRST_S, BACKOFF_MAX_S, FaultLog, transient_kind

log = logging.getLogger(__name__)
NET_TARGET_EXTRA_S = 2      # the target counts this much longer than its initiators measure
REPLY_TTL_S = 300
PENDING_AGAIN_S = 10.0      # read the streams' unacknowledged entries again this often (see run_forever)


def next_fire(cron: str, after: float) -> float:
    """The first time after ``after`` that the cron expression names (local time)."""
    start = datetime.fromtimestamp(after).astimezone()
    return float(croniter(cron, start).get_next(datetime).timestamp())


def step_operation(step: Step) -> str | None:
    """What a step does to its devices, for the interlock: purge, op_mode, write, or None."""
    if step.kind in ("provision", "facts", "net"):
        return None
    if step.kind == "dut_state":
        return "purge" if step.cell.get("purge", True) else "op_mode"
    rw = step.workload.get("rw") if step.workload else None
    return interlock.destructive_operation("purge" if step.kind == "purge" else "fio", rw)


def new_run_id() -> str:
    return time.strftime("r%Y%m%d-") + uuid.uuid4().hex[:6]


def find_device(host: Host, device: str) -> Device | None:
    for d in host.devices:
        if device in (d.name, d.path, d.by_id) and d.declared:
            return d
    return None


def submission_problems(session: Session, host_name: str, devices: Sequence[str],
                        suite: Suite | None = None) -> list[Problem]:
    """What is wrong with running on (host, devices), judged by what agents registered."""
    problems = []
    if not devices:
        problems.append(Problem("--device", "no device named"))
    if suite is not None and suite.devices is not None and devices and len(devices) != suite.devices:
        problems.append(Problem("--device", f"suite {suite.name} takes {suite.devices} device(s); "
                                            f"{len(devices)} named"))
    host = session.get(Host, host_name)
    if host is None:
        known = ", ".join(session.scalars(select(Host.name).order_by(Host.name))) or "none registered"
        return [*problems, Problem("--host", f"unknown host {host_name!r} (known: {known})")]
    declared = ", ".join(f"{d.name} ({d.path})" for d in host.devices if d.declared) or "none"
    seen: dict[str, str] = {}
    named: list[Device] = []
    for device in devices:
        dev = find_device(host, device)
        if dev is None:
            problems.append(Problem("--device", f"{device!r} is not a declared DUT of host {host_name} "
                                                f"(declared: {declared})"))
        elif dev.path in seen:
            problems.append(Problem("--device", f"{device!r} names device {dev.path} twice in one device group "
                                                f"(also as {seen[dev.path]!r})"))
        else:
            seen[dev.path] = device
            named.append(dev)
    if suite is not None and named:
        # sizes against the registered capacity of the smallest named device (a group shares one job)
        smallest = min(named, key=lambda d: d.size_bytes)
        problems += capacity_problems(suite, smallest.size_bytes, f"device {smallest.name} ({smallest.path})")
    return problems


class Controller:
    def __init__(self, sessions: sessionmaker[Session], client: redis.Redis, dispatcher: Dispatcher,
                 artifacts: ArtifactStore, tuning: ControllerTuning | None = None,
                 clock: Callable[[], float] = time.time, notifier: Notifier | None = None,
                 provisioner: Provisioner | None = None) -> None:
        self.sessions, self.redis, self.dispatcher = sessions, client, dispatcher
        self.artifacts = artifacts
        self.tuning = tuning or ControllerTuning()
        self.clock = clock
        self.notifier = notifier
        self.provisioner = provisioner
        self._stopping = False
        self._asked: dict[str, float] = {}           # attempt id -> last stop/report request (throttle)
        self.last_pass_at: float | None = None     # time.time() of the last completed loop pass (/health)

    # --- loop --------------------------------------------------------------------------------

    def setup(self) -> None:
        self.intake.setup()           # groups on every stream; what a previous life read but did not acknowledge
        self.reconcile()

    @cached_property
    def intake(self) -> Intake:
        return Intake(self)

    def stop(self) -> None:
        """From a signal handler: the loop ends after this pass (or this backoff wait)."""
        self._stopping = True

    def run_forever(self, *, renew: Callable[[], None] | None = None, faults: FaultLog | None = None) -> None:
        """Pass after pass until stop(). ``renew``: extends the controller lease (raises LeaseLost, which
        ends the loop: another controller took over). A transient fault (orchestrator.transient: store
        full or locked, PostgreSQL or Redis down, Redis restarted empty) is waited out with backoff, logged
        once per interval in ``faults``; nothing is acknowledged meanwhile, and after it the streams are
        set up again (groups recreated, entries read but not acknowledged read again)."""
        faults = faults if faults is not None else FaultLog()
        backoff, ready, pending_at = BACKOFF_FIRST_S, False, time.monotonic()
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
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            backoff = BACKOFF_FIRST_S
            faults.recovered()

    def _note_skews(self, hosts: Sequence[Host]) -> None:
        """The hosts' clock skews (measured at registration) for the dispatcher's message expiry."""
        skews = getattr(self.dispatcher, "skew_s", None)
        if isinstance(skews, dict):
            fresh = {h.name: h.clock_skew_s for h in hosts if h.clock_skew_s is not None}
            if fresh != skews:
                skews.clear()
                skews.update(fresh)

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
        self._drain(pending=False, block_ms=self.tuning.block_ms)
        self.fire_schedules()
        self.schedule()
        self.watch()
        self.notify()
        self.last_pass_at = time.time()

    def _drain(self, *, pending: bool, block_ms: int | None = None) -> None:
        self.intake.drain(pending=pending, block_ms=block_ms)

    # --- events from agents ------------------------------------------------------------------------

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
            host = s.get(Host, ev.host)
            if host is not None:
                host.last_seen = self.clock()
                if ev.health:
                    health.apply(host, ev.health, self.clock(), self.tuning.quarantine_after)
        elif judge(s.get(Attempt, ev.attempt_id), ev.attempt_id, ev.type, source):
            if isinstance(ev, StepStarted):
                self._on_started(s, ev)
            elif isinstance(ev, StepEnded):
                self._on_ended(s, ev)
            else:
                self._on_unknown(s, ev)

    def _on_register(self, s: Session, ev: Register) -> None:
        host = s.get(Host, ev.host)
        now = self.clock()
        if host is None:
            host = Host(name=ev.host)
            s.add(host)
        host.agent_version, host.protocol_version = ev.agent_version, ev.v
        host.incompatible, host.clock_skew_s = "", ev.sent_at - now
        host.facts = ev.facts.model_dump(mode="json")
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
            dev.wipe_ok, dev.observed = dut.wipe_ok, dut.observed
            dev.declared = True
        if ev.health:
            health.apply(host, ev.health, now, self.tuning.quarantine_after)
        log.info("host registered: %s (agent %s, %d DUT(s))", ev.host, ev.agent_version, len(ev.duts),
                 extra={"host": ev.host})
        # Ask where every attempt we think is on this host stands: re-adoption and ends
        # reported while we were away come back through the normal event path.
        for att in self._active_attempts(s, ev.host):
            if att.id not in ev.running and att.step.kind not in LOCAL_KINDS:
                self.dispatcher.report(ev.host, ReportStep(attempt_id=att.id))

    def _active_attempts(self, s: Session, host: str | None = None) -> list[Attempt]:
        q = select(Attempt).where(Attempt.state.in_([str(x) for x in ACTIVE_STEP]))
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
        step.reason = f"retrying ({cause}): attempt {att.number} of {limit} failed: {reason}"
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
        log.info("fio %s (pid %s)", what, ev.pid, extra=self._ctx(att))

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
            why = ev.reason or f"fio exited with code {ev.exit_code}"
            self._end(att, why + (": " + " | ".join(tail) if tail else ""), cause="error")
        elif att.step.kind == "purge":
            self._move(att, StepState.SUCCEEDED, lost.strip(" ()"))
        elif att.step.kind == "net":
            try:
                self._store_net(s, att, stored.get("net.json", b""))
            except (ValueError, KeyError, TypeError) as e:
                self._end(att, f"net.json unreadable: {e}", cause="error")
            else:
                self._move(att, StepState.SUCCEEDED, lost.strip(" ()"))
        else:
            try:
                self._store_measurement(s, att, stored.get("fio.json", b""))
            except FioError as e:
                self._end(att, str(e), cause="error")
            else:
                self._move(att, StepState.SUCCEEDED, lost.strip(" ()"))
        step = att.step
        if step.kind == "precondition" and step.state == StepState.FAILED:
            preconditioning.fail_group(s, run, step, att.reason, self.clock())
        if step.kind == "net":
            self._close_net_group(s, run, step)
        log.info("step ended: %s %s", att.state, att.reason, extra=self._ctx(att))
        self._finish_run_if_done(run)

    def _store_measurement(self, s: Session, att: Attempt, raw: bytes) -> None:
        """Parse fio's output by step kind and store the result; a precondition round also
        decides whether another round follows."""
        step, run = att.step, att.step.run
        source = f"attempt {att.id} fio.json"
        per_device: dict[str, Any] | None = None
        series: dict[str, Any] | None = None
        # With --status-interval=1 (always for preconditioning; for every step of a live run) fio's output
        # is a stream of cumulative reports, the last the final one; the step keeps its per-second series.
        samples, metrics = parse_status_stream(raw, source=source)
        series = series_summary(samples)
        final = split_status_stream(raw, source=source)[-1]
        devices = run.devices or [run.device]
        bins = latency_bins(final, source=source)
        lat_hist: dict[str, Any] | None = dict(bins[0]) if bins else None
        if len(devices) > 1:
            groups = parse_fio_groups(final, source=source)
            per_device = {}
            for i, dev in enumerate(devices):
                g = groups.get(device_section(step.name, i))
                if g is None:
                    raise FioError(f"no result for device {dev} (job {device_section(step.name, i)})", path=source)
                per_device[dev] = g.model_dump(mode="json")
            if bins and lat_hist is not None:
                lat_hist["per_device"] = {dev: bins[1].get(device_section(step.name, i), {"read": [], "write": []})
                                          for i, dev in enumerate(devices)}
        self._store_result(s, att, metrics, per_device=per_device, series=series, lat_hist=lat_hist)
        if step.kind == "precondition":
            nxt = preconditioning.after_round(s, run, step, metrics, self.clock())
            if nxt is not None:
                run.steps.append(nxt)
                log.info("precondition round %d: not steady yet; round %d queued", step.round, nxt.round,
                         extra=self._ctx(att))
            else:
                log.info("precondition done after round %d", step.round, extra=self._ctx(att))

    def _store_result(self, s: Session, att: Attempt, metrics: StepMetrics, *,
                      per_device: dict[str, Any] | None = None, series: dict[str, Any] | None = None,
                      lat_hist: dict[str, Any] | None = None) -> None:
        """The result row with its provenance: the host's facts as registered, and for every device of the
        run what identifies it in a review (model, serial, firmware, capacity, driver: the declared DUT row,
        completed from the host's block-device facts matched by path or by-id link)."""
        host = s.get(Host, att.host)
        run = att.step.run
        blocks = [b for b in (host.facts.get("block_devices") or []) if isinstance(b, dict)] if host else []
        devices = []
        for path in run.devices or [run.device]:
            dev = find_device(host, path) if host else None
            entry: dict[str, Any] = {k: getattr(dev, k) for k in ("name", "path", "kind", "size_bytes", "model",
                                                                  "serial", "firmware", "by_id")} if dev else {}
            links = {path, *([dev.path, dev.by_id] if dev else [])} - {None}
            block = next((b for b in blocks if b.get("path") in links or links & set(b.get("by_id") or ())), {})
            for k in ("name", "path", "size_bytes", "model", "serial", "firmware", "driver", "transport",
                      "controller", "rotational"):
                if entry.get(k) is None and block.get(k) is not None:
                    entry[k] = block[k]
            devices.append(entry | {"path": entry.get("path") or path})
        c, r, w = metrics.combined, metrics.read, metrics.write
        provenance = {
            "host": host.facts if host else {},
            "agent_version": host.agent_version if host else None,
            "device": devices[0],
            "devices": devices,
            "op_mode": att.step.cell.get("op_mode", "stock"),
            "op_note": att.step.note,
            "suite_sha256": run.suite_sha256,
            "job_sha256": _sha(att.step.job_text),
            **self._provisioning_provenance(run, att.step),
        }
        s.add(Result(attempt_id=att.id, step_id=att.step_id, run_id=att.step.run_id,
                     read_iops=r.iops, write_iops=w.iops, iops=c.iops, read_bw_bytes=r.bw_bytes,
                     write_bw_bytes=w.bw_bytes, bw_bytes=c.bw_bytes, lat_mean_ns=c.lat_mean_ns,
                     lat_max_ns=c.lat_max_ns, lat_stddev_ns=c.lat_stddev_ns,
                     lat_p99_ns=c.percentiles_ns.get("p99"), runtime_ms=metrics.runtime_ms,
                     fio_version=metrics.fio_version, metrics=metrics.model_dump(mode="json"),
                     per_device=per_device, series=series, lat_hist=lat_hist, provenance=provenance,
                     created_at=self.clock()))

    def _store_net(self, s: Session, att: Attempt, raw: bytes) -> None:
        """One host's part of a network cell: a result whose figures are that host's totals (whole
        run), with every path's own figures in ``per_path``; the cell's window totals come later."""
        out = json.loads(raw or b"{}")
        # per path: its figures and its per-second series (the target samples NIC counters at 10 Hz)
        paths = {name: {k: v for k, v in p.items() if k != "series"}
                 | {"mtu": out["mtu"].get(name), "series": netgroups.per_second(p.get("series", []))}
                 for name, p in out["paths"].items()}
        total = out["total"]
        read = sum(p.get("read_gbps") or 0.0 for p in paths.values()) * 1e9 / 8
        write = sum(p.get("write_gbps") or 0.0 for p in paths.values()) * 1e9 / 8
        lat = [(p["lat_mean_ns"], p["iops"]) for p in paths.values() if p.get("lat_mean_ns") and p.get("iops")]
        host = s.get(Host, att.host)
        provenance = {"host": host.facts if host else {}, "agent_version": host.agent_version if host else None,
                      "role": out["role"], "tool": out["tool"], "mtu": out["mtu"],
                      "suite_sha256": att.step.run.suite_sha256,
                      "net_spec": {k: out.get(k) for k in ("start_at", "late_s", "iqn", "discovery") if k in out},
                      "failures": out.get("failures", [])}
        s.add(Result(attempt_id=att.id, step_id=att.step_id, run_id=att.step.run_id,
                     read_iops=0.0, write_iops=0.0, iops=total.get("iops") or 0.0, read_bw_bytes=read,
                     write_bw_bytes=write, bw_bytes=total["gbps"] * 1e9 / 8,
                     lat_mean_ns=sum(v * w for v, w in lat) / sum(w for _v, w in lat) if lat else None,
                     lat_max_ns=None, lat_stddev_ns=None, lat_p99_ns=None,
                     runtime_ms=int(total["seconds"] * 1000), fio_version=att.step.cell.get("tool", "fio"),
                     metrics={k: v for k, v in out.items() if k != "paths"}, per_path=paths, series=None,
                     provenance=provenance, created_at=self.clock()))
        att.fio_started_at = out.get("started_at") or att.fio_started_at

    def _close_net_group(self, s: Session, run: Run, step: Step) -> None:
        """Once every host's step of a network cell has ended: its skew and window totals (NetGroup)."""
        group = sorted((st for st in run.steps if st.seq == step.seq and st.kind == "net"), key=lambda st: st.id)
        if any(st.state not in TERMINAL_STEP for st in group) or s.scalar(
                select(NetGroup.id).where(NetGroup.run_id == run.id, NetGroup.seq == step.seq)) is not None:
            return
        s.flush()
        outputs: dict[str, dict[str, Any]] = {}
        reason = ""
        for st in group:
            att = st.attempts[-1] if st.attempts else None
            art = next((a for a in att.artifacts if a.name == "net.json"), None) if att else None
            if st.state != StepState.SUCCEEDED or art is None:
                reason = reason or f"{st.host}: {st.state} {st.reason}".strip()
                continue
            outputs[st.host] = json.loads(self.artifacts.read(art.path))
        agg: dict[str, Any] = {}
        if not reason:
            try:
                agg = netgroups.aggregate(outputs)
            except ValueError as e:
                reason = str(e)
        cell = {k: v for k, v in step.cell.items() if k not in ("role",)}
        s.add(NetGroup(run_id=run.id, seq=step.seq, name=step.name.rsplit("@", 1)[0], cell=cell,
                       hosts=[st.host for st in group], starts=agg.get("starts", {}), skew_ms=agg.get("skew_ms"),
                       window_start=agg.get("window_start"), window_end=agg.get("window_end"),
                       total=agg.get("total", {}) | ({"window_s": agg["window_s"], "skew_ok": agg["skew_ok"]}
                                                     if agg else {}),
                       per_path=agg.get("per_path", {}), per_host=agg.get("per_host", {}),
                       failures=agg.get("failures", []), complete=not reason, reason=reason, created_at=self.clock()))
        if agg:
            log.info("network cell %s: %.3f Gbps over %.1fs (skew %.1f ms)", step.name.rsplit("@", 1)[0],
                     agg["total"]["initiator_gbps"], agg["window_s"], agg["skew_ms"],
                     extra={"run": run.id, "step": step.name, "host": run.host})

    def _provisioning_provenance(self, run: Run, step: Step) -> dict[str, Any]:
        """What Ansible did to the DUTs before this result (methods, capacities) and the DUT facts
        (firmware, driver, health, wear) it recorded before the run; empty for suites that don't provision."""
        done = [st for st in run.steps if st.kind == "dut_state" and st.state == StepState.SUCCEEDED
                and st.cell.get("op_mode") == step.cell.get("op_mode") and (st.seq, st.round) < (step.seq, step.round)]
        out: dict[str, Any] = {}
        if done:
            out["provisioning"] = [st.note for st in done]
        before = next((st for st in run.steps if st.kind == "facts" and st.cell.get("phase") == "before"
                       and st.state == StepState.SUCCEEDED), None)
        art = next((a for a in before.attempts[-1].artifacts if a.name == "facts.json"), None) if before else None
        if art is not None:
            try:
                out["dut_facts"] = json.loads(self.artifacts.read(art.path))
            except (OSError, ValueError) as e:
                log.warning("DUT facts of run %s unreadable: %s", run.id, e, extra={"run": run.id})
        return out

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

    # --- commands from the CLI -----------------------------------------------------------------------

    def handle_command(self, raw: str | bytes) -> None:
        """Decode, apply and answer one command. One that cannot be decoded raises ProtocolError, after an error
        reply when it names a proper reply list (a wrong protocol version is answered at once)."""
        try:
            cmd = decode_command(raw)
        except ProtocolError as e:
            why, reply_to = command_refusal(raw, e)
            if reply_to is not None:
                self._reply(reply_to, Reply(ok=False, errors=(why,)))
            raise ProtocolError(why) from e
        if isinstance(cmd, Submit):
            reply = self.submit(cmd)
        elif isinstance(cmd, Cancel):
            reply = self.cancel(cmd)
        elif isinstance(cmd, ScheduleAdd | ScheduleRemove):
            reply = self.schedules(cmd)
        elif isinstance(cmd, Release):
            reply = self.release(cmd)
        else:
            reply = self.pause_or_resume(cmd)
        self._reply(cmd.reply_to, reply)

    def _reply(self, reply_to: str, reply: Reply) -> None:
        if valid_reply_to(reply_to):           # a reply list, never a stream, a queue or another key
            self.redis.lpush(reply_to, reply.model_dump_json())
            self.redis.expire(reply_to, REPLY_TTL_S)

    def submit(self, cmd: Submit) -> Reply:
        with self.sessions.begin() as s:
            return self._submit_in(s, cmd)

    def submission_problems(self, s: Session, cmd: Submit) -> tuple[Suite | None, list[Problem]]:
        problems: list[Problem] = []
        suite = None
        try:
            suite = parse_suite(cmd.suite_text, cmd.suite_source)
            problems += override_problems(suite, cmd.runtime_override, cmd.scale)
        except SuiteError as e:
            problems += e.problems
        if suite is not None and suite.network is not None:
            if cmd.devices:
                problems.append(Problem("--device", "a network suite measures paths, not DUTs: name no device"))
            problems += netgroups.net_problems(s, suite, cmd.host or None, cmd.initiators)
            return suite, problems
        if suite is None and not cmd.devices and cmd.initiators:
            return suite, problems        # a network suite that does not parse: its problems are the news
        problems += submission_problems(s, cmd.host, cmd.devices, suite)
        if suite is not None and suite.phases.provision and not problems:
            problems += self._provision_problems(s, cmd)
        return suite, problems

    def _provision_problems(self, s: Session, cmd: Submit) -> list[Problem]:
        if self.provisioner is None:
            return [Problem("phases.provision", "this suite provisions its DUTs through Ansible; the controller "
                                                "runs without an inventory (labctl controller --inventory DIR)")]
        host = s.get(Host, cmd.host)
        paths = [dev.path for d in cmd.devices if host and (dev := find_device(host, d)) is not None]
        return [Problem("--device", p) for p in self.provisioner.problems(cmd.host, paths)]

    def _submit_in(self, s: Session, cmd: Submit) -> Reply:
        """Validate and queue a run in the caller's transaction (submissions and schedule firings)."""
        if s.get(Run, cmd.run_id) is not None:
            return Reply(ok=True, run_id=cmd.run_id)     # a re-sent submission
        suite, problems = self.submission_problems(s, cmd)
        if problems or suite is None:
            err = SubmissionError(cmd.suite_source, problems)
            log.warning("submission %s rejected: %s", cmd.run_id, err.summary)
            return Reply(ok=False, errors=tuple(str(p) for p in problems))
        if suite.network is not None:
            return self._submit_network(s, cmd, suite)
        host = s.get(Host, cmd.host)
        assert host is not None
        paths = [dev.path for d in cmd.devices if (dev := find_device(host, d)) is not None]
        run = Run(id=cmd.run_id, suite_name=suite.name, suite_source=cmd.suite_source,
                  suite_text=cmd.suite_text, suite_sha256=suite.sha256, host=cmd.host,
                  device=paths[0], devices=paths, runtime_override=cmd.runtime_override, scale=cmd.scale,
                  live=cmd.live, priority=cmd.priority, not_before=cmd.not_before, expires_at=cmd.expires_at,
                  state=str(RunState.QUEUED), submitted_at=self.clock())
        for p in plan(suite, paths, runtime=cmd.runtime_override, scale=cmd.scale):
            first_round = p.kind == "precondition"
            run.steps.append(Step(id=f"{run.id}-s{p.seq:03d}" + ("-r001" if first_round else ""),
                                  seq=p.seq, round=1 if first_round else 0, kind=p.kind, name=p.name,
                                  cell=p.cell, note=p.note,
                                  workload=p.workload.model_dump(mode="json") if p.workload else None,
                                  job_text=p.job_text, state=str(StepState.PENDING)))
        s.add(run)
        log.info("run queued: suite %s, %d steps on %s:%s", suite.name, len(run.steps), cmd.host,
                 ",".join(paths), extra={"run": run.id, "host": cmd.host})
        return Reply(ok=True, run_id=cmd.run_id)

    def _submit_network(self, s: Session, cmd: Submit, suite: Suite) -> Reply:
        """A network run: its hosts are the target and the initiators; a step per host and cell."""
        net = suite.network
        assert net is not None
        hosts = net_hosts_of(suite, cmd.host or None, cmd.initiators)     # both present: checked on submission
        run = Run(id=cmd.run_id, suite_name=suite.name, suite_source=cmd.suite_source,
                  suite_text=cmd.suite_text, suite_sha256=suite.sha256, host=hosts.target, device="net",
                  devices=[], topology=netgroups.topology(suite, hosts), runtime_override=cmd.runtime_override,
                  scale=cmd.scale, live=cmd.live, priority=cmd.priority, not_before=cmd.not_before,
                  expires_at=cmd.expires_at, state=str(RunState.QUEUED), submitted_at=self.clock())
        index = {h: i for i, h in enumerate(hosts.all)}
        for p in plan(suite, [], runtime=cmd.runtime_override, scale=cmd.scale, net_hosts=hosts):
            assert p.host is not None and p.workload is not None
            run.steps.append(Step(id=f"{run.id}-s{p.seq:03d}-h{index[p.host]}", seq=p.seq, round=0, kind=p.kind,
                                  name=p.name, cell=p.cell, note=p.note, host=p.host,
                                  workload=p.workload.model_dump(mode="json"), job_text=p.job_text,
                                  state=str(StepState.PENDING)))
        s.add(run)
        log.info("network run queued: suite %s, %d steps; target %s, initiator(s) %s, path(s) %s", suite.name,
                 len(run.steps), hosts.target, ", ".join(hosts.initiators), ", ".join(net.paths),
                 extra={"run": run.id, "host": hosts.target})
        return Reply(ok=True, run_id=cmd.run_id)

    def cancel(self, cmd: Cancel) -> Reply:
        with self.sessions.begin() as s:
            run = s.get(Run, cmd.run_id)
            if run is None:
                return Reply(ok=False, errors=(f"unknown run {cmd.run_id!r}",))
            if run.state in TERMINAL_RUN:
                return Reply(ok=False, run_id=run.id, errors=(f"run {run.id} already ended ({run.state})",))
            run.reason = f"cancelled: {cmd.reason}"
            for step in run.steps:
                if step.state == StepState.PENDING:
                    step.state, step.reason, step.ended_at = str(StepState.CANCELLED), cmd.reason, self.clock()
                elif step.state in ACTIVE_STEP:
                    att = step.attempts[-1]
                    self.dispatcher.cancel(att.host, CancelStep(attempt_id=att.id, reason=cmd.reason))
            self._finish_run_if_done(run)
        return Reply(ok=True, run_id=cmd.run_id)

    def schedules(self, cmd: ScheduleAdd | ScheduleRemove) -> Reply:
        with self.sessions.begin() as s:
            existing = s.get(Schedule, cmd.name)
            if isinstance(cmd, ScheduleRemove):
                if existing is None:
                    return Reply(ok=False, errors=(f"no schedule {cmd.name!r}",))
                s.delete(existing)
                log.info("schedule %s removed", cmd.name)
                return Reply(ok=True)
            problems = [] if existing is None else [Problem("name", f"schedule {cmd.name!r} exists (rm it first)")]
            if not croniter.is_valid(cmd.cron):
                problems.append(Problem("--cron", f"{cmd.cron!r} is not a cron expression (5 fields: "
                                                  "minute hour day-of-month month day-of-week)"))
            _suite, more = self.submission_problems(s, cmd.submit)
            problems += more
            if problems:
                return Reply(ok=False, errors=tuple(str(p) for p in problems))
            now = self.clock()
            s.add(Schedule(name=cmd.name, cron=cmd.cron, expires_after_s=cmd.expires_after_s,
                           submit=cmd.submit.model_dump(mode="json", exclude={"run_id", "reply_to", "not_before",
                                                                               "expires_at"}),
                           next_fire_at=next_fire(cmd.cron, now), created_at=now))
            log.info("schedule %s added: %s", cmd.name, cmd.cron)
            return Reply(ok=True)

    def release(self, cmd: Release) -> Reply:
        with self.sessions.begin() as s:
            host = s.get(Host, cmd.host)
            if host is None:
                return Reply(ok=False, errors=(f"unknown host {cmd.host!r}",))
            if cmd.device is not None and health.device_of(host, cmd.device) is None:
                return Reply(ok=False, errors=(f"{cmd.device!r} is not a device of host {cmd.host}",))
            released = health.release(host, cmd.device)
            if not released:
                return Reply(ok=False, errors=(f"nothing of {cmd.host}{':' + cmd.device if cmd.device else ''} "
                                               "is quarantined",))
            log.info("released from quarantine: %s", ", ".join(released), extra={"host": host.name})
            return Reply(ok=True)

    def fire_schedules(self) -> None:
        """Queue a run for every schedule that is due; once per due time, however long the controller was away."""
        now = self.clock()
        with self.sessions.begin() as s:
            for sch in s.scalars(select(Schedule).where(Schedule.next_fire_at <= now)):
                run_id = new_run_id()
                cmd = Submit.model_validate({**sch.submit, "run_id": run_id, "reply_to": "",
                                             "expires_at": now + sch.expires_after_s if sch.expires_after_s else None})
                reply = self._submit_in(s, cmd)
                sch.last_fired_at, sch.next_fire_at = now, next_fire(sch.cron, now)
                if reply.ok:
                    sch.last_run_id, sch.last_error = run_id, ""
                    log.info("schedule %s fired: run %s", sch.name, run_id, extra={"run": run_id})
                else:
                    sch.last_error = "; ".join(reply.errors)
                    log.error("schedule %s could not submit: %s", sch.name, sch.last_error)

    def pause_or_resume(self, cmd: Pause | Resume) -> Reply:
        with self.sessions.begin() as s:
            run = s.get(Run, cmd.run_id)
            if run is None:
                return Reply(ok=False, errors=(f"unknown run {cmd.run_id!r}",))
            if isinstance(cmd, Pause):
                if run.state not in (RunState.QUEUED, RunState.RUNNING):
                    return Reply(ok=False, run_id=run.id, errors=(f"run {run.id} is {run.state}; only a queued or "
                                                                  "running run can be paused",))
                run.state = str(check_run(run.id, run.state, RunState.PAUSED))
                log.info("run paused: the running step finishes, no new step starts",
                         extra={"run": run.id, "host": run.host})
            else:
                if run.state != RunState.PAUSED:
                    return Reply(ok=False, run_id=run.id, errors=(f"run {run.id} is {run.state}, not paused",))
                target = RunState.RUNNING if run.started_at else RunState.QUEUED
                run.state = str(check_run(run.id, run.state, target))
                log.info("run resumed", extra={"run": run.id, "host": run.host})
            return Reply(ok=True, run_id=run.id)

    def notify(self) -> None:
        """Deliver end notifications the store says are due (see orchestrator.notify)."""
        if self.notifier is None or not self.notifier.enabled:
            return
        with self.sessions.begin() as s:
            due = s.scalars(select(Run).where(Run.state.in_([str(x) for x in TERMINAL_RUN]),
                                              Run.notified_at.is_(None)).limit(20)).all()
            for run in due:
                results = {r.step_id: r for r in s.scalars(select(Result).where(Result.run_id == run.id))}
                try:
                    self.notifier.send(payload(run, results))
                except OSError as e:
                    log.warning("notification of run %s failed (retried next pass): %s", run.id, e,
                                extra={"run": run.id})
                    return
                run.notified_at = self.clock()

    # --- scheduling and watching ---------------------------------------------------------------------

    def host_up(self, host: Host | None) -> bool:
        return bool(host and host.last_seen and self.clock() - host.last_seen <= self.tuning.heartbeat_timeout_s)

    def schedule(self) -> None:
        """Expire what can no longer start; dispatch what the scheduling rules allow (orchestrator.scheduling).

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
            summary = StepSummary.of(s, [r.id for r in runs])
            picked = [(run.id, step.id, step.name) for run, step in
                      decide(runs, hosts, self.clock(), self.host_up, summary).dispatch[:self.tuning.dispatch_batch]]
        for run_id, step_id, name in picked:
            try:
                self._schedule(only=(run_id, step_id))
            except Exception as e:
                if transient_kind(e) is not None:
                    raise
                why = f"could not be started: {type(e).__name__}: {str(e)[:500]}"
                log.error("step %s", why, extra={"run": run_id, "step": name})
                with self.sessions.begin() as s:
                    step = s.get(Step, step_id)
                    if step is None or step.state != StepState.PENDING:
                        continue
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
            # facts and health are large JSON the scheduler never reads: not loaded here; the devices' observed
            # state is (the interlock reads it for every start; deferred, it cost a query per start)
            hosts = {h.name: h for h in s.scalars(select(Host).options(
                defer(Host.facts), defer(Host.health), selectinload(Host.devices)))}
            summary = StepSummary.of(s, [r.id for r in runs])
            for run in runs:
                self._stop_if_quarantined(run, hosts, summary)
            live = [r for r in runs if r.state not in TERMINAL_RUN]
            decision = decide(live, hosts, now, self.host_up, summary)
            due = decision.dispatch[:self.tuning.dispatch_batch] if only is None else \
                [(run, step) for run, step in decision.dispatch if (run.id, step.id) == only]
            started = [(run, step, self._new_attempt(s, run, step, now))
                       for run, step in self._with_groups(due)
                       if not self._interlocked(run, step, hosts.get(run.host))]
            to_send = [msg for _run, step, msg in started if step.kind not in LOCAL_KINDS]
            local = [self._local_step(run, step, msg) for run, step, msg in started if step.kind in LOCAL_KINDS]
        self.dispatcher.start_many(to_send)       # after the commit: a crash here is healed by watch()
        for job in local:
            self._start_local(job)

    @staticmethod
    def _with_groups(picked: list[tuple[Run, Step]]) -> list[tuple[Run, Step]]:
        """A network step stands for its cell: every host's step of that cell starts in the same pass."""
        out = []
        for run, step in picked:
            if step.kind != "net":
                out.append((run, step))
                continue
            out += sorted(((run, st) for st in run.steps
                           if st.seq == step.seq and st.kind == "net" and st.state == StepState.PENDING),
                          key=lambda rs: rs[1].id)            # the target's (h0) first
        return out

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

    def _interlocked(self, run: Run, step: Step, host: Host | None) -> bool:
        """The safety interlock before dispatch, on what the agent last observed of each device: a purge
        or a writing step on a device that is mounted, in use, carries a signature (unless wipe_ok) or
        backs the root filesystem fails here, naming the device and the reasons; nothing is sent."""
        op = step_operation(step)
        if op is None or host is None:
            return False
        declared = [interlock.DeclaredDut(name=d.name, path=d.path, wipe_ok=d.wipe_ok)
                    for d in host.devices if d.declared]
        # a device not observed (an older agent) is judged by the agent at start
        observed = [interlock.observed_from_dict(dev.observed) for path in run.devices or [run.device]
                    if (dev := find_device(host, path)) is not None and dev.observed is not None]
        refusals = interlock.refusals(observed, declared, op)
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

    def _new_attempt(self, s: Session, run: Run, step: Step, now: float | None = None) -> StartStep:
        now = self.clock() if now is None else now
        if run.state == RunState.QUEUED:
            run.state, run.started_at = str(check_run(run.id, run.state, RunState.RUNNING)), now
        expected = (Workload.model_validate(step.workload).expected_seconds if step.workload
                    else self.tuning.purge_timeout_s)
        if step.kind == "net":
            expected += int(self.tuning.net_start_lead_s) + 1 + NET_TARGET_EXTRA_S
        number = len(step.attempts) + 1
        att = Attempt(id=f"{step.id}-a{number}", number=number, host=step.host or run.host, device=run.device,
                      state=str(StepState.DISPATCHED), dispatch_count=1, dispatched_at=now,
                      timeout_s=expected + self.tuning.step_timeout_margin_s)
        step.attempts.append(att)
        check_step("step", step.id, step.state, StepState.DISPATCHED)
        step.state = str(StepState.DISPATCHED)
        log.info("dispatching attempt %s", att.id, extra={"run": run.id, "step": step.name, "host": att.host})
        return self._start_msg(run, step, att)

    def _net_start(self, run: Run, step: Step, att: Attempt) -> NetStart:
        """The network part of a start: the whole cell starts ``net_start_lead_s`` after its dispatch (the
        attempts of a cell share their dispatch time); the target counts a little longer than the
        initiators measure, so their window is inside its own."""
        topo = run.topology or {}
        assert step.workload is not None
        seconds = Workload.model_validate(step.workload).expected_seconds
        role = step.cell.get("role", "initiator")
        return NetStart(role=role, paths=tuple(step.cell.get("net_paths", [])), mtu=int(step.cell["mtu"]),
                        tool=step.cell.get("tool", "fio"),
                        start_at=(att.dispatched_at or self.clock()) + self.tuning.net_start_lead_s,
                        seconds=seconds + (NET_TARGET_EXTRA_S if role == "target" else 0), iqn=topo.get("iqn"),
                        lun=topo.get("lun", 1), iscsi_port=topo.get("iscsi_port", 3260),
                        nbd_port=topo.get("nbd_port", 10809))

    def _start_msg(self, run: Run, step: Step, att: Attempt) -> StartStep:
        if step.kind == "net":
            return StartStep(run_id=run.id, step_id=step.id, attempt_id=att.id, host=att.host, action="net",
                             devices=(), job_name=step.name, kind="net", suite=run.suite_name,
                             workload=Workload.model_validate(step.workload), net=self._net_start(run, step, att),
                             timeout_s=att.timeout_s, dispatched_at=att.dispatched_at or self.clock())
        workload = Workload.model_validate(step.workload) if step.workload else None
        if workload is not None and step.cell.get("op_mode", "stock") != "stock":
            # an OP mode set on the device by dut_state: fio runs the cell's own footprint, not the emulation
            workload, step.note = opmode.step_workload(run, step, self.artifacts.read)
            if workload is not None:
                step.job_text = render_job(workload, run.devices or [run.device])
        return StartStep(run_id=run.id, step_id=step.id, attempt_id=att.id, host=att.host,
                         action="purge" if step.kind == "purge" else "fio",
                         devices=tuple(run.devices or [run.device]), job_name=step.name,
                         kind=step.kind, round=step.round, suite=run.suite_name,
                         workload=workload,
                         status_interval_s=1 if step.kind == "precondition" or (step.workload and run.live)
                         else None,
                         timeout_s=att.timeout_s, dispatched_at=att.dispatched_at or self.clock())

    def watch(self) -> None:
        now = self.clock()
        resend: list[StartStep] = []
        cancels: list[tuple[str, CancelStep]] = []
        with self.sessions.begin() as s:
            hosts = {h.name: h for h in s.scalars(select(Host))}
            self._note_skews(list(hosts.values()))
            touched: set[str] = set()
            for att in self._active_attempts(s):
                if att.step.kind in LOCAL_KINDS:
                    self._watch_local(s, att)
                    continue
                up = self.host_up(hosts.get(att.host))
                if att.state == StepState.RUNNING and not up:
                    row = hosts.get(att.host)
                    why = (f"host {att.host} is incompatible: {row.incompatible}" if row is not None
                           and row.incompatible else f"host {att.host} stopped heartbeating")
                    self._move(att, StepState.LOST, why)
                    att.lost_at = now
                    log.warning("step LOST: host silent for more than %.0fs", self.tuning.heartbeat_timeout_s,
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
        """At start: ask agents where every active attempt stands."""
        with self.sessions() as s:
            for att in self._active_attempts(s):
                if att.step.kind in LOCAL_KINDS:
                    continue                          # a playbook of an earlier life: watch() ends it
                log.info("asking for the state of attempt %s", att.id, extra=self._ctx(att))
                self.dispatcher.report(att.host, ReportStep(attempt_id=att.id))


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


__all__ = ["PROTOCOL_VERSION", "Controller", "new_run_id", "submission_problems"]
