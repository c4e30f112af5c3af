"""History of runs and the regressions in it (issue 16, deliverable 3).

A **series** is one figure of one cell across the runs that ended, in start order (submit order for a run
that never started): its identity is (host, device model, firmware, suite, cell key with its OP mode, metric).
A cell's series also keeps to one **fingerprint** of what it ran (orchestrator.store.fingerprint: the rendered job
without the device's path): a suite edited under its name starts new series, said as "the suite changed on r…".
The model and firmware are those the run's results recorded at the time (``Result.provenance["device"]``, the
first device of a group), else the declared device's today; a network run has none (""). A run's value is the
mean of its repeats (``repeat: N``); a run without the cell, or whose figure is None (older runs lacked some
metrics), is not a point of the series: never a zero.

Only the :data:`~orchestrator.cellmetrics.HEADLINE` metrics are judged, each in its direction (IOPS down is
worse, latency up is worse):

* **change points**: E-Divisive means (:func:`orchestrator.stats.changepoints.detect_changes`) over the latest
  :data:`HISTORY_POINTS` points (its cost grows with the square of the length); a change that makes the figure
  worse by more than :data:`THRESHOLD_PCT` (segment mean after vs before) is a regression at the first run
  after it, with confidence 1 - p of the detector's permutation test.
* **the last points**: the detector needs ``MIN_SIZE`` points after a change, so it cannot see a change at the
  last ``MIN_SIZE - 1`` runs (the nightly that just ended). The first of those whose value lies beyond the
  mean of the history before it (since the latest change point) by more than max(3 sd, THRESHOLD_PCT of the
  mean), in the worse direction, is a regression (``rule == "last"``); its confidence is the normal coverage
  of its z-score. That history needs :func:`~orchestrator.stats.changepoints.min_points` runs too.

A series shorter than the detector needs is counted (:class:`HistoryStatus`), never judged. A regression's
``id`` is stable (series identity + the run of the change), so an acknowledgement (table ``regression_acks``,
written by the controller) keeps it unflagged, also when the last-point rule's flag later becomes a change point.

Loading is a handful of queries whatever the number of runs (runs, their measured steps, results, network
groups, devices, acknowledgements), never one per run.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from labcontract.errors import InputError, Problem
from labcontract.rounds import round_of
from orchestrator.cellmetrics import HEADLINE, RESULT_KINDS, cell_entries
from orchestrator.cells import CellKey, cell_key, cell_label, key_label
from orchestrator.queries import RunDetail, in_window, round_windows
from orchestrator.states import TERMINAL_RUN
from orchestrator.stats.changepoints import MAX_POINTS, MIN_SIZE, ChangePoint, detect_changes, min_points
from orchestrator.stats.noise import Noise, noise_of
from orchestrator.stats.samples import MAX_FIGURE
from orchestrator.store.models import Device, NetGroup, PreconditionRecord, RegressionAck, Result, Run, Step

HISTORY_POINTS = min(250, MAX_POINTS)   # a series is judged on its latest runs (a nightly: 8 months)
THRESHOLD_PCT = 5.0        # a change smaller than this (in % of the mean before) is never a regression
OUTLIER_SD = 3.0           # the last-point rule's band: mean +- max(OUTLIER_SD sd, THRESHOLD_PCT % of the mean)


@dataclass
class Regression:
    id: str                  # sha256 of the series identity + the change's run id, first 12 hex
    host: str
    model: str
    firmware: str
    suite: str
    cell: str                # the cell's name (orchestrator.cells.cell_label)
    cell_key: CellKey
    metric: str
    run_id: str              # the first run after the change
    before: float            # mean before the change
    after: float             # mean after it
    change_pct: float        # (after - before) / |before| in %
    confidence: float        # 1 - p (change point), or the z-score's normal coverage (last-point rule)
    acknowledged: bool
    ack_reason: str | None
    rule: str = "change"     # "change": a change point; "last": the last-point rule
    started_at: float | None = None   # the run's start (its submission when it never started)
    noise_cov_pct: float | None = None    # the series' CoV over the history its last run is judged against
    detectable_pct: float | None = None   # the smallest one-run change that history can tell from noise

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the CLI's --json, the API, the webhook body)."""
        return {"id": self.id, "host": self.host, "model": self.model, "firmware": self.firmware,
                "suite": self.suite, "cell": self.cell, "cell_key": dict(self.cell_key), "metric": self.metric,
                "run_id": self.run_id, "before": self.before, "after": self.after, "change_pct": self.change_pct,
                "confidence": self.confidence, "acknowledged": self.acknowledged, "ack_reason": self.ack_reason,
                "rule": self.rule, "started_at": self.started_at, "noise_cov_pct": self.noise_cov_pct,
                "detectable_pct": self.detectable_pct}


@dataclass(frozen=True)
class SeriesId:
    host: str
    model: str
    firmware: str
    suite: str
    cell_key: CellKey
    metric: str
    fingerprint: str = ""    # what the cell ran (orchestrator.stats.fingerprint): a change starts a new series

    def regression_id(self, run_id: str) -> str:
        # (not the fingerprint: a run is in one series of a cell, and the ids acknowledged before it existed hold)
        ident = json.dumps([self.host, self.model, self.firmware, self.suite, [list(p) for p in self.cell_key],
                            self.metric, run_id], separators=(",", ":"))
        return hashlib.sha256(ident.encode()).hexdigest()[:12]


@dataclass
class Series:
    ident: SeriesId
    run_ids: list[str] = field(default_factory=list)
    started: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)    # a run's mean over its repeats
    changed_from: str | None = None   # the run where the cell's fingerprint changed and this series began
    name: str = ""                    # the cell's name (orchestrator.cells.cell_label) in the series' first run

    @property
    def label(self) -> str:
        return self.name or key_label(self.ident.cell_key)

    def noise(self) -> Noise | None:
        """The noise of the history the last run is judged against (since the latest change point)."""
        if len(self.values) < min_points():
            return None
        values = self.values[-HISTORY_POINTS:]
        return _noise(values, _detect(values, f"{self.ident.host} {self.label} {self.ident.metric}"))


def _noise(values: list[float], changes: list[ChangePoint]) -> Noise | None:
    """The noise of the runs the last-point rule judges against: since the latest change, without the last ones."""
    since = changes[-1].index if changes else 0
    return noise_of(values[since:max(len(values) - MIN_SIZE + 1, 0)], OUTLIER_SD, THRESHOLD_PCT)


@dataclass(frozen=True)
class HistoryStatus:
    """How much history there was to judge: series judged, series too short for the detector."""

    series: int
    too_short: int
    need: int = field(default_factory=min_points)
    changed: tuple[str, ...] = ()    # runs where a cell's fingerprint changed and its new series is too short

    def message(self) -> str | None:
        """``3 series too short (need 8 runs); the suite changed on r12: new series, history too short``, or None
        when every series could be judged."""
        if not self.too_short:
            return None
        text = f"{self.too_short} series too short (need {self.need} runs)"
        if self.changed:
            more = f" and {len(self.changed) - 3} more" if len(self.changed) > 3 else ""
            text += f"; the suite changed on {', '.join(self.changed[:3])}{more}: new series, history too short"
        return text


# --------------------------------------------------------------------------- loading


@dataclass
class _Row:
    """The columns of a Result that a result kind's ``values`` read (orchestrator.cellmetrics.RESULT_KINDS): loading
    them as plain rows instead of ORM objects keeps 10,000 runs to seconds."""

    iops: float | None
    bw_bytes: float | None
    lat_mean_ns: float | None
    lat_max_ns: float | None
    lat_stddev_ns: float | None
    lat_p99_ns: float | None
    metrics: dict[str, Any] | None = None


@dataclass
class _RunRow:
    id: str
    host: str
    suite: str
    device: str
    network: bool
    when: float
    submitted_at: float
    # step kind, cell, result, fingerprint, workload
    cells: list[tuple[str, dict[str, Any], _Row | None, str, dict[str, Any] | None]] = field(default_factory=list)


def _device_ids(s: Session, runs: Sequence[_RunRow], run_ids: Any) -> dict[str, tuple[str, str]]:
    """run id -> (model, firmware): the first result's provenance (at the time), else the declared device's."""
    first = (select(Result.run_id, func.min(Result.id).label("rid")).where(Result.run_id.in_(run_ids))
             .group_by(Result.run_id).subquery())
    dev = Result.provenance["device"]
    out: dict[str, tuple[str, str]] = {}
    for run_id, model, firmware in s.execute(select(Result.run_id, dev["model"].as_string(),
                                                    dev["firmware"].as_string())
                                             .join(first, Result.id == first.c.rid)):
        if model or firmware:
            out[run_id] = (str(model or ""), str(firmware or ""))
    missing = [r for r in runs if r.id not in out and not r.network]
    if missing:
        devs = {(d.host, p): (d.model or "", d.firmware or "")
                for d in s.scalars(select(Device).where(Device.host.in_({r.host for r in missing})))
                for p in (d.path, d.by_id, d.name) if p}
        for r in missing:
            out[r.id] = devs.get((r.host, r.device), ("", ""))
    return out


def _steps(s: Session, runs: dict[str, _RunRow], run_ids: Any) -> None:
    """Every measured (storage, application) step of the runs with its result's figures: two queries."""
    cols = (Step.run_id, Step.id, Step.kind, Step.cell, Step.fingerprint, Result.iops, Result.bw_bytes,
            Result.lat_mean_ns, Result.lat_max_ns, Result.lat_stddev_ns, Result.lat_p99_ns)
    seen: dict[str, tuple[_RunRow, int]] = {}
    for kind, extra in (("measure", ()), ("app", (Result.metrics,))):
        query = (select(*cols, *extra, Step.workload, Result.id).outerjoin(Result, Result.step_id == Step.id)
                 .where(Step.run_id.in_(run_ids), Step.kind == kind).order_by(Result.id))
        for row in s.execute(query):
            run = runs.get(row[0])
            if run is None or run.network:
                continue
            res = None if row[-1] is None else _Row(*row[5:11], *(row[11:12] if extra else ()))
            entry = (str(row[2]), row[3] if isinstance(row[3], dict) else {}, res, str(row[4] or ""),
                     row[-2] if isinstance(row[-2], dict) else None)
            if row[1] in seen:              # a step with several results (reruns): the latest
                r, i = seen[row[1]]
                r.cells[i] = entry
            else:
                seen[row[1]] = (run, len(run.cells))
                run.cells.append(entry)


def _keep_windows(s: Session, runs: dict[str, _RunRow]) -> None:
    """A rounds run's cells (labcontract.rounds): only the reported window's rounds, as the run's own reports."""
    rounded = [rid for rid, r in runs.items() if any(round_of(c) is not None for _k, c, _r, _f, _w in r.cells)]
    if not rounded:
        return
    records: dict[str, list[PreconditionRecord]] = {}
    for rec in s.scalars(select(PreconditionRecord).where(PreconditionRecord.run_id.in_(rounded))):
        records.setdefault(rec.run_id, []).append(rec)
    for rid in rounded:
        windows = round_windows(records.get(rid, []))
        runs[rid].cells = [c for c in runs[rid].cells if c[0] != "measure" or in_window(c[1], windows)]


Values = tuple[CellKey, dict[str, float | None], str, str]     # cell key, figures, fingerprint, the cell's name


def _values(run: _RunRow) -> Iterable[Values]:
    """orchestrator.cellmetrics.cell_entries over the loaded rows of a storage or application run, with each
    step's fingerprint and its cell's name (orchestrator.cells.cell_label)."""
    kind = RESULT_KINDS["app" if any(k == "app" for k, _c, _r, _f, _w in run.cells) else "storage"]
    for step_kind, cell, res, fp, wl in run.cells:
        if res is None or step_kind != kind.step_kind or (step_kind == "app" and cell.get("phase") == "prepare"):
            continue
        yield (cell_key(cell, with_op_mode=True), kind.values(cast(Result, res)), fp,
               cell_label(cell, wl, with_op_mode=True))


def _net_values(s: Session, runs: list[_RunRow]) -> dict[str, list[Values]]:
    """A network run's groups (their window totals) through cellmetrics.cell_entries (network runs are few)."""
    ids = [r.id for r in runs]
    groups: dict[str, list[NetGroup]] = {}
    for g in s.scalars(select(NetGroup).where(NetGroup.run_id.in_(ids)).order_by(NetGroup.seq)):
        groups.setdefault(g.run_id, []).append(g)
    out: dict[str, list[Values]] = {}
    for run in s.scalars(select(Run).where(Run.id.in_(ids))):
        detail = RunDetail(run=run, steps=[], results={}, preconditions=[], net_groups=groups.get(run.id, []))
        out[run.id] = [(key, e.values, "", e.label) for key, e in cell_entries(detail, with_op_mode=True)
                       if e.step is not None]
    return out


def load_series(s: Session, *, host: str | None = None, suite: str | None = None,
                metrics: Iterable[str] = tuple(HEADLINE)) -> list[Series]:
    """Every series of the runs that ended (optionally of one host, one suite), for ``metrics``: a handful of
    queries (runs, steps with results, first results' devices, network groups), whatever the number of runs."""
    wanted = set(metrics)
    where: list[ColumnElement[bool]] = [Run.state.in_([str(x) for x in TERMINAL_RUN])]
    if host is not None:
        where.append(Run.host == host)
    if suite is not None:
        where.append(Run.suite_name == suite)
    run_ids = select(Run.id).where(*where).scalar_subquery()
    runs = {r.id: r for r in (
        _RunRow(rid, h, name, str((devs or [dev])[0]), bool(topo), started if started is not None else submitted,
                submitted)
        # (the topology is tested in Python: a JSON column set to None may hold JSON null, which IS NOT NULL)
        for rid, h, name, dev, devs, topo, started, submitted in s.execute(select(
            Run.id, Run.host, Run.suite_name, Run.device, Run.devices, Run.topology, Run.started_at,
            Run.submitted_at).where(*where)))}
    if not runs:
        return []
    _steps(s, runs, run_ids)
    _keep_windows(s, runs)
    devices = _device_ids(s, list(runs.values()), run_ids)
    nets = [r for r in runs.values() if r.network]
    net_values = _net_values(s, nets) if nets else {}
    out: dict[SeriesId, Series] = {}
    for run in sorted(runs.values(), key=lambda r: (r.when, r.submitted_at, r.id)):
        model, firmware = devices.get(run.id, ("", ""))
        sums: dict[tuple[CellKey, str, str], list[float]] = {}
        names: dict[CellKey, str] = {}
        for key, values, fp, name in (net_values.get(run.id, []) if run.network else _values(run)):
            names.setdefault(key, name)
            for metric, v in values.items():
                # (a non-finite or absurd stored figure is no point, as a missing one: 1e308s overflow)
                if metric in wanted and v is not None and math.isfinite(v) and abs(v) <= MAX_FIGURE:
                    sums.setdefault((key, metric, fp), []).append(float(v))
        for (key, metric, fp), vals in sums.items():
            ident = SeriesId(run.host, model, firmware, run.suite, key, metric, fp)
            ser = out.get(ident)
            if ser is None:
                ser = out[ident] = Series(ident, name=names.get(key, ""))
            ser.run_ids.append(run.id)
            ser.started.append(run.when)
            ser.values.append(sum(vals) / len(vals))
    _mark_changes(out.values())
    return list(out.values())


def _mark_changes(series: Iterable[Series]) -> None:
    """Set ``changed_from`` on every series that began after another of the same cell and figure with another
    fingerprint (the suite was edited under its name, or a submission overrode it)."""
    cells: dict[tuple[Any, ...], list[Series]] = {}
    for ser in series:
        i = ser.ident
        cells.setdefault((i.host, i.model, i.firmware, i.suite, i.cell_key, i.metric), []).append(ser)
    for group in cells.values():
        if len(group) > 1:
            group.sort(key=lambda x: x.started[0])
            for ser in group[1:]:
                ser.changed_from = ser.run_ids[0]


# --------------------------------------------------------------------------- judging


def _worse(metric: str, pct: float, threshold: float) -> bool:
    return pct < -threshold if HEADLINE.get(metric, True) else pct > threshold


def _regression(ser: Series, i: int, before: float, after: float, confidence: float, rule: str) -> Regression | None:
    if before == 0:
        return None
    pct = (after - before) / abs(before) * 100.0
    ident = ser.ident
    return Regression(id=ident.regression_id(ser.run_ids[i]), host=ident.host, model=ident.model,
                      firmware=ident.firmware, suite=ident.suite, cell=ser.label, cell_key=ident.cell_key,
                      metric=ident.metric, run_id=ser.run_ids[i], before=before, after=after, change_pct=pct,
                      confidence=confidence, acknowledged=False, ack_reason=None, rule=rule,
                      started_at=ser.started[i])


def judge_series(ser: Series, threshold: float = THRESHOLD_PCT) -> list[Regression] | None:
    """The regressions of one series (unacknowledged); None when it is too short to judge."""
    if len(ser.values) < min_points():
        return None
    offset = max(0, len(ser.values) - HISTORY_POINTS)
    values = ser.values[offset:]
    out: list[Regression] = []
    changes = _detect(values, f"{ser.ident.host} {ser.label} {ser.ident.metric}")
    for cp in changes:
        if cp.change_pct is not None and _worse(ser.ident.metric, cp.change_pct, threshold):
            reg = _regression(ser, offset + cp.index, cp.mean_before, cp.mean_after, 1.0 - cp.p_value, "change")
            if reg is not None:
                out.append(reg)
    last = _last_points(ser, values, offset, changes[-1].index if changes else 0, threshold)
    if last is not None:
        out.append(last)
    noise = _noise(values, changes)
    if noise is not None:
        for r in out:
            r.noise_cov_pct, r.detectable_pct = noise.cov_pct, noise.detectable_pct
    return out


_CACHE: dict[bytes, list[ChangePoint]] = {}
_CACHE_SIZE = 4096


def _detect(values: list[float], source: str) -> list[ChangePoint]:
    """detect_changes, remembered per series content (it is deterministic: seeded): the web service and the
    controller judge the same unchanged histories again and again."""
    key = hashlib.sha256(np.asarray(values, dtype=np.float64).tobytes()).digest()
    got = _CACHE.get(key)
    if got is None:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        got = _CACHE[key] = detect_changes(values, source=source)
    return got


def _last_points(ser: Series, values: list[float], offset: int, since: int, threshold: float) -> Regression | None:
    """The last-point rule (module doc) over the runs the detector cannot split off yet."""
    tail = max(len(values) - MIN_SIZE + 1, 0)
    ref = np.asarray(values[since:tail], dtype=np.float64)
    if len(ref) < min_points():
        return None
    mean, sd = float(ref.mean()), float(ref.std(ddof=1))
    band = max(OUTLIER_SD * sd, threshold / 100.0 * abs(mean))
    higher_better = HEADLINE.get(ser.ident.metric, True)
    for j in range(tail, len(values)):
        v = values[j]
        beyond = v < mean - band if higher_better else v > mean + band
        if beyond:
            after = float(np.mean(values[j:]))
            z = abs(v - mean) / sd if sd > 0 else math.inf
            return _regression(ser, offset + j, mean, after, math.erf(z / math.sqrt(2.0)), "last")
    return None


def _acks(s: Session) -> dict[str, str]:
    return {rid: reason for rid, reason in s.execute(select(RegressionAck.regression_id, RegressionAck.reason))}


def find_regressions(s: Session, *, since: float | None = None, host: str | None = None,
                     include_acknowledged: bool = False, suite: str | None = None,
                     threshold: float = THRESHOLD_PCT, run_id: str | None = None,
                     series: Iterable[Series] | None = None) -> tuple[list[Regression], HistoryStatus]:
    """:func:`regressions` and how much history there was (what ``labctl regressions`` prints); ``run_id``:
    only the series holding that run are judged, and only the regressions at it kept; ``series``: those
    already loaded (of ``host`` and ``suite``) instead of reading them again."""
    judged, short = 0, 0
    changed: dict[str, float] = {}
    found: list[Regression] = []
    for ser in load_series(s, host=host, suite=suite) if series is None else series:
        if run_id is not None and run_id not in ser.run_ids[-HISTORY_POINTS:]:
            continue
        regs = judge_series(ser, threshold)
        if regs is None:
            short += 1
            if ser.changed_from is not None:
                changed[ser.changed_from] = ser.started[0]
            continue
        judged += 1
        found.extend(r for r in regs if (since is None or (r.started_at is not None and r.started_at >= since))
                     and (run_id is None or r.run_id == run_id))
    acks = _acks(s) if found else {}
    out = []
    for r in found:
        if r.id in acks:
            r.acknowledged, r.ack_reason = True, acks[r.id]
            if not include_acknowledged:
                continue
        out.append(r)
    out.sort(key=lambda r: (-(r.started_at or 0.0), r.host, r.suite, r.cell, r.metric))
    return out, HistoryStatus(judged, short, changed=tuple(sorted(changed, key=lambda r: (changed[r], r))))


def regressions(s: Session, *, since: float | None = None, host: str | None = None,
                include_acknowledged: bool = False) -> list[Regression]:
    """Where a headline figure got worse by more than :data:`THRESHOLD_PCT` (module doc), newest first, whose
    run started at/after ``since``; acknowledged ones only with ``include_acknowledged``."""
    return find_regressions(s, since=since, host=host, include_acknowledged=include_acknowledged)[0]


def regressions_for_run(s: Session, run_id: str) -> list[Regression]:
    """The unacknowledged regressions that land at this run: a change point there, or the last-point rule
    judging it against the history before it. Reads only the series of the run's host and suite."""
    run = s.get(Run, run_id)
    if run is None:
        return []
    return find_regressions(s, host=run.host, suite=run.suite_name, run_id=run_id)[0]


def parse_since(text: str, now: float, where: str = "--since") -> float:
    """Epoch seconds from a duration ago (``7d``, ``12h``) or a date / time (``2026-11-01``,
    ``2026-11-01 22:00``, local time unless it names its zone); InputError naming ``where`` otherwise."""
    from datetime import datetime

    from labcontract.units import parse_duration

    value = text.strip()
    try:
        return now - parse_duration(value)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(value)
        # a local date at the ends of the calendar (0001-01-01) has no epoch seconds: ValueError/OverflowError
        return (at if at.tzinfo is not None else at.astimezone()).timestamp()
    except (ValueError, OverflowError, OSError):
        raise InputError(where, [Problem(where, f"{text[:64]!r}: give a duration ago (7d, 12h) or a date "
                                                "(YYYY-MM-DD[ HH:MM])")]) from None


def history_status(s: Session, *, host: str | None = None) -> HistoryStatus:
    """How many series could be judged and how many are too short (``HistoryStatus.message``)."""
    return find_regressions(s, host=host)[1]
