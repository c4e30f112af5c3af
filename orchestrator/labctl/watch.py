"""``labctl watch``: a run's steps with progress bars and live IOPS / latency, in the terminal, until it ends.

The frames (:mod:`orchestrator.watchframe`) come from the store (read-only) and the agent's ``lab:live:<host>`` key
in Redis (written each second while a step runs), or, through the web service (``labctl --api watch``), drawn by
the service (``GET /api/runs/{id}/watch``) for this terminal. Without a terminal, one line per change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.queries import run_detail
from orchestrator.report import print_run
from orchestrator.states import TERMINAL_RUN
from orchestrator.watchframe import Frame, store_frame


def follow(frames: Callable[[], Frame], final: Callable[[], None], run_id: str, console: Console, *,
           timeout_s: float | None = None, interval: float = 1.0, pipe_interval: float = 0.5) -> int:
    """Show ``frames()`` until the run ends (a live table on a terminal, one line per change into a pipe), then
    ``final()`` (its results). Exit code 0 if it succeeded, 1 if it did not, 2 if still going at ``timeout_s``.
    The frames come from the store (:func:`store_frame`) or from the web service (``labctl --api watch``): what is
    shown is the same."""
    start = time.monotonic()
    f = frames()
    if console.is_terminal:
        with Live(f.table, console=console, refresh_per_second=4, transient=False) as view:
            while f.state not in TERMINAL_RUN:
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    break
                time.sleep(interval)
                f = frames()
                view.update(Group(f.table, Text("")))
    else:
        last = ""
        while True:
            if f.line != last:
                console.print(f.line, highlight=False)
                last = f.line
            if f.state in TERMINAL_RUN or (timeout_s is not None and time.monotonic() - start > timeout_s):
                break
            time.sleep(pipe_interval)
            f = frames()
    if f.state not in TERMINAL_RUN:
        console.print(f"run {run_id} still {f.state} after {timeout_s:.0f}s")
        return 2
    final()
    return 0 if f.state == "SUCCEEDED" else 1


def watch_run(sessions: sessionmaker[Session], client: Any, run_id: str, console: Console, *,
              timeout_s: float | None = None, interval: float = 1.0) -> int:
    """Follow the run from the store until it ends, then print its results. Exit code 0 if it succeeded."""
    def final() -> None:
        with sessions() as s:
            print_run(console, run_detail(s, run_id))
    return follow(lambda: store_frame(sessions, client, run_id), final, run_id, console, timeout_s=timeout_s,
                  interval=interval)
