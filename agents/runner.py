"""Launch, watch, re-adopt and collect fio processes, one attempt directory each.

Layout under the agent's state directory::

    attempts/<attempt_id>/
        start.json      the StartStep message that created it
        job.fio         the rendered job file (action fio)
        purge.sh        the purge commands (action purge): blkdiscard / punch-hole, declared DUTs only
        net-spec.json   app-spec.json   a network / application step's input (actions net, app)
        state.json      pid, process start time, launch time (wall and monotonic, boot id), timeout,
                        the action and its kind's command_version
        fio.json        fio --output (json+)
        fio.stdout      fio.stderr
        rc              fio's exit code, written by the wrapper shell when fio exits
        host-cpu.start  host-cpu.end   the ``cpu`` lines of /proc/stat just before and just after the process (Linux's
                        wrapper; labcontract.hostcpu)
        drive-temp.json    the DUTs' temperature every second while it ran (agents.drivetemp), when they have a sensor
        host-power.json    the host's power while the process ran, read from its BMC (agents.power), when the kind
                        samples it (StepKind.samples_power) and the agent has a BMC declared
        drive-health.json  the DUTs' health (NVMe smart-log / smartctl) before the launch and after the end, when the
                        kind reads it (StepKind.reads_health) and the agent has a source (agents.drivehealth)
        cancelled       present when the attempt was cancelled (holds the reason)
        released        present once the kind's cleanup ran after the process ended (what it did)
        cleanup-error   the kind's cleanup failed (why); it is tried again before the next report
        reported        present once the StepEnded event was published

What an action writes and launches, which files go back and what is released after it is its step kind's
(:mod:`agents.kinds`); the runner only runs it.

The process runs under a tiny wrapper in its own session (so it survives an agent restart);
the wrapper records fio's exit code, which lets a restarted agent report the result of a
fio that finished while it was away. How it is started, recognised again (pid + start time) and ended is
the platform's (:mod:`agents.platform`: an ``sh`` wrapper and a session on Linux, a Python wrapper in a
detached process group on Windows).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from agents import kinds
from agents.attempt import Attempt
from agents.drivehealth import HealthSource
from agents.drivetemp import TempSampler
from agents.kinds import Host, StepKind, Targets, same_device
from agents.kinds.fio import CheckedJob, checked_job
from agents.kinds.net import net_spec
from agents.kinds.purge import purge_script
from agents.platform import Platform, current
from agents.power import PowerSampler, RedfishPower, restarted
from labcontract.drivehealth import ARTIFACT as HEALTH_ARTIFACT
from labcontract.drivehealth import DriveHealth, HealthReading, parse_drive_health
from labcontract.drivetemp import ARTIFACT as TEMP_ARTIFACT
from labcontract.errors import LabError, StepError
from labcontract.facts import DeclaredDut, NetPathDecl
from labcontract.power import ARTIFACT as POWER_ARTIFACT
from labcontract.protocol import ARTIFACT_MAX_BYTES, Artifact, StartStep, StepEnded

log = logging.getLogger(__name__)

__all__ = ["ARTIFACTS", "Attempt", "CheckedJob", "StepRunner", "checked_job", "net_spec", "purge_script",
           "same_device"]

STDERR_TAIL_BYTES = 1 << 20      # fio.stderr (and a kind's other tails) is sent as its last MiB


KILL_GRACE_S = 5.0
ARTIFACTS = kinds.all_artifacts()     # every kind's (each attempt sends its own kind's: StepKind.artifacts)


SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def write_durable(path: Path, text: str) -> None:
    """``text`` on the disk, with the directory entries that lead to it, before this returns: a power loss right
    after a launch keeps the attempt's record and its boot id (seen on the VM lab: without it the record of an
    attempt cut by a power loss was lost with the page cache, and its end said only "killed with its wrapper")."""
    with path.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    if hasattr(os, "O_DIRECTORY"):             # POSIX: the directories too; Windows has no handle for them
        for d in (path.parent, path.parent.parent):
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def boot_id() -> str:
    """This boot's id: monotonic clock readings are comparable only within one boot."""
    return current().boot_id()


class StepRunner:
    """Owns the attempts directory. Not thread-safe: the agent serialises calls."""

    def __init__(self, state_dir: Path, fio_binary: str = "fio", on_exit: Callable[[], None] | None = None,
                 platform: Platform | None = None) -> None:
        self.platform = platform or current()
        self.root = state_dir / "attempts"
        self.root.mkdir(parents=True, exist_ok=True)
        self.state_dir = state_dir
        self.fio = shutil.which(fio_binary) or fio_binary
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._releasing: dict[str, threading.Thread] = {}   # slow cleanups under way (StepKind.slow_cleanup)
        self.on_exit = on_exit      # called from a waiter thread the moment a child exits
        self.health: HealthSource | None = None   # reads the DUTs' health around a step (None: not read)
        self.power: RedfishPower | None = None    # the host's BMC, read during a step (None: not measured)
        self._power: dict[str, PowerSampler] = {}   # samplers of the attempts under way
        self._temps: dict[str, TempSampler] = {}    # the DUTs' temperature, per attempt under way (agents.drivetemp)

    def attempt_path(self, attempt_id: str) -> Path:
        """The attempt's directory, inside the attempts directory (StepError for an id that is not path-safe)."""
        if not isinstance(attempt_id, str) or not SAFE_ID.fullmatch(attempt_id) or ".." in attempt_id:
            raise StepError(f"attempt id {str(attempt_id)[:80]!r} is not path-safe")
        path = self.root / attempt_id
        root = self.root.resolve()
        if path.resolve().parent != root:
            raise StepError(f"attempt id {attempt_id!r} resolves outside the state directory ({root})")
        return path

    def get(self, attempt_id: str) -> Attempt | None:
        try:
            path = self.attempt_path(attempt_id)
        except StepError:
            return None
        return Attempt(attempt_id, path) if (path / "start.json").exists() else None

    def pending(self) -> list[Attempt]:
        """Attempts whose end has not been reported yet (running, or ended while away)."""
        out = []
        for p in sorted(self.root.iterdir()):
            a = Attempt(p.name, p)
            if (p / "start.json").exists() and not a.reported:
                out.append(a)
        return out

    def start(self, msg: StartStep, duts: Sequence[DeclaredDut] = (), net_paths: Sequence[NetPathDecl] = (),
              *, manage_mtu: bool = False, targets: Targets | None = None,
              host: Host | None = None, health_before: Sequence[HealthReading] | None = None) -> tuple[Attempt, bool]:
        """Launch the attempt's process (what its action's step kind launches); idempotent.
        ``targets`` are what the agent resolved and checked for the message (:meth:`StepKind.targets`);
        without them, ``duts`` (the declared DUTs the message names, already checked) and ``net_paths`` (the
        declared paths a network step names). ``health_before``: the DUTs' health read just before
        (:meth:`health_before`; the agent reads it before it takes its lock, so that a drive slow to answer never
        holds a heartbeat); None: read here. Returns (attempt, launched_now)."""
        path = self.attempt_path(msg.attempt_id)      # before anything is created
        existing = self.get(msg.attempt_id)
        if existing is not None:
            return existing, False
        kind = kinds.get(msg.action)
        if targets is None:
            targets = Targets(duts=tuple(duts), net_paths=tuple(net_paths), app=msg.app)
        if host is None:   # what the kinds know of the agent's configuration (the daemon passes its own)
            host = Host(name=msg.host, state_dir=self.state_dir, manage_mtu=manage_mtu, fio=self.fio,
                        platform=self.platform)
        off_platform = kinds.platform_refusal(kind, host.platform.name)
        if off_platform:
            raise StepError(off_platform)
        launch = kind.launch(msg, targets, host)       # checked before anything is created
        job, argv = launch.job, list(launch.argv)
        tmp = self.root / f".{msg.attempt_id}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name, text in launch.files.items():
            (tmp / name).write_text(text)
        if health_before is None:
            health_before = self.health_before(kind, targets)
        if health_before:
            (tmp / HEALTH_ARTIFACT).write_text(DriveHealth(before=tuple(health_before)).model_dump_json())
        (tmp / "start.json").write_text(msg.model_dump_json())
        tmp.rename(path)   # the attempt exists from here on: a redelivered start is a no-op
        attempt = Attempt(msg.attempt_id, path)
        try:
            proc = self.platform.start_detached(
                argv, cwd=path,
                env={**os.environ, "PATH": f"{Path(self.fio).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
            )
        except OSError as e:
            (path / "rc").write_text("127\n")
            (path / "fio.stderr").write_text(f"cannot start fio: {e}\n")
            raise StepError(f"cannot start {argv[0]}: {e}") from e
        launched, launched_mono = time.time(), time.monotonic()
        self._children[msg.attempt_id] = proc
        if self.power is not None and kind.samples_power:     # in its own thread: a BMC never delays the step
            self._power[msg.attempt_id] = PowerSampler(self.power, done=lambda: proc.poll() is not None).start()
        if kind.samples_power and targets.duts:                # the same: a sensor never delays the step
            self._temps[msg.attempt_id] = TempSampler([(d.name, d.path) for d in targets.duts],
                                                      done=lambda: proc.poll() is not None).start()
        if self.on_exit is not None:
            notify = self.on_exit
            threading.Thread(target=lambda: (proc.wait(), notify()), name=f"wait-{proc.pid}", daemon=True).start()
        state = {"pid": proc.pid, "pgid": proc.pid, "start_ticks": self.platform.start_token(proc.pid),
                 "launched_at": launched, "launched_mono": launched_mono, "boot_id": self.boot,
                 "timeout_s": msg.timeout_s, "deadline": launched + msg.timeout_s,
                 "job_sha256": hashlib.sha256(job.encode()).hexdigest(),
                 "action": kind.action, "command_version": kind.command_version}
        write_durable(path / "state.json", json.dumps(state))
        return attempt, True

    @functools.cached_property
    def boot(self) -> str:
        """This boot's id, read once (it cannot change while the agent runs; on Windows each read is a
        PowerShell query, and the timeout check asks for it on every poll)."""
        return self.platform.boot_id()

    def running(self, attempt: Attempt) -> bool:
        proc = self._children.get(attempt.attempt_id)
        if proc is not None:
            if proc.poll() is None:
                return True
            del self._children[attempt.attempt_id]
            return False
        return attempt.alive(self.platform)

    def signal(self, attempt: Attempt, sig: int) -> None:
        """End the attempt's process group: at once for SIGKILL, else asking it to (the platform's way)."""
        self._end(attempt, force=sig == getattr(signal, "SIGKILL", -1))

    def _end(self, attempt: Attempt, *, force: bool) -> None:
        st = attempt.state()
        pgid = st.get("pgid")
        if isinstance(pgid, int) and self.running(attempt):
            (self.platform.kill if force else self.platform.terminate)(pgid, st.get("start_ticks"))

    def stop(self, attempt: Attempt, reason: str, *, timeout: bool = False) -> None:
        """Stop fio (SIGTERM, then SIGKILL after a grace period) and mark why (a timeout, or a cancel)."""
        if timeout:
            attempt.file("timeout").write_text(reason + "\n")
        attempt.file("cancelled").write_text(reason + "\n")
        self._end(attempt, force=False)
        deadline = time.monotonic() + KILL_GRACE_S
        while self.running(attempt) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.running(attempt):
            self._end(attempt, force=True)
        deadline = time.monotonic() + KILL_GRACE_S
        while self.running(attempt) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.running(attempt):
            attempt.file("stopped_at").write_text(f"{time.time()}\n")   # its end, when the wrapper wrote no rc
            if not self.releasing(attempt):     # a slow cleanup goes on in its own thread
                self.release(attempt)

    @staticmethod
    def kind_of(attempt: Attempt) -> StepKind | None:
        """The step kind of an attempt (None: its start record is unreadable, or names no known kind)."""
        try:
            return kinds.get(attempt.start_message().action)
        except (OSError, ValueError, LabError):
            return None

    def releasing(self, attempt: Attempt) -> bool:
        """Whether the attempt's slow cleanup (:attr:`StepKind.slow_cleanup`) is under way: started here, once its
        process has ended, in a thread of its own that wakes the agent when it is done. The end is reported
        after it (:meth:`collect` then finds it done); meanwhile heartbeats go on."""
        aid = attempt.attempt_id
        thread = self._releasing.get(aid)
        if thread is not None:
            return thread.is_alive()
        if attempt.file("released").exists() or self.running(attempt):
            return False
        if attempt.file("cleanup-error").exists():   # tried and failed: the next report tries again (collect),
            return False                              # never a thread restarted by whoever asks next
        kind = self.kind_of(attempt)
        if kind is None or not (kind.slow_cleanup or self._health_after_due(attempt)):
            return False

        def run() -> None:       # a drive slow to answer its health log waits here too, never in a heartbeat's way
            self.release(attempt)
            self.read_health_after(attempt)
            if self.on_exit is not None:
                self.on_exit()
        thread = threading.Thread(target=run, name=f"release-{aid}", daemon=True)
        self._releasing[aid] = thread
        thread.start()
        return True

    def release(self, attempt: Attempt) -> str:
        """Run the attempt's kind's cleanup once its process has ended (idempotent: once it succeeded, never
        again). Returns why it failed ("" when it did not, or had nothing to do); never raises."""
        if attempt.file("released").exists() or self.running(attempt):
            return ""
        kind = self.kind_of(attempt)
        if kind is None:
            return ""
        try:
            done = kind.cleanup(attempt.path)
        except Exception as e:         # a failing cleanup must never keep the end from being reported
            why = f"cleanup failed: {e}"[:2000]
            log.error("attempt %s: %s", attempt.attempt_id, why)
            attempt.file("cleanup-error").write_text(why + "\n")
            return why
        for line in done:
            log.info("attempt %s: cleanup: %s", attempt.attempt_id, line)
        attempt.file("released").write_text("".join(f"{line}\n" for line in done))
        attempt.file("cleanup-error").unlink(missing_ok=True)
        return ""

    def overdue(self, attempt: Attempt) -> bool:
        """Whether the attempt ran past its ``timeout_s``, measured on this host's monotonic clock from its
        launch (never against a time the controller computed: their clocks may differ). After a restart of
        the agent within the same boot, the recorded monotonic launch still holds; otherwise the elapsed
        time is taken from this host's own recorded launch wall time."""
        elapsed = self.elapsed(attempt)
        timeout = attempt.state().get("timeout_s")
        if elapsed is None or not isinstance(timeout, (int, float)):
            deadline, launched = attempt.state().get("deadline"), attempt.state().get("launched_at")
            if not isinstance(deadline, (int, float)) or not isinstance(launched, (int, float)):
                return False
            timeout, elapsed = deadline - launched, time.time() - launched    # a state.json of an older agent
        return elapsed > timeout

    def elapsed(self, attempt: Attempt) -> float | None:
        """Seconds since the attempt's process was launched, on this host's clocks (None: not recorded)."""
        st = attempt.state()
        mono, boot, launched = st.get("launched_mono"), st.get("boot_id"), st.get("launched_at")
        if isinstance(mono, (int, float)) and boot and boot == self.boot:
            return time.monotonic() - mono
        if isinstance(launched, (int, float)):
            return time.time() - launched
        return None

    def collect(self, attempt: Attempt, host: str) -> StepEnded:
        """The end report of an attempt whose process is no longer running (its kind's cleanup run first)."""
        done = self._releasing.pop(attempt.attempt_id, None)
        if done is not None and attempt.file("cleanup-error").exists():   # its thread tried: never again here
            cleanup_failed = attempt.file("cleanup-error").read_text().strip()
        else:
            cleanup_failed = self.release(attempt)
        self.read_health_after(attempt)
        st = attempt.state()
        rc = attempt.exit_code
        self._write_power(attempt, kind=self.kind_of(attempt))
        self._write_temps(attempt)
        arts, too_big = [], []
        kind = self.kind_of(attempt)
        names, tails = (kind.artifacts, kind.tails) if kind is not None else (kinds.all_artifacts(), ("fio.stderr",))
        for name in names:
            f = attempt.file(name)
            if not f.exists():
                continue
            size = f.stat().st_size
            if name in tails and size > STDERR_TAIL_BYTES:     # a chatty process: its last words are the news
                with f.open("rb") as fh:
                    fh.seek(size - STDERR_TAIL_BYTES)
                    tail = fh.read()
                arts.append(Artifact.of(name, f"[first {size - len(tail)} bytes left out]\n".encode() + tail))
            elif size > ARTIFACT_MAX_BYTES:        # an event could not carry it: the end is reported without it
                too_big.append(f"{name} ({size} bytes)")
            else:
                arts.append(Artifact.of(name, f.read_bytes()))
        launched = st.get("launched_at")
        ended = attempt.file("rc").stat().st_mtime if attempt.file("rc").exists() else None
        if ended is None and attempt.file("stopped_at").exists():
            ended = float(attempt.file("stopped_at").read_text())
        cancelled = attempt.file("cancelled")
        if attempt.file("timeout").exists():
            outcome, reason = "timeout", attempt.file("timeout").read_text().strip()
        elif cancelled.exists():
            outcome, reason = "cancelled", cancelled.read_text().strip()
        elif rc is None and st.get("boot_id") and st.get("boot_id") != self.boot:
            outcome, reason = "error", ("the host restarted while fio ran (its boot id changed: a power loss or a "
                                        "reset); fio left no exit code")
        elif rc is None:
            outcome, reason = "error", "fio ended without recording an exit code (killed with its wrapper)"
        else:
            outcome, reason = "exited", ""
        if cleanup_failed:
            outcome, reason = ("error", cleanup_failed) if outcome == "exited" else (
                outcome, f"{reason}; {cleanup_failed}"[-4096:])
        if too_big:
            left = f"over the {ARTIFACT_MAX_BYTES >> 20} MiB limit of an artifact, not sent: {', '.join(too_big)}"
            outcome, reason = ("error", left) if outcome == "exited" else (outcome, f"{reason}; {left}"[-4096:])
        return StepEnded(host=host, attempt_id=attempt.attempt_id, outcome=outcome, reason=reason,
                         exit_code=rc, fio_started_at=launched if isinstance(launched, float) else None,
                         fio_ended_at=ended, artifacts=tuple(arts))

    def health_before(self, kind: StepKind, targets: Targets) -> tuple[HealthReading, ...]:
        """The DUTs' health now, for a step of ``kind`` on ``targets`` (empty: the kind reads none, or the agent
        has no source)."""
        if self.health is None or not kind.reads_health or not targets.duts:
            return ()
        return self.health.read([(d.name, d.path) for d in targets.duts])

    def _health_after_due(self, attempt: Attempt) -> bool:
        """Whether the attempt's drive health still lacks its after-reading."""
        f = attempt.file(HEALTH_ARTIFACT)
        if self.health is None or not f.exists():
            return False
        try:
            return not parse_drive_health(f.read_bytes(), str(f)).after
        except (OSError, LabError):
            return False

    def read_health_after(self, attempt: Attempt) -> None:
        """Add the after-readings to the attempt's ``drive-health.json`` (once; never raises: a reading that fails
        is recorded with its error by the source, an unreadable file is left as it is)."""
        f = attempt.file(HEALTH_ARTIFACT)
        if self.health is None or not f.exists():
            return
        try:
            health = parse_drive_health(f.read_bytes(), str(f))
            if health.after:
                return
            after = self.health.read([(r.name, r.path) for r in health.before])
            text = health.model_copy(update={"after": after}).model_dump_json()
            tmp = attempt.file(HEALTH_ARTIFACT + ".tmp")
            tmp.write_text(text)
            tmp.replace(f)
        except (OSError, LabError) as e:
            log.warning("attempt %s: drive health after the step not recorded: %s", attempt.attempt_id, e)

    def _write_power(self, attempt: Attempt, kind: StepKind | None) -> None:
        """The attempt's ``host-power.json`` from its sampler (once; never raises, never waits for the BMC). An
        attempt that has no sampler (the agent restarted while it ran) says its power was not measured."""
        sampler = self._power.pop(attempt.attempt_id, None)
        f = attempt.file(POWER_ARTIFACT)
        if f.exists() or self.power is None or kind is None or not kind.samples_power:
            if sampler is not None:
                sampler.stop()
            return
        ended: float | None = None
        with contextlib.suppress(OSError):
            ended = attempt.file("rc").stat().st_mtime if attempt.file("rc").exists() else None
        power = sampler.result(ended) if sampler is not None else restarted(self.power)
        try:
            f.write_text(power.model_dump_json())
        except OSError as e:
            log.warning("attempt %s: host power not recorded: %s", attempt.attempt_id, e)

    def _write_temps(self, attempt: Attempt) -> None:
        """The attempt's ``drive-temp.json`` from its sampler (once; none when no DUT has a sensor; never raises)."""
        sampler = self._temps.pop(attempt.attempt_id, None)
        temps = sampler.result() if sampler is not None else None
        f = attempt.file(TEMP_ARTIFACT)
        if temps is None or f.exists():
            return
        try:
            f.write_text(temps.model_dump_json())
        except OSError as e:
            log.warning("attempt %s: drive temperatures not recorded: %s", attempt.attempt_id, e)

    def mark_reported(self, attempt: Attempt) -> None:
        attempt.file("reported").write_text(f"{time.time()}\n")
