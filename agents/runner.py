"""Launch, watch, re-adopt and collect fio processes, one attempt directory each.

Layout under the agent's state directory::

    attempts/<attempt_id>/
        start.json      the StartStep message that created it
        job.fio         the rendered job file (action fio)
        purge.sh        the purge commands (action purge): blkdiscard / punch-hole, declared DUTs only
        state.json      pid, process start time, launch time (wall and monotonic, boot id), timeout
        fio.json        fio --output (json+)
        fio.stdout      fio.stderr
        rc              fio's exit code, written by the wrapper shell when fio exits
        cancelled       present when the attempt was cancelled (holds the reason)
        reported        present once the StepEnded event was published

fio runs under a tiny ``sh`` wrapper in its own session (so it survives an agent restart);
the wrapper records fio's exit code, which lets a restarted agent report the result of a
fio that finished while it was away.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from labcontract.errors import FioError
from labcontract.facts import DeclaredDut, NetPathDecl
from labcontract.fiojob import JobSection, check_job, render_job
from labcontract.protocol import ARTIFACT_MAX_BYTES, Artifact, StartStep, StepEnded

log = logging.getLogger(__name__)

_WRAPPER = '"$@" >fio.stdout 2>fio.stderr; echo $? >rc.tmp; mv rc.tmp rc'
ARTIFACTS = ("job.fio", "fio.json", "fio.stderr", "purge.sh", "net-spec.json", "net.json")
STDERR_TAIL_BYTES = 1 << 20      # fio.stderr is sent as its last MiB


def purge_script(duts: Sequence[DeclaredDut]) -> str:
    """Commands that return each DUT to a fresh-out-of-box state as far as the host can without
    vendor tools: discard (TRIM/UNMAP) a block device, punch out a file-backed DUT's blocks."""
    lines = ["set -eu"]
    for d in duts:
        if d.kind == "block":
            lines.append(f"blkdiscard --force {shlex.quote(d.path)}")
        else:
            lines.append(f"fallocate --punch-hole --offset 0 --length {d.size_bytes} {shlex.quote(d.path)}")
    return "\n".join(lines) + "\n"
KILL_GRACE_S = 5.0


def net_spec(msg: StartStep, paths: Sequence[NetPathDecl], *, manage_mtu: bool) -> str:
    """The input of ``agents.netstep``: the message's network part with its paths resolved."""
    if msg.net is None or msg.workload is None:
        raise FioError(f"attempt {msg.attempt_id}: a network step without its net part or workload")
    return json.dumps({**msg.net.model_dump(mode="json"), "host": msg.host, "manage_mtu": manage_mtu,
                       "workload": msg.workload.model_dump(mode="json"),
                       "paths": [p.model_dump(mode="json") for p in paths]}, indent=1)


SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def boot_id() -> str:
    """This boot's id: monotonic clock readings are comparable only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class CheckedJob:
    """A fio job as rendered for a start, parsed back: its sections and the declared DUTs it writes."""

    text: str
    sections: tuple[JobSection, ...]
    written: tuple[DeclaredDut, ...]


def same_device(a: str, b: str) -> bool:
    """Whether two paths name one device (symlinks such as /dev/disk/by-id resolved)."""
    return a == b or os.path.realpath(a) == os.path.realpath(b)


def checked_job(msg: StartStep, duts: Sequence[DeclaredDut]) -> CheckedJob:
    """Render the job of a fio step and check the very text fio will read: only the options render_job
    emits, and every filename one of ``duts`` (the declared DUTs this step names). FioError otherwise."""
    if msg.workload is None:
        raise FioError(f"attempt {msg.attempt_id}: a fio step without a workload")
    text = render_job(msg.workload, [d.path for d in duts])
    sections = check_job(text)
    written: list[DeclaredDut] = []
    for sec in sections:
        for name in sec.filenames:
            dut = next((d for d in duts if same_device(name, d.path)), None)
            if dut is None:
                raise FioError(f"job file refused: job {sec.name} opens {name}, not a declared DUT this step names "
                               f"({', '.join(d.path for d in duts) or 'none'})")
            if sec.writes and dut not in written:
                written.append(dut)
    return CheckedJob(text, sections, tuple(written))


def _proc_start_ticks(pid: int) -> int | None:
    """Start time of a process (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass
class Attempt:
    """An attempt directory on disk."""

    attempt_id: str
    path: Path

    def file(self, name: str) -> Path:
        return self.path / name

    def start_message(self) -> StartStep:
        return StartStep.model_validate_json(self.file("start.json").read_text())

    def state(self) -> dict[str, object]:
        try:
            data: dict[str, object] = json.loads(self.file("state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data

    @property
    def reported(self) -> bool:
        return self.file("reported").exists()

    @property
    def exit_code(self) -> int | None:
        try:
            return int(self.file("rc").read_text().strip())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        st = self.state()
        pid, ticks = st.get("pid"), st.get("start_ticks")
        if not isinstance(pid, int):
            return False
        return ticks is not None and _proc_start_ticks(pid) == ticks


class FioRunner:
    """Owns the attempts directory. Not thread-safe: the agent serialises calls."""

    def __init__(self, state_dir: Path, fio_binary: str = "fio", on_exit: Callable[[], None] | None = None) -> None:
        self.root = state_dir / "attempts"
        self.root.mkdir(parents=True, exist_ok=True)
        self.fio = shutil.which(fio_binary) or fio_binary
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self.on_exit = on_exit      # called from a waiter thread the moment a child exits

    def attempt_path(self, attempt_id: str) -> Path:
        """The attempt's directory, inside the attempts directory (FioError for an id that is not path-safe)."""
        if not isinstance(attempt_id, str) or not SAFE_ID.match(attempt_id) or ".." in attempt_id:
            raise FioError(f"attempt id {str(attempt_id)[:80]!r} is not path-safe")
        path = self.root / attempt_id
        root = self.root.resolve()
        if path.resolve().parent != root:
            raise FioError(f"attempt id {attempt_id!r} resolves outside the state directory ({root})")
        return path

    def get(self, attempt_id: str) -> Attempt | None:
        try:
            path = self.attempt_path(attempt_id)
        except FioError:
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

    def start(self, msg: StartStep, duts: Sequence[DeclaredDut], net_paths: Sequence[NetPathDecl] = (),
              *, manage_mtu: bool = False) -> tuple[Attempt, bool]:
        """Launch the attempt's process (fio, the purge script, or a network step); idempotent.
        ``duts`` are the declared DUTs the message names, already checked by the agent; ``net_paths``
        the declared paths a network step names. Returns (attempt, launched_now)."""
        path = self.attempt_path(msg.attempt_id)      # before anything is created
        existing = self.get(msg.attempt_id)
        if existing is not None:
            return existing, False
        job_check = checked_job(msg, duts) if msg.action == "fio" else None   # before anything is created
        tmp = self.root / f".{msg.attempt_id}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        if msg.action == "purge":
            job = purge_script(duts)
            (tmp / "purge.sh").write_text(job)
            argv = ["/bin/sh", "purge.sh"]
        elif msg.action == "net":
            job = net_spec(msg, net_paths, manage_mtu=manage_mtu)
            (tmp / "net-spec.json").write_text(job)
            argv = [sys.executable, "-m", "agents.netstep", "net-spec.json", "net.json"]
        else:
            assert job_check is not None
            job = job_check.text           # byte for byte the planned job, as checked
            (tmp / "job.fio").write_text(job)
            argv = [self.fio, "--output-format=json+", "--output=fio.json"]
            if msg.status_interval_s:
                argv.append(f"--status-interval={msg.status_interval_s}")
            argv.append("job.fio")
        (tmp / "start.json").write_text(msg.model_dump_json())
        tmp.rename(path)   # the attempt exists from here on: a redelivered start is a no-op
        attempt = Attempt(msg.attempt_id, path)
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", _WRAPPER, "lab-step", *argv],
                cwd=path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
                env={**os.environ, "PATH": f"{Path(self.fio).parent}:{os.environ.get('PATH', '')}"},
            )
        except OSError as e:
            (path / "rc").write_text("127\n")
            (path / "fio.stderr").write_text(f"cannot start fio: {e}\n")
            raise FioError(f"cannot start {argv[0]}: {e}") from e
        launched, launched_mono = time.time(), time.monotonic()
        self._children[msg.attempt_id] = proc
        if self.on_exit is not None:
            notify = self.on_exit
            threading.Thread(target=lambda: (proc.wait(), notify()), name=f"wait-{proc.pid}", daemon=True).start()
        state = {"pid": proc.pid, "pgid": proc.pid, "start_ticks": _proc_start_ticks(proc.pid),
                 "launched_at": launched, "launched_mono": launched_mono, "boot_id": boot_id(),
                 "timeout_s": msg.timeout_s, "deadline": launched + msg.timeout_s,
                 "job_sha256": hashlib.sha256(job.encode()).hexdigest()}
        (path / "state.json").write_text(json.dumps(state))
        return attempt, True

    def running(self, attempt: Attempt) -> bool:
        proc = self._children.get(attempt.attempt_id)
        if proc is not None:
            if proc.poll() is None:
                return True
            del self._children[attempt.attempt_id]
            return False
        return attempt.alive()

    def signal(self, attempt: Attempt, sig: int) -> None:
        st = attempt.state()
        pgid = st.get("pgid")
        if isinstance(pgid, int) and self.running(attempt):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)

    def stop(self, attempt: Attempt, reason: str, *, timeout: bool = False) -> None:
        """Stop fio (SIGTERM, then SIGKILL after a grace period) and mark why (a timeout, or a cancel)."""
        if timeout:
            attempt.file("timeout").write_text(reason + "\n")
        attempt.file("cancelled").write_text(reason + "\n")
        self.signal(attempt, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        while self.running(attempt) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.running(attempt):
            self.signal(attempt, signal.SIGKILL)
        deadline = time.monotonic() + KILL_GRACE_S
        while self.running(attempt) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.running(attempt):
            attempt.file("stopped_at").write_text(f"{time.time()}\n")   # its end, when the wrapper wrote no rc

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

    @staticmethod
    def elapsed(attempt: Attempt) -> float | None:
        """Seconds since the attempt's process was launched, on this host's clocks (None: not recorded)."""
        st = attempt.state()
        mono, boot, launched = st.get("launched_mono"), st.get("boot_id"), st.get("launched_at")
        if isinstance(mono, (int, float)) and boot and boot == boot_id():
            return time.monotonic() - mono
        if isinstance(launched, (int, float)):
            return time.time() - launched
        return None

    def collect(self, attempt: Attempt, host: str) -> StepEnded:
        """The end report of an attempt whose fio is no longer running."""
        st = attempt.state()
        rc = attempt.exit_code
        arts, too_big = [], []
        for name in ARTIFACTS:
            f = attempt.file(name)
            if not f.exists():
                continue
            size = f.stat().st_size
            if name == "fio.stderr" and size > STDERR_TAIL_BYTES:     # a chatty fio: its last words are the news
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
        elif rc is None:
            outcome, reason = "error", "fio ended without recording an exit code (killed with its wrapper)"
        else:
            outcome, reason = "exited", ""
        if too_big:
            left = f"over the {ARTIFACT_MAX_BYTES >> 20} MiB limit of an artifact, not sent: {', '.join(too_big)}"
            outcome, reason = ("error", left) if outcome == "exited" else (outcome, f"{reason}; {left}"[-4096:])
        return StepEnded(host=host, attempt_id=attempt.attempt_id, outcome=outcome, reason=reason,
                         exit_code=rc, fio_started_at=launched if isinstance(launched, float) else None,
                         fio_ended_at=ended, artifacts=tuple(arts))

    def mark_reported(self, attempt: Attempt) -> None:
        attempt.file("reported").write_text(f"{time.time()}\n")
