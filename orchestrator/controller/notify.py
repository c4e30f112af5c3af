"""End-of-run notifications: a JSON body POSTed to webhooks and appended to files (one JSON per line).

Delivery is driven from the store: a run that ended and has no ``notified_at`` is notified on the next
controller pass, and marked only once every sink took it, so a controller restart loses none (a sink
may see a notification twice after a crash between delivery and the commit; ``run`` is the key).

A run that came from a schedule (a nightly) is judged against its history when it is notified
(:func:`orchestrator.stats.history.regressions_for_run`): its ``run.ended`` body carries ``"regressions"``
(unacknowledged, possibly empty) and, when there are some, a second body ``"event": "run.regressed"`` goes to
the same sinks, before the run is marked notified (the same at-least-once delivery).
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from pathlib import Path
from typing import Any

from orchestrator.store.models import Result, Run

log = logging.getLogger(__name__)


def payload(run: Run, results: dict[str, Result]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for st in run.steps:
        counts[st.state.lower()] = counts.get(st.state.lower(), 0) + 1
    failed = [{"step": st.name, "reason": st.reason} for st in run.steps if st.state == "FAILED"]
    cells = [{"step": st.name, "iops": r.iops, "bw_bytes": r.bw_bytes, "lat_mean_us": (r.lat_mean_ns or 0) / 1e3,
              "lat_max_us": (r.lat_max_ns or 0) / 1e3, "lat_stddev_us": (r.lat_stddev_ns or 0) / 1e3}
             for st in run.steps if st.kind == "measure" and (r := results.get(st.id)) is not None]
    return {"event": "run.ended", "run": run.id, "suite": run.suite_name, "host": run.host,
            "devices": run.devices or [run.device], "state": run.state, "reason": run.reason,
            "submitted_at": run.submitted_at, "started_at": run.started_at, "ended_at": run.ended_at,
            "steps": counts, "failed_steps": failed, "results": cells}


def from_schedule(run: Run) -> str | None:
    """The schedule a run came from (a nightly), else None."""
    by = run.submitted_by or ""
    return by.removeprefix("schedule:") if by.startswith("schedule:") else None


def regressed_payload(run: Run, regressions: list[dict[str, Any]]) -> dict[str, Any]:
    """The second body sent when a scheduled run regressed against its history (orchestrator.stats.history)."""
    return {"event": "run.regressed", "run": run.id, "suite": run.suite_name, "host": run.host,
            "devices": run.devices or [run.device], "schedule": from_schedule(run), "state": run.state,
            "started_at": run.started_at, "ended_at": run.ended_at, "regressions": regressions}


class Notifier:
    def __init__(self, webhooks: list[str] | None = None, files: list[Path] | None = None,
                 timeout_s: float = 3.0) -> None:
        self.webhooks = list(webhooks or [])
        self.files = list(files or [])
        self.timeout_s = timeout_s

    @property
    def enabled(self) -> bool:
        return bool(self.webhooks or self.files)

    def send(self, body: dict[str, Any]) -> None:
        """Deliver to every sink; raise on the first that fails (the run stays un-notified)."""
        data = json.dumps(body, sort_keys=True).encode()
        for path in self.files:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab") as f:
                f.write(data + b"\n")
                f.flush()
                os.fsync(f.fileno())
        for url in self.webhooks:
            req = urllib.request.Request(url, data=data, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "User-Agent": "storagelab-controller"})
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                if not 200 <= resp.status < 300:
                    raise OSError(f"webhook {url} answered {resp.status}")
