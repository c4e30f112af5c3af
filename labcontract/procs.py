"""Stopping a process group the lab started in a session of its own (tgtd, nbdkit, iscsi-perf, fio)."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen[bytes], first: signal.Signals = signal.SIGTERM, wait: float = 1.5) -> None:
    """Send ``first`` to the process group, then SIGKILL if it has not ended within ``wait`` seconds."""
    for sig in (first, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
