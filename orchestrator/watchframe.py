"""What ``labctl watch`` shows of a run, one frame at a time: each step's progress bar, elapsed and remaining time,
live IOPS and latency (:func:`render`), and the one line a pipe gets (:class:`Frame`). Drawn from the store and the
agent's ``lab:live:<host>`` key (:func:`store_frame`) by labctl itself, or by the web service for ``labctl --api
watch`` (``GET /api/runs/{id}/watch``), so both show the same."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from sqlalchemy.orm import Session, sessionmaker

from labcontract.live import LiveStatus
from labcontract.telemetry import LIVE_KEY_PREFIX
from orchestrator.queries import RunDetail, run_detail

BAR = 24


def bar(fraction: float) -> str:
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * BAR)
    return "█" * filled + "░" * (BAR - filled) + f" {fraction * 100:3.0f}%"


def read_live(client: Any, host: str) -> dict[str, LiveStatus]:
    """Live status of the host's running attempts, by attempt id (empty when unavailable)."""
    if client is None:
        return {}
    try:
        raw = client.get(LIVE_KEY_PREFIX + host)
    except Exception:  # the live view is best effort: a broker hiccup must not end the watch
        return {}
    if not raw:
        return {}
    try:
        return {s.attempt_id: s for s in (LiveStatus.model_validate(x) for x in json.loads(raw))}
    except ValueError:
        return {}


def _expected(step: Any) -> float:
    w = step.workload or {}
    return float(w.get("runtime", 0) + w.get("ramp_time", 0))


def _lat(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1000:,.0f} us"


def render(d: RunDetail, live: dict[str, LiveStatus], now: float) -> Table:
    run = d.run
    done = sum(1 for st in d.steps if st.state in ("SUCCEEDED", "FAILED", "CANCELLED"))
    table = Table(title=f"run {run.id}  {run.suite_name}  {run.host}:{','.join(run.devices or [run.device])}  "
                        f"{run.state}  {done}/{len(d.steps)} steps", title_justify="left")
    for col in ("step", "state", "progress", "elapsed", "left", "IOPS", "avg lat", "max lat"):
        table.add_column(col, justify="right" if col in ("elapsed", "left", "IOPS", "avg lat", "max lat") else "left")
    for st in d.steps:
        att = st.attempts[-1] if st.attempts else None
        status = live.get(att.id) if att else None
        res = d.results.get(st.id)
        expected = status.expected_s if status else _expected(st)
        if status is not None:
            elapsed = status.elapsed_s
            devs = status.devices
            iops = sum((x.read.iops or 0) + (x.write.iops or 0) for x in devs)
            lats = [v for x in devs for v in (x.read.lat_mean_ns, x.write.lat_mean_ns) if v is not None]
            maxes = [v for x in devs for v in (x.read.lat_max_ns, x.write.lat_max_ns) if v is not None]
            figures = [f"{iops:,.0f}", _lat(sum(lats) / len(lats) if lats else None), _lat(max(maxes, default=None))]
        elif att is not None and att.fio_started_at and st.state in ("RUNNING", "DISPATCHED", "LOST"):
            elapsed = now - att.fio_started_at
            figures = ["…", "", ""]
        elif res is not None:
            elapsed = res.runtime_ms / 1000
            figures = [f"{res.iops:,.0f}", _lat(res.lat_mean_ns), _lat(res.lat_max_ns)]
        else:
            elapsed = 0.0
            figures = ["", "", ""]
        if st.state in ("SUCCEEDED", "FAILED", "CANCELLED"):
            progress = bar(1.0) if st.state == "SUCCEEDED" else st.state.lower()
        elif st.state == "PENDING":
            progress = ""
        else:
            progress = bar(elapsed / expected) if expected else "running"
        left = f"{max(expected - elapsed, 0):.0f}s" if st.state in ("RUNNING", "DISPATCHED") and expected else ""
        table.add_row(st.name, st.state, progress, f"{elapsed:.0f}s" if elapsed else "", left, *figures)
    return table


@dataclass(frozen=True)
class Frame:
    """One look at a run: its state, the table a terminal shows, the line a pipe gets."""

    state: str
    table: RenderableType
    line: str


def frame_of(d: RunDetail, live: dict[str, LiveStatus], now: float) -> Frame:
    running = next((st for st in d.steps if st.state in ("DISPATCHED", "RUNNING", "LOST")), None)
    done = sum(1 for st in d.steps if st.state in ("SUCCEEDED", "FAILED", "CANCELLED"))
    line = f"run {d.run.id}: {d.run.state} {done}/{len(d.steps)} steps {running.name if running else ''}"
    return Frame(d.run.state, render(d, live, now), line)


def store_frame(sessions: sessionmaker[Session], client: Any, run_id: str) -> Frame:
    """The run as the store has it, with the live figures of its host's agent (``client``: the broker)."""
    with sessions() as s:
        d = run_detail(s, run_id)
    return frame_of(d, read_live(client, d.run.host), time.time())


