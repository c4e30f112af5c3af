"""sysbench OLTP on MariaDB (kind ``sysbench``): the driver (:func:`prepare`, :func:`run`) and the pure parsers
of sysbench 1.0's output.

Figures of a point (:func:`parse_run`), from the final report of ``sysbench ... --report-interval=1
--histogram=on --percentile=99 run``:

- ``tps`` / ``qps``: "transactions: N (X per sec.)" / "queries: N (X per sec.)";
- ``lat_avg_ms``, ``lat_min_ms``, ``lat_max_ms``: the "Latency (ms)" block;
- ``lat_p95_ms`` and ``lat_p99_ms``: from the latency histogram (:func:`histogram_percentile`): the value of the
  first bucket, in ascending order, at which the cumulative count reaches ``ceil(p/100 * total)`` — the way
  sysbench computes its own percentile, so ``lat_p99_ms`` equals its "99th percentile" line to its rounding
  (buckets are logarithmic, about 1.7 % wide). Without a histogram, p99 falls back to that line;
- ``errors``, ``reconnects`` (counts) and their rates ``errors_per_s``, ``reconnects_per_s``;
- series (one value per ``--report-interval=1`` line): ``tps``, ``qps``, ``lat_p99_ms``, ``errors_per_s``,
  ``reconnects_per_s``.

Warm-up: sysbench 1.0 has no ``--warmup-time``; a separate ``run`` of ``warmup`` seconds precedes the measured
one, on the same server (caches warm), its figures not kept.
"""

from __future__ import annotations

import math
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from agents.apps import AppContext
from agents.apps import mariadb as db
from agents.apps.proc import run_tool
from labcontract.apps import MAX_SERIES_POINTS, AppResult, SysbenchParams
from labcontract.errors import AppStepError

INTERVAL_RE = re.compile(
    r"^\[\s*(?P<t>\d+)s\s*\]\s+thds:\s*(?P<thds>\d+)\s+tps:\s*(?P<tps>[\d.]+)\s+qps:\s*(?P<qps>[\d.]+)"
    r".*?lat\s+\(ms,(?P<pct>\d+)%\):\s*(?P<lat>[\d.]+)\s+err/s:\s*(?P<err>[\d.]+)\s+reconn/s:\s*(?P<reconn>[\d.]+)")
HIST_RE = re.compile(r"^\s*(?P<v>[\d.]+)\s+\|[* ]*\s(?P<n>\d+)\s*\Z")
TOTAL_RES: dict[str, re.Pattern[str]] = {
    "transactions": re.compile(r"^\s*transactions:\s+(\d+)\s+\(([\d.]+) per sec\.\)"),
    "queries": re.compile(r"^\s*queries:\s+(\d+)\s+\(([\d.]+) per sec\.\)"),
    "errors": re.compile(r"^\s*ignored errors:\s+(\d+)\s+\(([\d.]+) per sec\.\)"),
    "reconnects": re.compile(r"^\s*reconnects:\s+(\d+)\s+\(([\d.]+) per sec\.\)"),
}
TIME_RE = re.compile(r"^\s*total time:\s+([\d.]+)s")
EVENTS_RE = re.compile(r"^\s*total number of events:\s+(\d+)")
LAT_RE = re.compile(r"^\s*(min|avg|max|sum|(\d+)th percentile):\s+([\d.]+)")
SERIES = ("tps", "qps", "lat_p99_ms", "errors_per_s", "reconnects_per_s")
PREPARE_THREADS_MAX = 8


@dataclass
class Interval:
    t: int
    threads: int
    tps: float
    qps: float
    lat_pct: int
    lat_ms: float
    errors_per_s: float
    reconnects_per_s: float


@dataclass
class RunFigures:
    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)
    histogram: list[tuple[float, int]] = field(default_factory=list)
    seconds: float = 0.0


def parse_interval(line: str) -> Interval | None:
    m = INTERVAL_RE.match(line)
    if m is None:
        return None
    return Interval(int(m["t"]), int(m["thds"]), float(m["tps"]), float(m["qps"]), int(m["pct"]), float(m["lat"]),
                    float(m["err"]), float(m["reconn"]))


def parse_histogram(text: str) -> list[tuple[float, int]]:
    """The (value ms, count) buckets of the "Latency histogram" block, ascending."""
    out: list[tuple[float, int]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("Latency histogram"):
            inside, out = True, []
            continue
        if inside:
            m = HIST_RE.match(line)
            if m is not None:
                out.append((float(m["v"]), int(m["n"])))
            elif "distribution" not in line:
                inside = False
    return sorted(out)


def histogram_percentile(hist: list[tuple[float, int]], pct: float) -> float | None:
    """The value of the first bucket where the cumulative count reaches ceil(pct/100 * total)."""
    total = sum(n for _, n in hist)
    if total <= 0:
        return None
    want = max(1, math.ceil(pct / 100.0 * total))
    seen = 0
    for v, n in hist:
        seen += n
        if seen >= want:
            return v
    return hist[-1][0]


def parse_run(text: str, intervals: list[Interval] | None = None) -> RunFigures:
    """The figures of a ``sysbench ... run`` output (see the module's doc). AppStepError if it holds no final report.
    ``intervals``: the report-interval lines as read while the tool ran (the series then come from them, not from
    ``text``, which may be only the output's tail)."""
    fig = RunFigures()
    series: dict[str, list[float]] = {k: [] for k in SERIES}
    lat: dict[str, float] = {}
    threads = 0
    seen: list[Interval] = [] if intervals is None else intervals
    for line in text.splitlines():
        if (iv := parse_interval(line)) is not None:
            if intervals is None:
                seen.append(iv)
            continue
        if line.startswith("Number of threads:"):
            threads = int(line.split(":")[1].strip() or 0)
        for name, rx in TOTAL_RES.items():
            if (m := rx.match(line)) is not None:
                fig.metrics[name] = float(m[1])
                fig.metrics[{"transactions": "tps", "queries": "qps", "errors": "errors_per_s",
                             "reconnects": "reconnects_per_s"}[name]] = float(m[2])
        if (m := TIME_RE.match(line)) is not None:
            fig.seconds = float(m[1])
        if (m := EVENTS_RE.match(line)) is not None:
            fig.metrics["events"] = float(m[1])
        if (m := LAT_RE.match(line)) is not None:
            lat[m[2] or m[1]] = float(m[3])
    for iv in seen[:MAX_SERIES_POINTS]:
        for k, v in zip(SERIES, (iv.tps, iv.qps, iv.lat_ms, iv.errors_per_s, iv.reconnects_per_s), strict=True):
            series[k].append(v)
        threads = iv.threads
    if "tps" not in fig.metrics or "avg" not in lat:
        raise AppStepError("the sysbench output holds no final report")
    fig.metrics.update(lat_avg_ms=lat["avg"], lat_min_ms=lat.get("min", 0.0), lat_max_ms=lat.get("max", 0.0))
    fig.histogram = parse_histogram(text)
    p95 = histogram_percentile(fig.histogram, 95)
    p99 = histogram_percentile(fig.histogram, 99)
    if p95 is not None:
        fig.metrics["lat_p95_ms"] = p95
    if p99 is None:
        p99 = lat.get("99")
    if p99 is not None:
        fig.metrics["lat_p99_ms"] = p99
    if threads:
        fig.metrics["threads"] = float(threads)
    fig.metrics["seconds"] = fig.seconds
    fig.series = {k: v for k, v in series.items() if v}
    return fig


def failure_reason(text: str, rc: int) -> str:
    fatal = list(dict.fromkeys(x.strip() for x in text.splitlines() if x.startswith("FATAL")))
    return f"sysbench failed (exit {rc}): " + (" | ".join(fatal[:3]) if fatal else text.strip()[-400:])


def tool_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out[1][:128] if len(out) > 1 and out[0] == "sysbench" else "unknown"


def _binary(ctx: AppContext) -> str:
    return db.find_binary(ctx.binaries.sysbench, "sysbench", ("/usr/bin/sysbench", "/usr/local/bin/sysbench"))


def _argv(ctx: AppContext, p: SysbenchParams, srv: db.MariaServer, *extra: str) -> list[str]:
    return [_binary(ctx), p.test, "--db-driver=mysql", f"--mysql-socket={srv.socket}", "--mysql-user=root",
            f"--mysql-db={db.DATABASE}", f"--tables={p.tables}", f"--table-size={p.table_size}", *extra]


def _datadir(ctx: AppContext) -> Path:
    return ctx.mountpoint / "mysql"


def prepare(ctx: AppContext, p: SysbenchParams) -> AppResult:
    """Initialise the datadir on the mounted filesystem, load the tables, stop the server."""
    t0 = time.monotonic()
    datadir = _datadir(ctx)
    db.install_db(ctx, datadir)
    t_init = time.monotonic() - t0
    with db.running(ctx, p, datadir) as srv:
        t1 = time.monotonic()
        threads = min(p.tables, PREPARE_THREADS_MAX)
        rc, out = run_tool(_argv(ctx, p, srv, f"--threads={threads}", "prepare"), ctx.tool_out, stop=ctx.stop)
        if rc != 0:
            raise AppStepError(failure_reason(out, rc))
        t_load = time.monotonic() - t1
    return AppResult(tool="sysbench", tool_version=tool_version(_binary(ctx)), server_version=db.server_version(ctx),
                     metrics={"prepare_s": time.monotonic() - t0, "init_s": t_init, "load_s": t_load,
                              "rows": float(p.tables * p.table_size), "tables": float(p.tables)},
                     seconds=time.monotonic() - t0, notes={"test": p.test})


def run(ctx: AppContext, p: SysbenchParams, point: int) -> AppResult:
    """Start the server on the prepared data, warm up, measure ``point`` threads for ``p.time`` s, stop it."""
    datadir = _datadir(ctx)
    if not (datadir / db.DATABASE).is_dir():
        raise AppStepError(f"the prepared datadir {datadir} holds no database {db.DATABASE}")
    with db.running(ctx, p, datadir) as srv:
        if p.warmup > 0:
            ctx.log.info("warming up: %d s at %d threads", p.warmup, point)
            rc, out = run_tool(_argv(ctx, p, srv, f"--threads={point}", f"--time={p.warmup}", "run"), ctx.tool_out,
                               stop=ctx.stop)
            if rc != 0:
                raise AppStepError("warm-up: " + failure_reason(out, rc))

        intervals: list[Interval] = []

        def on_line(line: str) -> None:
            if (iv := parse_interval(line)) is not None:
                if len(intervals) < MAX_SERIES_POINTS:
                    intervals.append(iv)
                ctx.live({"point": float(point), "tps": iv.tps, "qps": iv.qps, f"lat_p{iv.lat_pct}_ms": iv.lat_ms,
                          "errors_per_s": iv.errors_per_s, "reconnects_per_s": iv.reconnects_per_s})

        ctx.log.info("measuring: %d s at %d threads", p.time, point)
        rc, out = run_tool(_argv(ctx, p, srv, f"--threads={point}", f"--time={p.time}", "--report-interval=1",
                                 "--histogram=on", "--percentile=99", "run"),
                           ctx.tool_out, on_line=on_line, stop=ctx.stop, timeout_s=p.time + 600)
        if rc != 0:
            raise AppStepError(failure_reason(out, rc))
        if srv.proc.poll() is not None:
            raise AppStepError(f"mariadbd exited ({srv.proc.returncode}) during the measurement")
    fig = parse_run(out, intervals)
    fig.metrics["threads"] = float(point)
    return AppResult(tool="sysbench", tool_version=tool_version(_binary(ctx)), server_version=db.server_version(ctx),
                     metrics=fig.metrics, series=fig.series, seconds=fig.seconds,
                     notes={"test": p.test, "p95_p99": "from the latency histogram"})
