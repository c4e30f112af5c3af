"""The reads the API and the pages share: plain dicts (JSON-ready) from a few bounded SQL queries each.

A store may hold 10,000 runs of hundreds of steps each: the run list never loads steps (their done/total come
from one grouped subquery over the page's runs), filters become SQL (the device model and firmware through the
``devices`` table, the OP mode through the steps' cells) and pages are keyset-paginated on
(``submitted_at``, ``id``), so a page costs the same wherever it is.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, exists, func, or_, select, tuple_
from sqlalchemy.orm import Session, load_only, selectinload

from labcontract.errors import InputError, NotFound, Problem
from orchestrator.queries import RunDetail, artifact_rows, heartbeat_timeout, host_up, run_detail
from orchestrator.states import TERMINAL_STEP
from orchestrator.store.models import Device, Host, Result, Run, Schedule, Step
from orchestrator.web.runview import expected_s, step_progress

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")      # labcontract.protocol.Submit.run_id
MAX_LIMIT = 200
DONE = tuple(str(s) for s in TERMINAL_STEP)


def check_run_id(run_id: str) -> str:
    """A run id as the controller makes them; anything else is NotFound before any query."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        raise NotFound("run", str(run_id)[:64])
    return run_id


# --- the run list ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunFilter:
    """What ``GET /api/runs`` and the runs page filter on (every field optional; exact matches)."""

    state: str | None = None
    suite: str | None = None
    host: str | None = None
    model: str | None = None         # a device model of the run's DUTs
    firmware: str | None = None      # a device firmware of the run's DUTs
    op_mode: str | None = None       # a step of the run measured in this OP mode
    since: float | None = None       # submitted at or after (epoch seconds)
    until: float | None = None       # submitted before


def encode_cursor(submitted_at: float, run_id: str) -> str:
    return base64.urlsafe_b64encode(f"{submitted_at!r}|{run_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (submitted_at, id) a cursor points after; InputError for anything not made by encode_cursor."""
    bad = InputError("before", [Problem("before", "not a cursor of this API (use the 'next' of a page)")])
    if len(cursor) > 128:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        ts, _, rid = raw.partition("|")
        value = float(ts)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad from None
    if not RUN_ID_RE.fullmatch(rid) or value != value or value in (float("inf"), float("-inf")):
        raise bad
    return value, rid


def _device_match(column: Any, value: str) -> Any:
    """Runs one of whose DUTs (its host's declared device at the run's first device path or name) has
    ``column == value``. Only the run's first device is joined (``runs.device``): SQL over the JSON list of a
    group differs per database, and a group's devices are alike in practice."""
    return exists().where(Device.host == Run.host, or_(Device.path == Run.device, Device.name == Run.device),
                          column == value)


def run_filters(f: RunFilter) -> list[Any]:
    conds: list[Any] = []
    for column, value in ((Run.state, f.state), (Run.suite_name, f.suite), (Run.host, f.host)):
        if value is not None:
            conds.append(column == value)
    if f.model is not None:
        conds.append(_device_match(Device.model, f.model))
    if f.firmware is not None:
        conds.append(_device_match(Device.firmware, f.firmware))
    if f.op_mode is not None:
        conds.append(exists().where(Step.run_id == Run.id, Step.cell["op_mode"].as_string() == f.op_mode))
    if f.since is not None:
        conds.append(Run.submitted_at >= f.since)
    if f.until is not None:
        conds.append(Run.submitted_at < f.until)
    return conds


def step_counts(s: Session, run_ids: list[str]) -> dict[str, tuple[int, int]]:
    """run id -> (steps done, steps total), one grouped query."""
    if not run_ids:
        return {}
    rows = s.execute(select(Step.run_id, func.sum(case((Step.state.in_(DONE), 1), else_=0)), func.count())
                     .where(Step.run_id.in_(run_ids)).group_by(Step.run_id)).all()
    return {rid: (int(done or 0), int(total)) for rid, done, total in rows}


SUMMARY_COLUMNS = (Run.id, Run.suite_name, Run.host, Run.device, Run.devices, Run.state, Run.reason, Run.priority,
                   Run.submitted_at, Run.started_at, Run.ended_at, Run.submitted_by, Run.max_rounds, Run.rerun_count,
                   Run.lab)
# (never the suite's text: up to 256 KiB a run)


def run_summary(r: Run, done: int, total: int) -> dict[str, Any]:
    return {"id": r.id, "suite": r.suite_name, "host": r.host, "devices": list(r.devices or [r.device]),
            "state": r.state, "reason": r.reason, "priority": r.priority, "submitted_at": r.submitted_at,
            "started_at": r.started_at, "ended_at": r.ended_at, "steps_done": done, "steps_total": total,
            "submitted_by": r.submitted_by or "", "max_rounds": r.max_rounds, "rerun_count": r.rerun_count or 0,
            "set_aside": r.set_aside or "", "lab": r.lab or ""}


def run_page(s: Session, f: RunFilter = RunFilter(), *, limit: int = 50,
              before: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """One page of runs, newest first: (run summaries, the cursor of the next page or None)."""
    limit = max(1, min(int(limit), MAX_LIMIT))
    q = select(Run).options(load_only(*SUMMARY_COLUMNS)).where(*run_filters(f))
    if before:
        ts, rid = decode_cursor(before)
        q = q.where(tuple_(Run.submitted_at, Run.id) < tuple_(ts, rid))   # an index condition on (submitted_at, id)
    runs = list(s.scalars(q.order_by(Run.submitted_at.desc(), Run.id.desc()).limit(limit + 1)))
    more = len(runs) > limit
    runs = runs[:limit]
    counts = step_counts(s, [r.id for r in runs])
    page = [run_summary(r, *counts.get(r.id, (0, 0))) for r in runs]
    nxt = encode_cursor(runs[-1].submitted_at, runs[-1].id) if more and runs else None
    return page, nxt


# --- one run ---------------------------------------------------------------------------------------------

def get_run(s: Session, run_id: str) -> Run:
    run = s.get(Run, check_run_id(run_id))
    if run is None:
        raise NotFound("run", run_id)
    return run


def detail(s: Session, run_id: str, *, light: bool = False) -> RunDetail:
    """orchestrator.queries.run_detail for an exact run id (the API matches no prefix): NotFound otherwise."""
    get_run(s, run_id)
    return run_detail(s, run_id, light=light)


def run_dict(s: Session, run_id: str) -> dict[str, Any]:
    """A run's summary, its steps with their attempts, and its provenance (the first result's)."""
    check_run_id(run_id)
    run = s.scalars(select(Run).where(Run.id == run_id)
                    .options(selectinload(Run.steps).selectinload(Step.attempts))).one_or_none()
    if run is None:
        raise NotFound("run", run_id)
    steps = sorted(run.steps, key=lambda st: (st.seq, st.round, st.host))
    done = sum(1 for st in steps if st.state in DONE)
    prov = s.scalar(select(Result.provenance).where(Result.run_id == run_id).order_by(Result.id).limit(1))
    return {**run_summary(run, done, len(steps)), "steps": [step_dict(st, run.host) for st in steps],
            "provenance": prov or {}, "suite_source": run.suite_source, "suite_sha256": run.suite_sha256,
            "topology": run.topology}


def step_dict(st: Step, run_host: str, now: float | None = None) -> dict[str, Any]:
    last = st.attempts[-1] if st.attempts else None
    progress = step_progress(st.state, st.workload, last.fio_started_at if last else None,
                             (last.fio_ended_at or last.ended_at or last.lost_at if last else None) or st.ended_at,
                             time.time() if now is None else now)
    return {"id": st.id, "seq": st.seq, "round": st.round, "kind": st.kind, "name": st.name, "cell": st.cell,
            "state": st.state, "reason": st.reason, "host": st.host or run_host, "ended_at": st.ended_at,
            "progress": progress, "expected_s": expected_s(st.workload),
            "attempts": [{"id": a.id, "number": a.number, "state": a.state, "host": a.host,
                          "started_at": a.started_at, "ended_at": a.ended_at, "rc": a.exit_code}
                         for a in st.attempts]}


def run_artifacts(s: Session, run_id: str) -> list[dict[str, Any]]:
    """orchestrator.queries.artifact_rows without the store's paths."""
    get_run(s, run_id)
    return [{k: v for k, v in row.items() if k != "path"} for row in artifact_rows(s, run_id)]


def step_series(s: Session, run_id: str, step_id: str) -> dict[str, Any]:
    """The per-second series of a step's result (``{}`` when it has none)."""
    get_run(s, run_id)
    step = s.get(Step, step_id)
    if step is None or step.run_id != run_id:
        raise NotFound("step", step_id)
    series = s.scalar(select(Result.series).where(Result.step_id == step_id).order_by(Result.id.desc()).limit(1))
    return {"step": step_id, "name": step.name, "series": series or {}}


# --- hosts, queue, schedules -----------------------------------------------------------------------------

def _health(host: Host, target: str) -> list[dict[str, Any]]:
    out = []
    for key, v in sorted((host.health or {}).items()):
        check, _, tgt = key.partition(" ")
        if tgt == target and isinstance(v, dict):
            out.append({"check": check, "fails": int(v.get("fails") or 0), "detail": str(v.get("detail") or ""),
                        "at": v.get("at")})
    return out


def host_rows(s: Session, now: float | None = None) -> list[dict[str, Any]]:
    """Every host with its state (up / down / incompatible / quarantined), health checks and DUTs."""
    now = time.time() if now is None else now
    limit = heartbeat_timeout(s)
    out = []
    for h in s.scalars(select(Host).options(selectinload(Host.devices)).order_by(Host.name)):
        state = ("quarantined" if h.quarantined_at is not None else "incompatible" if h.incompatible
                 else "up" if host_up(h, now, limit) else "down")
        out.append({"name": h.name, "state": state, "last_seen": h.last_seen,
                    "quarantined": h.quarantined_at is not None, "reason": h.quarantine_reason or h.incompatible or "",
                    "agent_version": h.agent_version, "health": _health(h, h.name),
                    "devices": [{"name": d.name, "path": d.path, "model": d.model, "firmware": d.firmware,
                                 "serial": d.serial, "size_bytes": d.size_bytes,
                                 "quarantined": d.quarantined_at is not None, "reason": d.quarantine_reason or "",
                                 "health": _health(h, d.path)} for d in h.devices]})
    return out


def queue(s: Session, now: float | None = None, controller_gone: str | None = None) -> list[dict[str, Any]]:
    """Runs not ended, as ``labctl queue`` shows them: started first, then by priority and age, each with
    what the scheduler (orchestrator.runs.scheduling.decide) says it waits for. ``controller_gone``: the reason
    the controller is not working the queue (every run then says so)."""
    from orchestrator.kinds import agent_kinds
    from orchestrator.runs.scheduling import StepSummary, decide

    now = time.time() if now is None else now
    runs = list(s.scalars(select(Run).where(Run.state.in_(["QUEUED", "RUNNING", "PAUSED"]))))
    hosts = {h.name: h for h in s.scalars(select(Host).options(selectinload(Host.devices)))}
    ids = [r.id for r in runs]
    limit = heartbeat_timeout(s)
    decision = decide(runs, hosts, now, lambda h: host_up(h, now, limit), StepSummary.of(s, ids), agent_kinds())
    starting = {r.id for r, _st in decision.dispatch} if not controller_gone else set()
    counts = step_counts(s, ids)
    running = dict(s.execute(select(Step.run_id, func.min(Step.name)).where(
        Step.run_id.in_(ids), Step.state.in_(["DISPATCHED", "RUNNING", "LOST"])).group_by(Step.run_id)).all()) \
        if ids else {}
    out = []
    for r in sorted(runs, key=lambda r: (r.state == "QUEUED", -r.priority, r.submitted_at)):
        status = (f"controller unreachable: {controller_gone}" if controller_gone else
                  decision.waits.get(r.id) or (f"running {running[r.id]}" if r.id in running else
                                               "starting" if r.id in starting else ""))
        done, total = counts.get(r.id, (0, 0))
        out.append({"run_id": r.id, "suite": r.suite_name, "priority": r.priority,
                    "target": f"{r.host}:{','.join(r.devices or [r.device])}", "state": r.state,
                    "steps_done": done, "steps_total": total, "status": status, "submitted_by": r.submitted_by or ""})
    return out


def list_schedules(s: Session) -> list[dict[str, Any]]:
    out = []
    for sc in s.scalars(select(Schedule).order_by(Schedule.name)):
        sub = sc.submit or {}
        out.append({"name": sc.name, "cron": sc.cron, "suite": str(sub.get("suite_source", "")),
                    "host": str(sub.get("host", "")), "devices": list(sub.get("devices") or []),
                    "priority": int(sub.get("priority") or 0), "expires_after_s": sc.expires_after_s,
                    "next_fire_at": sc.next_fire_at, "last_fired_at": sc.last_fired_at,
                    "last_run_id": sc.last_run_id, "last_error": sc.last_error or "", "created_at": sc.created_at,
                    "disabled_reason": sc.disabled_reason or ""})
    return out


def controller_gone(s: Session, now: float | None = None) -> str | None:
    """Why the controller is not working the queue (from its lease), or None when it holds a live lease."""
    from orchestrator.store.lease import absence, view_in

    return absence(view_in(s), time.time() if now is None else now)
