"""One agent per state directory: an exclusive lock on ``<state_dir>/agent.lock``, held for the agent's life.

Two agents on one state directory would both watch its attempts: one launches a process, the other finds the
attempt before its record is written, takes it for ended and reports it "without an exit code" (seen in CI when a
test started a second agent beside the first). The lock is the kernel's (``flock`` on POSIX, ``msvcrt.locking``
on Windows), so it is released when the process ends, however it ends.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import IO

from labcontract.errors import ConfigError

LOCK_NAME = "agent.lock"
WAIT_S = 10.0        # an agent that is still exiting (a restart) gets this long to let go


def _try_lock(fh: IO[str]) -> bool:
    try:
        fh.seek(0)
        if os.name == "nt":
            import msvcrt
            msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)   # type: ignore[attr-defined,unused-ignore]
        else:
            import fcntl
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def hold_state_dir(state_dir: Path, wait_s: float = WAIT_S) -> IO[str]:
    """Lock ``state_dir`` for this process (keep the returned file open for as long as the agent runs), waiting up
    to ``wait_s`` for an agent that is exiting; ConfigError naming the holder's pid when another agent keeps it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / LOCK_NAME
    fh = path.open("a+")
    deadline = time.monotonic() + wait_s
    while not _try_lock(fh):
        if time.monotonic() > deadline:
            try:
                fh.seek(0)
                holder = fh.read(32).strip() or "?"
            except OSError:           # Windows: the holder's locked byte cannot be read either
                holder = "?"
            fh.close()
            raise ConfigError("--state-dir", str(state_dir),
                              f"another agent (pid {holder}) uses this state directory; one agent per directory")
        time.sleep(0.1)
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh
