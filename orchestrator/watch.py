"""Waiting on a run from the command line (progress until it ends)."""

from __future__ import annotations

import time

from rich.console import Console
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.queries import run_detail
from orchestrator.report import print_run
from orchestrator.states import TERMINAL_RUN


def wait_run(sessions: sessionmaker[Session], run_id: str, console: Console, *,
             timeout_s: float | None = None, interval: float = 0.5) -> int:
    """Block until the run ends; print its table. Exit code: 0 if it succeeded."""
    start = time.monotonic()
    last = ""
    while True:
        with sessions() as s:
            d = run_detail(s, run_id)
            states = [st.state for st in d.steps]
            done = sum(1 for x in states if x in ("SUCCEEDED", "FAILED", "CANCELLED"))
            current = next((st.name for st in d.steps if st.state in ("DISPATCHED", "RUNNING", "LOST")), "")
            line = f"run {d.run.id}: {d.run.state} {done}/{len(states)} steps {current}"
            if line != last:
                console.print(line, highlight=False)
                last = line
            if d.run.state in TERMINAL_RUN:
                print_run(console, d)
                return 0 if d.run.state == "SUCCEEDED" else 1
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            console.print(f"run {run_id} still {d.run.state} after {timeout_s:.0f}s")
            return 2
        time.sleep(interval)
