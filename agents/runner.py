"""Launch, watch, re-adopt and collect fio processes, one attempt directory each.

Layout under the agent's state directory::

    attempts/<attempt_id>/
        start.json      the StartStep message that created it
        job.fio         the rendered job file (action fio)
        purge.sh        the purge commands (action purge): blkdiscard / punch-hole, declared DUTs only
        state.json      pid, process start time, launch time, deadline
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
from labcontract.fiojob import render_job
from labcontract.protocol import Artifact, StartStep, StepEnded

log = logging.getLogger(__name__)

_WRAPPER = '"$@" >fio.stdout 2>fio.stderr; echo $? >rc.tmp; mv rc.tmp rc'
ARTIFACTS = ("job.fio", "fio.json", "fio.stderr", "purge.sh", "net-spec.json", "net.json")


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

    def get(self, attempt_id: str) -> Attempt | None:
        path = self.root / attempt_id
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
        existing = self.get(msg.attempt_id)
        if existing is not None:
            return existing, False
        path = self.root / msg.attempt_id
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
            if msg.workload is None:
                raise FioError(f"attempt {msg.attempt_id}: a fio step without a workload")
            job = render_job(msg.workload, [d.path for d in duts])   # byte for byte the planned job
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
        launched = time.time()
        self._children[msg.attempt_id] = proc
        if self.on_exit is not None:
            notify = self.on_exit
            threading.Thread(target=lambda: (proc.wait(), notify()), name=f"wait-{proc.pid}", daemon=True).start()
        state = {"pid": proc.pid, "pgid": proc.pid, "start_ticks": _proc_start_ticks(proc.pid),
                 "launched_at": launched, "deadline": launched + msg.timeout_s,
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
        deadline = attempt.state().get("deadline")
        return isinstance(deadline, (int, float)) and time.time() > deadline

    def collect(self, attempt: Attempt, host: str) -> StepEnded:
        """The end report of an attempt whose fio is no longer running."""
        st = attempt.state()
        rc = attempt.exit_code
        arts = []
        for name in ARTIFACTS:
            f = attempt.file(name)
            if f.exists():
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
        return StepEnded(host=host, attempt_id=attempt.attempt_id, outcome=outcome, reason=reason,
                         exit_code=rc, fio_started_at=launched if isinstance(launched, float) else None,
                         fio_ended_at=ended, artifacts=tuple(arts))

    def mark_reported(self, attempt: Attempt) -> None:
        attempt.file("reported").write_text(f"{time.time()}\n")
