"""Read-only views of the store for the CLI and reports."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, defer, selectinload

from labcontract.errors import StoreError
from labcontract.rounds import round_of, window_rounds
from orchestrator.config import ControllerTuning
from orchestrator.store.lease import LEASE_NAME
from orchestrator.store.models import (
    Artifact,
    Attempt,
    ControllerLease,
    Host,
    NetGroup,
    PreconditionRecord,
    Result,
    Run,
    Step,
)


@dataclass(frozen=True)
class RunDetail:
    run: Run
    steps: list[Step]
    results: dict[str, Result]      # step id -> result of its successful attempt
    preconditions: list[PreconditionRecord]
    net_groups: list[NetGroup] = field(default_factory=list)   # a network run's cells, with window totals
    # a rounds run's (labcontract.rounds) results of rounds outside the reported steady-state window: kept apart,
    # so that every reader of ``results`` reports a cell as the mean of its window's rounds
    earlier_rounds: dict[str, Result] = field(default_factory=dict)


def list_runs(s: Session, limit: int = 50) -> list[tuple[Run, int, int]]:
    """Newest first: (run, steps done, steps total)."""
    runs = s.scalars(select(Run).options(selectinload(Run.steps)).order_by(Run.submitted_at.desc())
                     .limit(limit)).all()
    out = []
    for r in runs:
        done = sum(1 for st in r.steps if st.state in ("SUCCEEDED", "FAILED", "CANCELLED"))
        out.append((r, done, len(r.steps)))
    return out


def resolve_run_id(s: Session, ref: str) -> str:
    """A run id, or a unique prefix of one, or 'last'."""
    if ref == "last":
        rid = s.scalar(select(Run.id).order_by(Run.submitted_at.desc()).limit(1))
        if rid is None:
            raise StoreError("no runs in the store yet")
        return rid
    matches = list(s.scalars(select(Run.id).where(Run.id.startswith(ref)).limit(2)))
    if not matches:
        raise StoreError(f"no run {ref!r} in the store")
    if len(matches) > 1:
        raise StoreError(f"run prefix {ref!r} is ambiguous")
    return matches[0]


def run_detail(s: Session, ref: str, *, light: bool = False) -> RunDetail:
    """A run with its steps, results, precondition records and network groups. ``light`` leaves the large
    JSON columns (per-second series, latency histograms) unloaded until read: what compare needs."""
    rid = resolve_run_id(s, ref)
    run = s.scalars(select(Run).where(Run.id == rid).options(
        selectinload(Run.steps).selectinload(Step.attempts).selectinload(Attempt.artifacts))).one()
    query = select(Result).where(Result.run_id == rid)
    if light:
        query = query.options(defer(Result.series), defer(Result.lat_hist))
    results = {r.step_id: r for r in s.scalars(query)}
    pcs = list(s.scalars(select(PreconditionRecord).where(PreconditionRecord.run_id == rid)
                         .order_by(PreconditionRecord.seq)))
    steps = sorted(run.steps, key=lambda st: (st.seq, st.round, st.host))
    groups = list(s.scalars(select(NetGroup).where(NetGroup.run_id == rid).order_by(NetGroup.seq))) \
        if run.topology else []
    windows = round_windows(pcs)
    earlier = {st.id: results.pop(st.id) for st in steps
               if st.id in results and st.kind == "measure" and not in_window(st.cell, windows)}
    return RunDetail(run=run, steps=steps, results=results, preconditions=pcs, net_groups=groups,
                     earlier_rounds=earlier)


def round_windows(records: Iterable[PreconditionRecord]) -> dict[str, range]:
    """A rounds run's reported window per OP mode (labcontract.rounds.window_rounds): the rounds whose mean is
    each cell's figure. Empty for any other run."""
    out: dict[str, range] = {}
    for rec in records:
        c = rec.criteria or {}
        if c.get("form") != "rounds":
            continue
        last = max((int(x.get("round") or 0) for x in rec.rounds or []), default=0)
        out[str(c.get("op_mode", "stock"))] = window_rounds(rec.reached_round if rec.steady else None,
                                                             int(c.get("window") or 5), last)
    return out


def in_window(cell: Mapping[str, Any], windows: Mapping[str, range]) -> bool:
    """Whether a measured step's cell is reported: any cell but a rounds run's outside its mode's window (a mode
    with no tracked round recorded yet reports every round)."""
    r = round_of(cell)
    if r is None:
        return True
    w = windows.get(str(cell.get("op_mode", "stock")))
    return w is None or not w or r in w


def heartbeat_timeout(s: Session) -> float:
    """The heartbeat timeout of the controller holding the lease (it says it there once it has migrated the store),
    else the default's: what readers pass to :func:`host_up`."""
    got = s.scalar(select(ControllerLease.heartbeat_timeout_s).where(ControllerLease.name == LEASE_NAME))
    return float(got) if got is not None and got > 0 else ControllerTuning().heartbeat_timeout_s


def host_up(h: Host | None, now: float, timeout_s: float | None = None) -> bool:
    """As the controller judges a host: heard from within its heartbeat timeout (``timeout_s``: the controller's,
    :func:`heartbeat_timeout`; the default's when not given). The one reader's definition: labctl's hosts and
    queue, the web service's hosts and queue."""
    limit = ControllerTuning().heartbeat_timeout_s if timeout_s is None else timeout_s
    return bool(h and h.last_seen and now - h.last_seen <= limit)


def list_hosts(s: Session) -> list[Host]:
    return list(s.scalars(select(Host).options(selectinload(Host.devices)).order_by(Host.name)))



# --- application results (kind sysbench / pgbench / external; labcontract.apps.AppResult) ----------------

APP_FIGURES = ("tps", "qps", "lat_avg_ms", "lat_p95_ms", "lat_p99_ms", "lat_max_ms", "errors", "reconnects")
POINT_DIMS = ("threads", "clients")


def is_app_run(detail: RunDetail) -> bool:
    return any(st.kind == "app" for st in detail.steps)


def app_point(step: Step) -> int | None:
    """The thread (sysbench) or client (pgbench) count of an application step; None for prepare / external."""
    for dim in POINT_DIMS:
        if isinstance(step.cell.get(dim), int):
            return int(step.cell[dim])
    return None


def point_dim_of(step: Step) -> str:
    return next((d for d in POINT_DIMS if d in step.cell), "point")


def app_metrics(res: Result) -> dict[str, float]:
    """The named figures of an application result: ``Result.metrics`` holds the AppResult dump (its
    ``metrics`` mapping inside) or, as stored by older controllers, the mapping itself. Numbers only."""
    m: Any = res.metrics or {}
    inner = m.get("metrics") if isinstance(m, dict) else None
    src = inner if isinstance(inner, dict) else m if isinstance(m, dict) else {}
    return {str(k): float(v) for k, v in src.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def cpu_figures(metrics: Any) -> dict[str, float | None]:
    """fio's CPU over a step from a StepMetrics dump (``cpu``: labcontract.fioresult.CpuStats), and the whole host's
    (``host_cpu``: labcontract.hostcpu.HostCpu), as the figures compare, the export and the reports name them; None
    for a result stored before it was kept, a host that reads none (Windows), or a malformed value."""
    cpu = metrics.get("cpu") if isinstance(metrics, dict) else None
    cpu = cpu if isinstance(cpu, dict) else {}

    def number(v: Any) -> float | None:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    host = metrics.get("host_cpu") if isinstance(metrics, dict) else None
    host = host if isinstance(host, dict) else {}
    return {"cpu_usr_pct": number(cpu.get("usr_pct")), "cpu_sys_pct": number(cpu.get("sys_pct")),
            "cpu_us_per_io": number(cpu.get("us_per_io")),
            # the whole host's over the step (labcontract.hostcpu), in % of all its CPUs
            "host_cpu_pct": number(host.get("busy_pct")), "host_iowait_pct": number(host.get("iowait_pct")),
            "host_cpu_us_per_io": number(host.get("us_per_io"))}


def latency_figures(metrics: Any) -> dict[str, float | None]:
    """The latency figures of a StepMetrics dump beyond the result's columns, in µs: total latency's p99.99 and
    p99.999 (fio's ``lat``: submission + completion; p99.999 only where the step held 1,000,000 I/Os), and
    completion latency's mean and p99 (fio's ``clat``); None where the dump lacks them (stored before they were
    kept, or a step too short for p99.999)."""
    c = metrics.get("combined") if isinstance(metrics, dict) else None
    c = c if isinstance(c, dict) else {}

    def us(v: Any) -> float | None:
        return float(v) / 1000 if isinstance(v, int | float) and not isinstance(v, bool) else None

    total, clat = c.get("percentiles_ns"), c.get("clat_percentiles_ns")
    total, clat = (total if isinstance(total, dict) else {}), (clat if isinstance(clat, dict) else {})
    return {"lat_p99_99_us": us(total.get("p99.99")), "lat_p99_999_us": us(total.get("p99.999")),
            "clat_mean_us": us(c.get("clat_mean_ns")), "clat_p99_us": us(clat.get("p99"))}


def app_series(res: Result) -> dict[str, list[float]]:
    """Per-second series of an application result (``tps``, ...): lists of numbers only."""
    src: Any = res.series or {}
    if isinstance(src, dict) and isinstance(src.get("series"), dict):
        src = src["series"]
    return {str(k): [float(x) for x in v if isinstance(x, int | float)] for k, v in (src or {}).items()
            if isinstance(v, list)} if isinstance(src, dict) else {}


def result_tool(res: Result) -> tuple[str | None, str | None]:
    """The tool that measured a result and its version: the ``tool`` / ``tool_version`` columns (schema 0010),
    else the AppResult dump's, else fio's version for a storage row (network rows of older schemas carried
    their tool in ``fio_version``)."""
    tool = getattr(res, "tool", None)
    version = getattr(res, "tool_version", None)
    m: Any = res.metrics or {}
    if not tool and isinstance(m, dict) and isinstance(m.get("tool"), str):
        tool, version = m["tool"], version or m.get("tool_version")
    if not tool:
        fv = res.fio_version or None
        return ("fio" if fv and str(fv).startswith("fio") else fv), fv
    return str(tool), None if version is None else str(version)


def artifact_rows(s: Session, run_id: str) -> list[dict[str, Any]]:
    """Every artifact of a run's attempts in plan order: id, step_id, step (its name), attempt_id, name, size, sha256
    and path (relative to the artifact directory: the store's, never sent over the API)."""
    rows = s.execute(select(Artifact.id, Attempt.step_id, Step.name, Artifact.attempt_id, Artifact.name,
                            Artifact.size, Artifact.sha256, Artifact.path)
                     .join(Attempt, Attempt.id == Artifact.attempt_id).join(Step, Step.id == Attempt.step_id)
                     .where(Step.run_id == run_id)
                     .order_by(Step.seq, Step.round, Attempt.number, Artifact.name)).all()
    return [{"id": i, "step_id": sid, "step": step, "attempt_id": aid, "name": n, "size": size, "sha256": sha,
             "path": path} for i, sid, step, aid, n, size, sha, path in rows]
