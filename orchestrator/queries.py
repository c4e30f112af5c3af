"""Read-only views of the store for the CLI and reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session, defer, selectinload

from labcontract.errors import StoreError
from orchestrator.store.models import Attempt, Host, NetGroup, PreconditionRecord, Result, Run, Step


@dataclass(frozen=True)
class RunDetail:
    run: Run
    steps: list[Step]
    results: dict[str, Result]      # step id -> result of its successful attempt
    preconditions: list[PreconditionRecord]
    net_groups: list[NetGroup] = field(default_factory=list)   # a network run's cells, with window totals


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
    return RunDetail(run=run, steps=steps, results=results, preconditions=pcs, net_groups=groups)


def list_hosts(s: Session) -> list[Host]:
    return list(s.scalars(select(Host).options(selectinload(Host.devices)).order_by(Host.name)))

