"""Canaries: a short fixed read-only workload (the built-in suite ``canary``) run on a schedule against a DUT,
whose figures are judged against that DUT's own canary history when the run ends.

Why a history of the same DUT and not a reference figure: two drives of one model differ, and a lab's hosts
differ more; what a canary catches is *this* device no longer measuring as it did (a worn or failing drive, a
firmware or kernel change, a host misconfigured after maintenance) before a review's results are taken on it.

The rule (per cell of the canary: its IOPS and mean latency, :data:`METRICS`): the last
up to :data:`WINDOW` successful canary runs of the same host, device, suite text (SHA-256), runtime override
and scale give a mean and a sample sd; the new run drifts when it is further from the mean than
``max(3 sd, 5% of the mean)``. The 5% floor keeps a very steady history (sd 0.5%) from flagging a 2% wobble.
Fewer than :data:`MIN_HISTORY` earlier runs: "history too short (n of 8)", nothing flagged (the same minimum
as the change-point detector, docs/statistics.md). Both directions drift: a canary asks "is this the device
it was?", and a DUT suddenly faster (a cache in front of it, a device swapped) is as suspect as a slower one.

The verdict is a health entry ``canary <device path>`` of the host (``fails`` counts drifted canaries in a
row, like the agents' checks), shown by ``labctl hosts`` and the web hosts page, cleared by
``labctl hosts release``. A DUT whose canary schedule was added with ``--quarantine`` goes to quarantine at
the first drift, through :func:`orchestrator.runs.health._quarantine` (logged, released by ``labctl hosts release``).
That flag lives in the schedule's submit template as its ``actor`` (:data:`QUARANTINE_ACTOR`): a template's
actor is never used (a firing is submitted as ``schedule:<name>``), so the flag needs no new column.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, defer, object_session

from orchestrator.cellmetrics import cell_entries
from orchestrator.cells import key_label
from orchestrator.queries import RunDetail
from orchestrator.runs import health
from orchestrator.states import RunState
from orchestrator.stats.changepoints import min_points
from orchestrator.stats.history import OUTLIER_SD, THRESHOLD_PCT
from orchestrator.stats.samples import MAX_FIGURE
from orchestrator.store.models import Host, Result, Run, Schedule

log = logging.getLogger(__name__)

SUITE = "canary"              # the built-in suite's name: a run of it on one DUT is judged
CHECK = "canary"              # the health entry: "canary <device path>"
MIN_HISTORY = min_points()     # earlier canary runs needed to judge: 8, as for the change-point detector
WINDOW = 20                    # the latest earlier runs the mean and sd come from
SIGMAS = OUTLIER_SD            # the band of history's last-point rule: max(3 sd, 5% of the mean)
FLOOR_PCT = THRESHOLD_PCT
QUARANTINE_ACTOR = "canary:quarantine"   # the schedule template's actor when --quarantine was given
MAX_DETAIL = 1000
# what is judged: IOPS and mean latency (MB/s says what IOPS says at the canary's fixed block sizes)
METRICS = ("iops", "lat_mean_us")

Figures = dict[tuple[str, str], float]   # (cell label, metric) -> value (the mean of a cell's repeats)


@dataclass(frozen=True)
class Drift:
    cell: str
    metric: str
    mean: float              # of the history
    sd: float
    value: float             # this run's
    change_pct: float        # (value - mean) / |mean| in %
    limit_pct: float         # max(3 sd, 5%) in % of the mean

    def line(self) -> str:
        return (f"{self.cell} {self.metric} {self.change_pct:+.1f}% ({_num(self.mean)} -> {_num(self.value)}; "
                f"limit ±{self.limit_pct:.1f}%)")


@dataclass(frozen=True)
class Verdict:
    state: Literal["ok", "drift", "too short", "no figures"]
    history: int             # earlier runs judged against (the most any figure had)
    drifts: tuple[Drift, ...] = ()
    worst: Drift | None = None   # ok: the figure closest to its limit

    @property
    def flagged(self) -> bool:
        return self.state == "drift"

    @property
    def detail(self) -> str:
        if self.state == "too short":
            return f"history too short ({self.history} of {MIN_HISTORY})"
        if self.state == "no figures":
            return "the run measured none of the canary's figures"
        if self.state == "ok":
            worst = f"; largest change {self.worst.line()}" if self.worst else ""
            return f"within its {self.history}-run history{worst}"
        text = f"drift against its {self.history}-run history: " + "; ".join(d.line() for d in self.drifts)
        return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL - 3] + "..."


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.2f}"


def figures(d: RunDetail) -> Figures:
    """The run's headline figures per cell (the mean over a cell's repeats)."""
    values: dict[tuple[str, str], list[float]] = {}
    for key, entry in cell_entries(d):
        for metric, v in entry.values.items():
            if metric in METRICS and v is not None and math.isfinite(v) and abs(v) <= MAX_FIGURE:
                values.setdefault((entry.label or key_label(key), metric), []).append(float(v))
    return {k: statistics.fmean(v) for k, v in values.items()}


def judge(history: Sequence[Mapping[tuple[str, str], float]], current: Mapping[tuple[str, str], float]) -> Verdict:
    """Judge ``current`` against ``history`` (earlier runs' figures, any order). A figure that fewer than
    :data:`MIN_HISTORY` earlier runs measured is not judged (older runs may lack a metric)."""
    if not current:
        return Verdict("no figures", len(history))
    drifts: list[Drift] = []
    judged: list[Drift] = []
    most = 0
    for (cell, metric), value in current.items():
        past = [h[(cell, metric)] for h in history if (cell, metric) in h]
        most = max(most, len(past))
        if len(past) < MIN_HISTORY:
            continue
        mean, sd = statistics.fmean(past), statistics.stdev(past)
        if mean == 0:
            continue                # a figure of 0 (nothing measured) has no relative limit
        limit = max(SIGMAS * sd, FLOOR_PCT / 100 * abs(mean))
        d = Drift(cell, metric, mean, sd, value, (value - mean) / abs(mean) * 100, limit / abs(mean) * 100)
        judged.append(d)
        if abs(value - mean) > limit:
            drifts.append(d)
    if not judged:
        return Verdict("too short", most)
    if drifts:
        return Verdict("drift", most, tuple(sorted(drifts, key=lambda x: -abs(x.change_pct))))
    return Verdict("ok", most, worst=max(judged, key=lambda x: abs(x.change_pct) / x.limit_pct))


def history_of(s: Session, run: Run, window: int = WINDOW) -> list[Figures]:
    """The figures of the latest ``window`` successful canary runs like ``run`` that ended before it."""
    q = select(Run).where(Run.host == run.host, Run.device == run.device, Run.suite_name == run.suite_name,
                             Run.suite_sha256 == run.suite_sha256, Run.state == str(RunState.SUCCEEDED),
                             Run.id != run.id)
    q = q.where(Run.runtime_override.is_(None) if run.runtime_override is None
                else Run.runtime_override == run.runtime_override)
    q = q.where(Run.scale.is_(None) if run.scale is None else Run.scale == run.scale)
    if run.ended_at is not None:
        q = q.where(Run.ended_at <= run.ended_at)
    runs = s.scalars(q.order_by(Run.ended_at.desc()).limit(window)).all()
    return [f for r in runs if (f := figures(_detail(s, r)))]


def _detail(s: Session, run: Run) -> RunDetail:
    """The run's steps and results (not its large per-second columns)."""
    results = {r.step_id: r for r in s.scalars(select(Result).where(Result.run_id == run.id)
                                                .options(defer(Result.series), defer(Result.lat_hist)))}
    steps = sorted(run.steps, key=lambda st: (st.seq, st.round, st.host))
    return RunDetail(run=run, steps=steps, results=results, preconditions=[])


def is_canary(run: Run) -> bool:
    return run.suite_name == SUITE and run.topology is None and len(run.devices or [run.device]) == 1


def schedule_name(host: str, device_name: str) -> str:
    return f"canary.{host}.{device_name}"


def quarantines(s: Session, host: Host, device_path: str) -> bool:
    """Whether the DUT's canary schedule was added with ``--quarantine``."""
    dev = health.device_of(host, device_path)
    if dev is None:
        return False
    sch = s.get(Schedule, schedule_name(host.name, dev.name))
    return sch is not None and (sch.submit or {}).get("actor") == QUARANTINE_ACTOR


def record(host: Host, device_path: str, verdict: Verdict, now: float, run_id: str,
           quarantine: bool) -> health.Quarantined | None:
    """Write the verdict as the host's ``canary <path>`` health entry; quarantine a drifted DUT if asked."""
    entries = dict(host.health or {})
    key = f"{CHECK} {device_path}"
    prev = entries.get(key) or {}
    if verdict.state in ("too short", "no figures") and int(prev.get("fails", 0)) > 0:
        # a run that judged nothing (a --runtime/--scale or edited text of the suite: another history, or any
        # suite named canary) never clears a drift: only a canary judged ok does (red team)
        return None
    fails = int(prev.get("fails", 0)) + 1 if verdict.flagged else 0
    entries[key] = {"fails": fails, "detail": verdict.detail, "at": now, "observed": run_id}
    host.health = entries
    if not (verdict.flagged and quarantine):
        return None
    return health.quarantine(host, device_path, f"canary of run {run_id} drifted: {verdict.detail}", now)


def after_run_end(run: Run, now: float) -> None:
    """The controller's hook, in the transaction that ended ``run``: a canary judgement that fails on its
    data is logged and never keeps the run from ending (a store error still aborts the transaction)."""
    s = object_session(run)
    if s is None or not is_canary(run):
        return
    try:
        on_run_end(s, run, now)
    except SQLAlchemyError:
        raise
    except Exception:
        log.exception("canary judgement of run %s failed", run.id, extra={"run": run.id, "host": run.host})


def on_run_end(s: Session, run: Run, now: float) -> Verdict | None:
    """Judge a canary run that just ended (None: not a canary, or it did not succeed: a failed canary says
    nothing about drift, and its failure is already the run's and its steps' news)."""
    if not is_canary(run) or run.state != RunState.SUCCEEDED:
        return None
    host = s.get(Host, run.host)
    if host is None or health.device_of(host, run.device) is None:
        return None
    current = figures(_detail(s, run))
    verdict = judge(history_of(s, run), current)
    q = record(host, run.device, verdict, now, run.id, quarantines(s, host, run.device))
    extra = {"run": run.id, "host": run.host}
    if verdict.flagged:
        log.warning("canary of %s drifted: %s", run.device, verdict.detail, extra=extra)
    else:
        log.info("canary of %s: %s", run.device, verdict.detail, extra=extra)
    if q is not None:
        log.info("device %s quarantined by its canary", run.device, extra=extra)
    return verdict


# --- what labctl canary and the web API share: a DUT's canary name, and the canaries with their verdicts -----

NAME_MAX = 64              # a schedule name's limit (labcontract.protocol.ScheduleAdd)
DEFAULT_CRON = "0 3 * * *"
# a canary that could not start within this long after its firing expires: the DUT was busy (a review) or
# quarantined, and stale canaries must not pile up in the queue
EXPIRES_AFTER_S = 6 * 3600
SOURCE = "labctl canary"   # what a refusal of a DUT or of a name is about, both ways (labctl, the web API)


def resolve(s: Session, host: str, device: str) -> tuple[str, str]:
    """(name, path) of a declared DUT of ``host`` named by name, path or by-id link; every problem of the target
    at once (SubmissionError)."""
    from labcontract.errors import Problem, SubmissionError
    from orchestrator.runs.submission import submission_problems
    from orchestrator.store.models import find_device

    problems = submission_problems(s, host, [device])
    h = s.get(Host, host)
    dev = find_device(h, device) if h is not None and not problems else None
    if dev is None:
        raise SubmissionError(SOURCE, problems or [Problem("DEVICE", f"{device!r}: not found")])
    return dev.name, dev.path


def checked_name(host: str, device_name: str) -> str:
    """The canary schedule's name of a DUT; SubmissionError when it is longer than a schedule name may be."""
    from labcontract.errors import Problem, SubmissionError

    name = schedule_name(host, device_name)
    if len(name) > NAME_MAX:
        raise SubmissionError(SOURCE, [Problem("", f"schedule name {name!r} is longer than {NAME_MAX} "
                                                   "characters (a shorter host or DUT name is needed)")])
    return name


def listing(s: Session) -> list[dict[str, object]]:
    """Every canary schedule with its DUT's last verdict, as ``labctl canary list`` shows it (with or without
    ``--api``: GET /api/canaries answers these)."""
    out: list[dict[str, object]] = []
    for sch in s.scalars(select(Schedule).where(Schedule.name.startswith("canary.")).order_by(Schedule.name)):
        sub = sch.submit or {}
        host = s.get(Host, str(sub.get("host")))
        devices = sub.get("devices") or []
        dev = health.device_of(host, str(devices[0])) if host is not None and devices else None
        entry = (host.health or {}).get(f"{CHECK} {dev.path}") if host is not None and dev is not None else None
        verdict = "-"
        if isinstance(entry, dict):
            fails = int(entry.get("fails") or 0)
            verdict = ("DRIFT" + (f" x{fails}" if fails > 1 else "") + ": " if fails else "ok: ") \
                + str(entry.get("detail") or "")
        if dev is not None and dev.quarantined_at is not None:
            verdict = f"QUARANTINED: {dev.quarantine_reason}"
        out.append({"name": sch.name, "cron": sch.cron, "quarantine": sub.get("actor") == QUARANTINE_ACTOR,
                    "next_fire_at": sch.next_fire_at, "disabled_reason": sch.disabled_reason or "",
                    "last_run_id": sch.last_run_id, "verdict": verdict, "last_error": sch.last_error or ""})
    return out
