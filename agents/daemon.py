"""The agent: registers its host, starts/cancels/reports fio attempts, heartbeats.

Task handlers (called from the Celery worker) return at once; a monitor thread watches the
running fio processes and publishes their end. All state needed to survive a restart is on
local disk (see :mod:`agents.runner`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from agents import health, kinds
from agents.drivehealth import HelperSource
from agents.drivehealth import smart_check as drive_smart_check
from agents.live import LiveReader
from agents.runner import SAFE_ID, Attempt, StepRunner
from agents.workloads import Workloads
from labcontract import __version__, interlock
from labcontract.errors import LabError, ProtocolError, StepError
from labcontract.facts import DeclaredDut, HostFacts, NetPathDecl, Observation
from labcontract.live import LiveStatus
from labcontract.protocol import (
    CancelStep,
    Event,
    HealthCheck,
    Heartbeat,
    Register,
    ReportStep,
    StartStep,
    StepEnded,
    StepStarted,
    StepUnknown,
    decode,
    events_stream,
)
from labcontract.telemetry import LIVE_KEY_PREFIX

log = logging.getLogger(__name__)

EVENTS_MAXLEN = 200_000
DEFAULT_APP_MOUNT_ROOT = Path("/run/storagelab/apps")
LIVE_TTL_S = 5
_LIVE_LIST = TypeAdapter(list[LiveStatus])


SLOW_PART_S = 5.0    # a monitor pass's part slower than this is logged: the heartbeats share the thread


@dataclass(frozen=True)
class AgentConfig:
    host: str
    broker_url: str
    state_dir: Path
    duts: tuple[DeclaredDut, ...]
    heartbeat_s: float = 3.0
    reregister_every: int = 20       # with every Nth heartbeat a full Register (a new controller learns us)
    poll_s: float = 0.2
    fio_binary: str = "fio"
    live_s: float = 1.0              # live status (exporter, lab:live:<host>) refreshed this often
    health_every: int = 1            # health checks ride on every Nth heartbeat (0: none)
    smart_every: int = 20            # ... and SMART / NVMe smart-log on every Nth heartbeat
    net_paths: tuple[NetPathDecl, ...] = ()   # declared network paths (network steps name them)
    manage_mtu: bool = False         # a network step sets its paths' MTU (else it only checks it)
    workloads: Workloads | None = None   # declared external workloads (--app-workloads FILE)
    # application steps mount the DUT at <app_mount_root>/<attempt id>: a directory outside the state directory
    # that every OS user may traverse (PostgreSQL runs as its own user); /run: gone at reboot, as mounts are
    app_mount_root: Path | None = DEFAULT_APP_MOUNT_ROOT


class EventPublisher:
    """Appends events to the host's own events stream (``lab:events:<host>``, the only one its Redis user may
    write; the controller reads them all). ``send`` is the only way out of the agent."""

    def __init__(self, client: Any, host: str) -> None:
        self.client, self.stream = client, events_stream(host)

    def send(self, event: Event) -> None:
        self.client.xadd(self.stream, {"data": event.model_dump_json()}, maxlen=EVENTS_MAXLEN,
                         approximate=True)


class LivePublisher:
    """Writes the host's running attempts' live status to ``lab:live:<host>`` (a JSON list of
    :class:`~labcontract.live.LiveStatus`, expiring after a few seconds) for ``labctl watch``."""

    def __init__(self, client: Any, host: str, ttl_s: int = LIVE_TTL_S) -> None:
        self.client, self.key, self.ttl_s = client, LIVE_KEY_PREFIX + host, ttl_s

    def send(self, statuses: Sequence[LiveStatus]) -> None:
        if statuses:
            self.client.set(self.key, _LIVE_LIST.dump_json(list(statuses)), ex=self.ttl_s)
        else:
            self.client.delete(self.key)


@dataclass
class Agent:
    config: AgentConfig
    facts: HostFacts
    runner: StepRunner
    publish: Callable[[Event], None]
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _wake: threading.Event = field(default_factory=threading.Event)
    publish_live: Callable[[Sequence[LiveStatus]], None] | None = None
    # read by the exporter (another thread); each is replaced as a whole, never mutated
    live: tuple[LiveStatus, ...] = ()            # running attempts' live status, refreshed each live_s
    running_ids: tuple[str, ...] = ()            # attempts whose process runs
    last_heartbeat_at: float = 0.0               # time.time() of the last heartbeat/register published
    last_error_at: float = 0.0                   # time.time() of the last error or refusal logged
    started_at: float = field(default_factory=time.time)
    _last_heartbeat: float = 0.0
    _beats: int = 0
    _running: tuple[Attempt, ...] = ()
    _last_live: float = float("-inf")
    _live_published: bool = True                 # so that a stale key of an earlier life is removed
    _live_reader: LiveReader = field(default_factory=LiveReader)
    _smart: tuple[HealthCheck, ...] = ()         # the last SMART results, sent with the next heartbeat
    _smart_thread: threading.Thread | None = None
    _register_thread: threading.Thread | None = None   # the periodic full Register, built off the heartbeat's path

    @property
    def host(self) -> str:
        return self.config.host

    def _log(self, msg: StartStep | Attempt | None) -> logging.LoggerAdapter[logging.Logger]:
        if isinstance(msg, Attempt):
            try:
                msg = msg.start_message()
            except (OSError, ValueError):
                msg = None
        run, step = (msg.run_id, msg.step_id) if isinstance(msg, StartStep) else ("-", "-")
        return logging.LoggerAdapter(log, {"run": run, "step": step, "host": self.host})

    # --- life cycle ---------------------------------------------------------------------

    def register(self) -> None:
        """Announce the host; re-adopt fio processes left from an earlier life of the agent."""
        with self._lock:
            pending = self.runner.pending()
            for attempt in pending:
                if self.runner.running(attempt):
                    st = attempt.state()
                    self._log(attempt).info("re-adopted running fio pid %s (attempt %s)",
                                            st.get("pid"), attempt.attempt_id)
                    self.publish(self._started_event(attempt, adopted=True))
            self.publish(self._register_event(tuple(a.attempt_id for a in pending)))
            self.last_heartbeat_at = time.time()
        self.check_attempts()

    def note_error(self) -> None:
        """An error or refusal was logged (``lab_agent_last_error_timestamp_seconds``)."""
        self.last_error_at = time.time()

    def _register_event(self, running: tuple[str, ...], checks: tuple[HealthCheck, ...] = ()) -> Register:
        duts = tuple(d.model_copy(update={"observed": Observation.of(self.observe(d))}) for d in self.config.duts)
        facts = self.facts.model_copy(update={"step_kinds": kinds.announced(self.runner.platform.name)})
        return Register(host=self.host, agent_version=__version__, facts=facts, duts=duts,
                        running=running, health=checks)

    def kind_host(self) -> kinds.Host:
        """What step kinds know of this host (its declarations; never anything from the wire)."""
        return kinds.Host(name=self.host, state_dir=self.config.state_dir, duts=self.config.duts,
                          net_paths=self.config.net_paths, manage_mtu=self.config.manage_mtu,
                          fio=self.runner.fio, workloads=self.config.workloads,
                          app_mount_root=self.config.app_mount_root, platform=self.runner.platform)

    def health_checks(self) -> tuple[HealthCheck, ...]:
        every = self.config.health_every
        if every <= 0 or self._beats % every:
            return ()
        smart_due = self.config.smart_every > 0 and self._beats % self.config.smart_every == 1 % self.config.smart_every
        if smart_due and (self._smart_thread is None or not self._smart_thread.is_alive()):
            # smartctl / nvme may hang on a failing device: never in the heartbeat's way
            self._smart_thread = threading.Thread(target=self._refresh_smart, name="smart", daemon=True)
            self._smart_thread.start()
        smart, self._smart = self._smart, ()
        return health.run_checks(self.host, self.config.state_dir, self.config.fio_binary, self.config.duts) + smart

    def _refresh_smart(self) -> None:
        source = self.runner.health
        if isinstance(source, HelperSource):        # not root: the root helper reads them (agents.drivehealth)
            readings = source.read([(d.name, d.path) for d in self.config.duts])
            self._smart = tuple(drive_smart_check(r) for r in readings)
            return
        self._smart = tuple(c for d in self.config.duts if (c := health.smart_check(d)) is not None)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """A child exited: check attempts now rather than at the next poll."""
        self._wake.set()

    def monitor(self) -> None:
        """Loop of the monitor thread: end detection, timeouts, heartbeats, live status. A Redis outage
        is logged once when it starts, at most once per ``every_s`` while it lasts (with a count) and
        once when it ends (a heartbeat got through; with its duration), never a traceback per pass;
        another failure of a part is logged with its traceback at most once per ``every_s``."""
        import redis

        every_s = 30.0
        outage: list[float] = []             # [start, last logged, failed passes] while Redis is away
        logged: dict[str, float] = {}        # part -> when its last unexpected failure was logged
        while not self._stop.is_set():
            # each part on its own: a redis blip in the heartbeat must not freeze the live status
            away, beat = False, self._last_heartbeat
            for part in (self.check_attempts, self.heartbeat_if_due, self.update_live):
                began = time.monotonic()
                try:
                    part()
                    took = time.monotonic() - began
                    if took > SLOW_PART_S:      # the heartbeat waits behind it: a controller may judge us silent
                        log.warning("monitor pass part %s took %.1fs (heartbeats wait behind it; every %.0fs due)",
                                    part.__name__, took, self.config.heartbeat_s)
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as e:
                    away, now = True, time.monotonic()
                    if not outage:
                        outage[:] = [now, now, 0.0]
                        self.note_error()
                        log.warning("redis unavailable (%s: %s); retrying every %.1fs", type(e).__name__, e,
                                    self.config.poll_s)
                    elif now - outage[1] >= every_s:
                        outage[1] = now
                        log.warning("redis still unavailable after %.0fs (%d failed passes; %s)",
                                    now - outage[0], int(outage[2]), e)
                except Exception:  # keep the thread alive; logged with its traceback, once per interval
                    now = time.monotonic()
                    self.note_error()
                    if now - logged.get(part.__name__, -every_s) >= every_s:
                        logged[part.__name__] = now
                        log.exception("monitor pass failed (%s)", part.__name__)
            if away:
                outage[2] += 1
            elif outage and self._last_heartbeat != beat:       # a heartbeat reached redis again
                log.warning("redis available again after %.1fs (%d failed passes)", time.monotonic() - outage[0],
                            int(outage[2]))
                outage.clear()
            self._wake.wait(self.config.poll_s)
            self._wake.clear()

    def heartbeat_if_due(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= self.config.heartbeat_s:
            self._beats += 1
            with self._lock:
                running = tuple(a.attempt_id for a in self.runner.pending())
            checks = self.health_checks()
            # the heartbeat goes out now, always: the periodic full Register observes every DUT (wipefs, blkid,
            # lsblk), which took past the controller's heartbeat timeout on a loaded host with fio running (its
            # steps were then declared LOST), so it is built and sent by a thread of its own
            self.publish(Heartbeat(host=self.host, running=running, health=checks))
            if self._beats % self.config.reregister_every == 0 and (
                    self._register_thread is None or not self._register_thread.is_alive()):
                self._register_thread = threading.Thread(target=self._reregister, name="reregister", daemon=True)
                self._register_thread.start()
            self._last_heartbeat = now
            self.last_heartbeat_at = time.time()

    def _reregister(self) -> None:
        """The periodic full Register (a new controller learns us; the DUTs' observations refreshed); never raises:
        a failure is logged and the next one tries again."""
        try:
            with self._lock:
                running = tuple(a.attempt_id for a in self.runner.pending())
            self.publish(self._register_event(running))
        except Exception:  # a thread of its own: logged, the heartbeats go on
            self.note_error()
            log.exception("periodic register failed")

    def update_live(self, *, force: bool = False) -> None:
        """Refresh the running attempts' live status every ``live_s`` (at once when the set of
        running attempts changed), and publish it to ``lab:live:<host>`` while something runs."""
        running = self._running
        ids = tuple(a.attempt_id for a in running)
        now = time.monotonic()
        if not force and ids == self.running_ids and now - self._last_live < self.config.live_s:
            return
        self._last_live = now
        wall = time.time()
        statuses = tuple(s for s in (self._live_reader.read(a, self.host, wall) for a in running) if s is not None)
        self._live_reader.forget(set(ids))
        self.live, self.running_ids = statuses, ids
        if self.publish_live is not None and (statuses or self._live_published):
            self.publish_live(statuses)
            self._live_published = bool(statuses)

    def check_attempts(self) -> None:
        with self._lock:
            running = []
            for attempt in self.runner.pending():
                if self.runner.running(attempt):
                    if self.runner.overdue(attempt):
                        self.note_error()
                        self._log(attempt).warning("attempt %s passed its timeout; stopping fio",
                                                   attempt.attempt_id)
                        self.runner.stop(attempt, "step timeout reached; fio stopped by the agent", timeout=True)
                        if not self.runner.running(attempt):
                            continue          # its end is reported at the next pass, as before
                    running.append(attempt)
                    continue
                self._report_end(attempt)
            self._running = tuple(running)

    def _report_end(self, attempt: Attempt) -> None:
        if self.runner.releasing(attempt):
            return                 # its slow cleanup goes on in a thread; it wakes the monitor, which reports then
        ended = self.runner.collect(attempt, self.host)
        kind = self.runner.kind_of(attempt)
        if kind is not None and kind.refresh_observations:
            self.publish(self._register_event(tuple(a.attempt_id for a in self.runner.pending())))
        self.publish(ended)
        self.runner.mark_reported(attempt)
        self._log(attempt).info("attempt %s ended: %s exit=%s %s", attempt.attempt_id, ended.outcome,
                                ended.exit_code, ended.reason)

    def _started_event(self, attempt: Attempt, *, adopted: bool = False) -> StepStarted:
        st = attempt.state()
        pid, launched, sha = st.get("pid"), st.get("launched_at"), st.get("job_sha256")
        return StepStarted(host=self.host, attempt_id=attempt.attempt_id,
                           pid=pid if isinstance(pid, int) else -1,
                           fio_started_at=launched if isinstance(launched, float) else time.time(),
                           job_sha256=sha if isinstance(sha, str) else "", adopted=adopted)

    # --- task handlers -------------------------------------------------------------------

    def held_by_another(self, msg: StartStep, targets: kinds.Targets) -> str:
        """Why a new attempt may not start on its DUTs: another attempt of this host still runs on one of them, or
        still releases it (an application step's server and mount). The controller's reservations keep that from
        happening; this holds when they cannot (a host declared lost while its step went on)."""
        mine = {os.path.realpath(d.path) for d in targets.duts}
        if not mine or self.runner.get(msg.attempt_id) is not None:     # nothing to hold, or a redelivery
            return ""
        for other in self.runner.pending():
            if not (self.runner.running(other) or self.runner.releasing(other)):
                continue
            try:
                refs = other.start_message().devices
            except (OSError, ValueError):
                continue
            theirs = set()
            for ref in refs:
                with contextlib.suppress(LabError):
                    theirs.add(os.path.realpath(self.dut_for(ref).path))
            if mine & theirs:
                return (f"DUT {', '.join(sorted(mine & theirs))} is still held by attempt {other.attempt_id} on this "
                        "host (running, or releasing its server and mount)")
        return ""

    def dut_for(self, device: str) -> DeclaredDut:
        """The declared DUT ``device`` names (its name, path or by-id link; a symlink to it resolved)."""
        return kinds.find_dut(device, self.kind_host())

    def start_step(self, payload: dict[str, Any]) -> None:
        """A start request: validated as strictly as a suite (ids path-safe, every value that reaches the job
        file typed and bounded); refused with the reason, never anything created, for anything else."""
        try:
            msg: StartStep = decode(StartStep, payload)
        except ProtocolError as e:
            raw_id = payload.get("attempt_id") if isinstance(payload, dict) else None
            self.note_error()
            self._log(None).error("rejected start of attempt %r: %s", str(raw_id)[:140], e)
            if isinstance(raw_id, str) and SAFE_ID.fullmatch(raw_id) and ".." not in raw_id:
                self.publish(StepEnded(host=self.host, attempt_id=raw_id, outcome="refused",
                                       reason=f"start refused: {e}"[:4000]))
            return          # an id that is not path-safe names no attempt the controller could know
        logger = self._log(msg)
        targets = kinds.Targets()
        if msg.host != self.host:
            refused = f"message for host {msg.host} reached host {self.host}"
        else:
            targets, refused = self.targets_for(msg)
        if refused:
            self.note_error()
            logger.error("refused attempt %s: %s", msg.attempt_id, refused)
            self.publish(StepEnded(host=self.host, attempt_id=msg.attempt_id, outcome="refused", reason=refused))
            return
        try:          # the drives' health before the step, read before the lock (a heartbeat never waits on it)
            health_before = self.runner.health_before(kinds.get(msg.action), targets)
        except StepError:
            health_before = ()
        with self._lock:
            held = self.held_by_another(msg, targets)
            if held:
                self.note_error()
                logger.error("refused attempt %s: %s", msg.attempt_id, held)
                self.publish(StepEnded(host=self.host, attempt_id=msg.attempt_id, outcome="refused", reason=held))
                return
            try:
                attempt, launched = self.runner.start(msg, manage_mtu=self.config.manage_mtu, targets=targets,
                                                     host=self.kind_host(), health_before=health_before)
            except StepError as e:
                self.note_error()
                logger.error("attempt %s could not start: %s", msg.attempt_id, e)
                attempt_or_none = self.runner.get(msg.attempt_id)
                if attempt_or_none is not None:
                    self._report_end(attempt_or_none)
                else:            # refused before its directory existed (the job file check, an unsafe id)
                    self.publish(StepEnded(host=self.host, attempt_id=msg.attempt_id, outcome="refused",
                                           reason=str(e)[:4000]))
                return
            if launched:
                where = (", ".join(d.path for d in targets.duts) if targets.duts
                         else "path(s) " + ", ".join(p.name for p in targets.net_paths))
                logger.info("attempt %s started %s pid %s on %s", msg.attempt_id, msg.action,
                            attempt.state().get("pid"), where)
                self.publish(self._started_event(attempt))
            else:
                logger.info("attempt %s already known; start ignored (redelivery)", msg.attempt_id)
                self._report(attempt)

    def observe(self, dut: DeclaredDut) -> interlock.ObservedState:
        """The DUT as the interlock sees it, its filesystem marked when this lab made it (agents.kinds.app)."""
        from agents.labfs import lab_filesystem_on

        obs = self.runner.platform.observe_dut(dut.path)
        fs = any(sig.kind == "filesystem" for sig in obs.signatures)
        return dataclasses.replace(obs, lab_fs=True) if fs and lab_filesystem_on(self.config.state_dir, dut) else obs

    def targets_for(self, msg: StartStep) -> tuple[kinds.Targets, str]:
        """What ``msg`` names, resolved against this host's declarations and checked by its step kind (the
        DUTs, through the interlock; a fio step's rendered job file; a network step's paths; an application
        step's workload), and why it is refused ("" when it is not)."""
        try:
            kind = kinds.get(msg.action)
        except StepError as e:
            return kinds.Targets(), str(e)
        host = self.kind_host()
        off_platform = kinds.platform_refusal(kind, host.platform.name)   # before any Linux tool is reached
        if off_platform:
            return kinds.Targets(), off_platform
        return kind.targets(msg, host)

    def cancel_step(self, payload: dict[str, Any]) -> None:
        msg: CancelStep = decode(CancelStep, payload)
        with self._lock:
            attempt = self.runner.get(msg.attempt_id)
            if attempt is None:
                self.publish(StepUnknown(host=self.host, attempt_id=msg.attempt_id))
                return
            if self.runner.running(attempt):
                self._log(attempt).info("cancelling attempt %s: %s", msg.attempt_id, msg.reason)
                self.runner.stop(attempt, msg.reason)
        self.check_attempts()

    def report_step(self, payload: dict[str, Any]) -> None:
        msg: ReportStep = decode(ReportStep, payload)
        with self._lock:
            attempt = self.runner.get(msg.attempt_id)
            if attempt is None:
                self.publish(StepUnknown(host=self.host, attempt_id=msg.attempt_id))
            else:
                self._report(attempt)

    def _report(self, attempt: Attempt) -> None:
        """Tell the controller where an attempt stands (running, or its end again)."""
        if self.runner.running(attempt):
            self.publish(self._started_event(attempt, adopted=True))
        else:
            self.publish(self.runner.collect(attempt, self.host))
            if not attempt.reported:
                self.runner.mark_reported(attempt)


def make_worker_app(agent: Agent, broker_url: str) -> Any:
    """The Celery app of one agent: three tasks on the queue ``agent.<host>``."""
    from celery import Celery

    from labcontract.protocol import LAB_TASKS, TASK_CANCEL, TASK_REPORT, TASK_START
    from labcontract.transport import celery_settings

    app = Celery(f"agent-{agent.host}", set_as_current=False)
    app.conf.update(celery_settings(broker_url, host=agent.host))   # its queue, its unacked keys (ACL)

    def _guard(fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        def run(msg: dict[str, Any]) -> None:
            try:
                fn(msg)
            except LabError as e:
                agent.note_error()
                log.error("[host %s] %s", agent.host, e)
        run.__name__ = fn.__name__
        return run

    app.task(name=TASK_START, ignore_result=True)(_guard(agent.start_step))
    app.task(name=TASK_CANCEL, ignore_result=True)(_guard(agent.cancel_step))
    app.task(name=TASK_REPORT, ignore_result=True)(_guard(agent.report_step))
    # Only the lab's own tasks run here: Celery registers its built-in ones (celery.accumulate, celery.chord_unlock,
    # celery.backend_cleanup, celery.group...) when the app is finalized, and a broker user allowed to push on this
    # queue could run them. Finalized now and unregistered, a message naming one is refused as an unregistered task.
    app.finalize()
    for name in [n for n in app.tasks if n not in LAB_TASKS]:
        app.tasks.unregister(name)
    return app


def run_agent(agent: Agent, broker_url: str, *, loglevel: str = "INFO",
              extra_steps: Sequence[Callable[[], None]] = ()) -> None:
    """Register, start the monitor thread, and consume the host's queue until stopped."""
    agent.register()
    monitor = threading.Thread(target=agent.monitor, name="agent-monitor", daemon=True)
    monitor.start()
    app = make_worker_app(agent, broker_url)
    worker = app.Worker(pool="solo", concurrency=1, loglevel=loglevel,
                        hostname=f"agent@{agent.host}", without_gossip=True, without_mingle=True,
                        without_heartbeat=True, quiet=True)
    try:
        worker.start()
    finally:
        agent.stop()
        monitor.join(timeout=5)
