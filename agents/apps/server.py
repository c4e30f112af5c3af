"""A database server of an application step: started in a session of its own with its output in the step's
server log, recorded (pid + start ticks) before anything waits on it, then awaited until it accepts connections.
Shared by the MariaDB and PostgreSQL drivers; each keeps its own argv, readiness probe and stop."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agents.apps import AppContext, Cancelled
from agents.apps.proc import TOOL_OUT_MAX, bound_file, start_ticks, tail, wait_for
from labcontract.errors import AppStepError


def launch(ctx: AppContext, name: str, argv: Sequence[str], datadir: Path, *, echo: bool = False,
           **popen: Any) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``argv`` (``popen``: user, env, cwd... for :class:`subprocess.Popen`) and record it with
    ``ctx.on_server`` so that cleanup finds it whatever happens next; (process, start ticks or -1)."""
    ctx.log.info("starting the server: %s", " ".join(argv))
    bound_file(ctx.server_log, TOOL_OUT_MAX)
    with ctx.server_log.open("ab") as log:
        if echo:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, **popen)
    ticks = start_ticks(proc.pid)
    ctx.on_server(proc.pid, name, datadir)
    return proc, ticks if ticks is not None else -1


def await_ready(ctx: AppContext, proc: subprocess.Popen[bytes], name: str, ready: Callable[[], bool],
                timeout_s: float, on_fail: Callable[[], object]) -> None:
    """Until ``ready()``. A server that exits first fails the step at once with its log's last lines; a timeout
    fails it; a cancel raises Cancelled. ``on_fail`` (the driver's stop) runs before either."""
    def died() -> str | None:
        if proc.poll() is None:
            return None
        return f"{name} exited ({proc.returncode}) while starting: {tail(ctx.server_log, 8)}"

    try:
        wait_for(ready, timeout_s, died=died, stop=ctx.stop, what=f"{name} accepting connections")
    except (RuntimeError, TimeoutError) as e:
        on_fail()
        if ctx.stop.is_set():
            raise Cancelled() from None
        raise AppStepError(str(e)) from None
