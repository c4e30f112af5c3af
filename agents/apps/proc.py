"""Processes of an application step: identify a pid safely (pid + start ticks), stop a server, run a tool with
its output appended to a bounded file, wait on a condition, read back a file within a bound. Shared by the
drivers, appstep and cleanup."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

TOOL_OUT_MAX = 4 << 20        # tool.out / server.log: truncated from the front past this
TAIL_LINES = 12
POLL_S = 0.1


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (the start time in clock ticks since boot); None: no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat[stat.rindex(")") + 2:].split()[19])   # fields from 3 on; 22 is index 19
    except (ValueError, IndexError):
        return None


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].startswith("Z")


def alive(pid: int, ticks: int) -> bool:
    """The process ``pid`` started at ``ticks`` runs (a reused pid is not it)."""
    return start_ticks(pid) == ticks and not is_zombie(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_gone(pid: int, ticks: int, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while True:
        _reap(pid)
        if not alive(pid, ticks):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(POLL_S)


def stop_pid(pid: int, ticks: int, grace_s: float = 60.0, kill_wait_s: float = 10.0,
             sig: signal.Signals = signal.SIGTERM) -> str:
    """``sig`` to the process (only if pid and start ticks match), wait ``grace_s``, then SIGKILL. Returns what it
    did, one line."""
    if not alive(pid, ticks):
        return f"pid {pid}: not running"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if wait_gone(pid, ticks, grace_s):
        return f"pid {pid}: stopped ({sig.name})"
    if alive(pid, ticks):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if wait_gone(pid, ticks, kill_wait_s):
        return f"pid {pid}: killed (SIGKILL after {grace_s:.0f} s)"
    return f"pid {pid}: still running after SIGKILL"


class Oversized(ValueError):
    """A file the step reads back is over its bound (never read whole)."""


def read_bounded(path: os.PathLike[str] | str, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of ``path``: the agent reads back files others may have written (a spec, a state, a
    marker, an external workload's result). Oversized when larger; OSError as open() raises it."""
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Oversized(f"{path} exceeds {max_bytes} bytes")
    return data


def bound_file(path: Path, max_bytes: int = TOOL_OUT_MAX) -> None:
    """Keep the last ``max_bytes`` of ``path`` (truncate from the front)."""
    try:
        size = path.stat().st_size
        if size <= max_bytes:
            return
        with path.open("rb") as f:
            f.seek(size - max_bytes)
            data = f.read()
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"[...truncated...]\n" + data)
        os.replace(tmp, path)
    except OSError:
        pass


def tail(path: Path, lines: int = TAIL_LINES, max_bytes: int = 16384) -> str:
    """The last lines of a log, joined by " | " (for a one-line reason)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - max_bytes))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return " | ".join(x.strip() for x in text.splitlines()[-lines:] if x.strip())


def run_tool(argv: Sequence[str], out: Path, *, on_line: Callable[[str], None] | None = None,
             timeout_s: float | None = None, stop: threading.Event | None = None,
             env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``argv`` (never a shell), append its output (stdout + stderr) to ``out``, call ``on_line`` per line.
    Returns (exit code, the output's text, at most the last 1 MiB). The tool is killed if ``timeout_s`` passes
    or ``stop`` is set (exit code -9) and in any case if this raises (a cancel)."""
    keep: list[str] = []
    kept = 0
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", bufsize=1, env=env)
    killed = threading.Event()

    def watchdog() -> None:
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while proc.poll() is None:
            if (stop is not None and stop.is_set()) or (end is not None and time.monotonic() >= end):
                killed.set()
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                return
            time.sleep(POLL_S)

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        with out.open("a") as f:
            f.write(f"$ {' '.join(argv)}\n")
            assert proc.stdout is not None
            for line in proc.stdout:
                f.write(line)
                f.flush()
                keep.append(line)
                kept += len(line)
                while kept > (1 << 20) and len(keep) > 1:
                    kept -= len(keep.pop(0))
                if on_line is not None:
                    on_line(line.rstrip("\n"))
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        bound_file(out)
    return (-9 if killed.is_set() else rc), "".join(keep)


def socket_connectable(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(1.0)
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(cond: Callable[[], bool], timeout_s: float, *, died: Callable[[], str | None] | None = None,
             stop: threading.Event | None = None, what: str = "a condition") -> None:
    """Until ``cond()``; raises TimeoutError after ``timeout_s``, RuntimeError(reason) as soon as ``died()``
    returns a reason (the process we wait on ended)."""
    end = time.monotonic() + timeout_s
    while not cond():
        if died is not None and (why := died()) is not None:
            raise RuntimeError(why)
        if stop is not None and stop.is_set():
            raise RuntimeError(f"cancelled while waiting for {what}")
        if time.monotonic() >= end:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(POLL_S)
