"""pgbench on PostgreSQL (kind ``pgbench``): the driver (:func:`prepare`, :func:`run`) and the pure parsers of
pgbench 15's output and per-transaction log.

Figures of a point:

- ``tps``: pgbench's own "tps = X (without initial connection time)"; ``transactions`` ("number of
  transactions actually processed"), ``errors`` ("number of failed transactions": serialization / deadlock
  failures; a client that hits any other error aborts the run, which fails the step), ``conn_ms`` ("initial
  connection time"), ``lat_stddev_ms``;
- ``lat_avg_ms``, ``lat_min_ms``, ``lat_max_ms`` (exact) and ``lat_p95_ms``, ``lat_p99_ms`` from the
  per-transaction log (``-l``: one line per transaction, ``client_id transaction_no time_us script_no
  time_epoch time_us [...]``, ``time_us`` replaced by ``failed`` / ``serialization`` / ``deadlock`` /
  ``skipped``). The log files are *streamed* (never loaded whole); percentiles come from a histogram
  (:class:`LatencyHistogram`): exact below 1,024 us, above that buckets of 1/1,024 of their value (relative
  error under 0.1 %); the nearest-rank rule (the smallest value whose cumulative count reaches
  ``ceil(p/100 * N)``), reported as the bucket's midpoint, clipped to the exact maximum;
- series ``tps`` and ``lat_avg_ms`` per second, from the log's completion timestamps: second ``i`` covers
  ``[t0 + i, t0 + i + 1)`` where ``t0`` is the earliest transaction start among the first line of each log
  file (completion minus latency: all clients start together, so that is the run's start to well under a
  millisecond); completions past the point's duration (transactions in flight when ``-T`` ended) count in the
  last second. A second without a completed transaction has ``lat_avg_ms`` 0.

The log files are deleted once read (about 30 bytes per transaction); the tool's output stays in ``tool.out``.
Live figures come from ``-P 1`` progress lines. Warm-up: a separate unmeasured pgbench run of ``warmup`` s on the
same server, without the log.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agents.apps import AppContext, Cancelled
from agents.apps import postgres as pg
from agents.apps.proc import run_tool
from labcontract.apps import MAX_SERIES_POINTS, AppResult, PgbenchParams
from labcontract.errors import AppStepError

PROGRESS_RE = re.compile(r"^progress:\s+(?P<t>[\d.]+)\s+s,\s+(?P<tps>[\d.]+)\s+tps,\s+lat\s+(?P<lat>\S+)\s+ms"
                         r"(?:\s+stddev\s+(?P<sd>[^,\s]+))?(?:.*?(?P<failed>\d+)\s+failed)?")
SUMMARY_RES: dict[str, re.Pattern[str]] = {
    "tps": re.compile(r"^tps = ([\d.]+) \(without initial connection time\)"),
    "transactions": re.compile(r"^number of transactions actually processed: (\d+)"),
    "errors": re.compile(r"^number of failed transactions: (\d+)"),
    "lat_avg_ms": re.compile(r"^latency average = ([\d.]+) ms"),
    "lat_stddev_ms": re.compile(r"^latency stddev = ([\d.]+) ms"),
    "conn_ms": re.compile(r"^initial connection time = ([\d.]+) ms"),
    "clients": re.compile(r"^number of clients: (\d+)"),
    "threads": re.compile(r"^number of threads: (\d+)"),
    "scale": re.compile(r"^scaling factor: (\d+)"),
}
FAILED_WORDS = frozenset({"failed", "serialization", "deadlock"})
MAX_LINE = 512                      # a log line longer than this is not pgbench's
EXACT_BELOW_US = 1024
LOG_PREFIX = "pgbench_log"


# --- parsers (pure) ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    t: float
    tps: float
    lat_ms: float | None      # None: no transaction in the interval (pgbench prints nan)
    failed: int


def parse_progress(line: str) -> Progress | None:
    """A ``-P`` line: ``progress: 2.0 s, 1203.9 tps, lat 1.656 ms stddev 0.940, 0 failed``."""
    m = PROGRESS_RE.match(line.strip())
    if m is None:
        return None
    try:
        lat: float | None = float(m["lat"])
    except ValueError:
        lat = None
    if lat is not None and not math.isfinite(lat):
        lat = None
    return Progress(float(m["t"]), float(m["tps"]), lat, int(m["failed"] or 0))


def parse_summary(text: str) -> dict[str, float]:
    """The figures of pgbench's final report (names as :data:`SUMMARY_RES`); the last occurrence wins."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        for name, rx in SUMMARY_RES.items():
            if (m := rx.match(line)) is not None:
                out[name] = float(m[1])
    return out


def parse_init(text: str) -> dict[str, float]:
    """``pgbench -i``'s last line: ``done in 0.38 s (drop tables 0.00 s, ..., primary keys 0.07 s).``"""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^done in ([\d.]+) s \((.*)\)\.?\s*\Z", line.strip())
        if m is None:
            continue
        out["load_s"] = float(m[1])
        for part in m[2].split(","):
            pm = re.match(r"^\s*([a-z -]+?)\s+([\d.]+) s\s*\Z", part)
            if pm is not None:
                out[re.sub(r"[^a-z]+", "_", pm[1]).strip("_") + "_s"] = float(pm[2])
    return out


def version_number(line: str) -> str:
    """``pgbench (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)`` -> ``15.20``; the line itself otherwise."""
    m = re.search(r"\(PostgreSQL\)\s+(\S+)", line)
    return m[1] if m else line.strip()[:128] or "unknown"


@dataclass
class LatencyHistogram:
    """Transaction latencies (us): exact count, sum, min and max; a bounded histogram for the percentiles."""

    count: int = 0
    sum_us: int = 0
    min_us: int = 0
    max_us: int = 0
    buckets: dict[int, int] = field(default_factory=dict)

    @staticmethod
    def key(us: int) -> int:
        if us < EXACT_BELOW_US:
            return us
        shift = us.bit_length() - 10
        return (us >> shift) << shift

    def add(self, us: int) -> None:
        self.min_us = us if self.count == 0 else min(self.min_us, us)
        self.max_us = max(self.max_us, us)
        self.count += 1
        self.sum_us += us
        k = self.key(us)
        self.buckets[k] = self.buckets.get(k, 0) + 1

    def percentile_us(self, pct: float) -> float | None:
        if self.count == 0:
            return None
        want = max(1, math.ceil(pct / 100.0 * self.count))
        seen = 0
        for k in sorted(self.buckets):
            seen += self.buckets[k]
            if seen >= want:
                width = 1 if k < EXACT_BELOW_US else 1 << (k.bit_length() - 10)
                return float(min(k + (width - 1) / 2.0, self.max_us))
        return float(self.max_us)


@dataclass
class TxLog:
    """What the per-transaction log files say."""

    hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    failed: int = 0
    skipped: int = 0
    bad_lines: int = 0
    t0_us: int = 0
    tps: list[float] = field(default_factory=list)
    lat_avg_ms: list[float] = field(default_factory=list)


def _fields(line: str) -> tuple[str, int] | None:
    """(time field, completion us since the epoch) of a log line; None if it is not one."""
    parts = line.split()
    if len(line) > MAX_LINE or len(parts) < 6 or not (parts[4].isdigit() and parts[5].isdigit()):
        return None
    return parts[2], int(parts[4]) * 1_000_000 + int(parts[5])


def _lines(path: Path) -> Iterator[str]:
    """The file's lines, each read with a bounded buffer: an overlong line comes out as one line of
    ``MAX_LINE + 1`` characters (its rest skipped), so :func:`_fields` refuses it."""
    with path.open("r", errors="replace") as f:
        while line := f.readline(MAX_LINE + 1):
            if len(line) > MAX_LINE and not line.endswith("\n"):
                while (rest := f.readline(1 << 16)) and not rest.endswith("\n"):
                    pass
            yield line


def _first_start_us(path: Path) -> int | None:
    for line in _lines(path):
        got = _fields(line)
        if got is not None:
            return got[1] - int(got[0]) if got[0].isdigit() else got[1]
    return None


def read_txlogs(paths: Iterable[Path], duration_s: int) -> TxLog:
    """Stream the per-transaction log files of one pgbench run (see the module's doc for the rules)."""
    files = sorted(paths)
    out = TxLog()
    starts = [s for p in files if (s := _first_start_us(p)) is not None]
    if not starts:
        return out
    out.t0_us = min(starts)
    n = max(1, min(duration_s, MAX_SERIES_POINTS))
    counts = [0] * n
    sums = [0] * n
    for p in files:
        for line in _lines(p):
            got = _fields(line)
            if got is None:
                out.bad_lines += line.strip() != ""
                continue
            word, done_us = got
            if not word.isdigit():
                if word in FAILED_WORDS:
                    out.failed += 1
                elif word == "skipped":
                    out.skipped += 1
                else:
                    out.bad_lines += 1
                continue
            us = int(word)
            out.hist.add(us)
            i = min(max(0, (done_us - out.t0_us) // 1_000_000), n - 1)
            counts[i] += 1
            sums[i] += us
    out.tps = [float(c) for c in counts]
    out.lat_avg_ms = [s / c / 1000.0 if c else 0.0 for s, c in zip(sums, counts, strict=True)]
    return out


def figures(summary: dict[str, float], log: TxLog, duration_s: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The point's metrics and series from pgbench's report and its log."""
    m: dict[str, float] = dict(summary)
    h = log.hist
    if h.count:
        m["lat_avg_ms"] = h.sum_us / h.count / 1000.0
        m["lat_min_ms"] = h.min_us / 1000.0
        m["lat_max_ms"] = h.max_us / 1000.0
        for pct in (95, 99):
            v = h.percentile_us(pct)
            if v is not None:
                m[f"lat_p{pct}_ms"] = v / 1000.0
    m.setdefault("transactions", float(h.count))
    m.setdefault("errors", float(log.failed))
    m.setdefault("tps", h.count / duration_s if duration_s > 0 else 0.0)
    if log.skipped:
        m["skipped"] = float(log.skipped)
    series = {"tps": log.tps, "lat_avg_ms": log.lat_avg_ms} if h.count else {}
    return m, series


def failure_reason(text: str, rc: int) -> str:
    errs = [x.strip() for x in text.splitlines()
            if x.startswith(("pgbench: error", "pgbench: fatal", "client ", "FATAL", "ERROR"))
            or "aborted" in x]
    last = errs[-3:] if errs else [x.strip() for x in text.splitlines()[-4:] if x.strip()]
    return f"pgbench failed (exit {rc}): " + " | ".join(last)[:900]


# --- the driver ----------------------------------------------------------------------------------------------


def _bindir(ctx: AppContext) -> Path:
    return pg.find_bindir(ctx.binaries.pg_bin_dir)


def _pgbench(ctx: AppContext, bindir: Path) -> str:
    if ctx.binaries.pgbench:
        if not os.access(ctx.binaries.pgbench, os.X_OK):
            raise AppStepError(f"pgbench: {ctx.binaries.pgbench} is not executable")
        return ctx.binaries.pgbench
    for cand in (bindir / "pgbench", Path("/usr/bin/pgbench")):
        if os.access(cand, os.X_OK):
            return str(cand)
    raise AppStepError("pgbench is not installed (install postgresql-contrib / postgresql-client, or set its path)")


def _versions(tool: str, bindir: Path) -> tuple[str, str]:
    return (version_number(pg.version_of(tool)),
            "PostgreSQL " + version_number(pg.server_version(bindir)))


def prepare(ctx: AppContext, p: PgbenchParams) -> AppResult:
    """initdb on the mounted filesystem, ``pgbench -i -s scale``, CHECKPOINT, stop the server."""
    t0 = time.monotonic()
    bindir = _bindir(ctx)
    tool = _pgbench(ctx, bindir)
    datadir = pg.pgdata_of(ctx)
    pg.initdb(ctx, bindir, datadir)
    t_init = time.monotonic() - t0
    with pg.running(ctx, bindir, datadir, shared_buffers_mb=p.shared_buffers_mb,
                    synchronous_commit=p.synchronous_commit) as srv:
        t1 = time.monotonic()
        pg.psql(ctx, bindir, srv, "postgres", f"CREATE DATABASE {pg.DATABASE}")
        rc, out = run_tool([tool, "-i", "-s", str(p.scale), "-q", *srv.conn_args(), pg.DATABASE], ctx.tool_out,
                           stop=ctx.stop, timeout_s=600 + p.scale * 60, env=pg.clean_env())
        if ctx.stop.is_set():
            raise Cancelled()
        if rc != 0:
            raise AppStepError(failure_reason(out, rc).replace("pgbench failed", "pgbench -i failed", 1))
        pg.psql(ctx, bindir, srv, pg.DATABASE, "CHECKPOINT")
        t_load = time.monotonic() - t1
    tool_version, server_version = _versions(tool, bindir)
    metrics = {"prepare_s": time.monotonic() - t0, "init_s": t_init, "load_s": t_load, "scale": float(p.scale),
               "rows": float(p.scale * 100_000)}
    metrics.update({f"pgbench_{k}": v for k, v in parse_init(out).items() if k != "load_s"})
    return AppResult(tool="pgbench", tool_version=tool_version, server_version=server_version, metrics=metrics,
                     seconds=time.monotonic() - t0, notes={"builtin": p.builtin})


def _bench_argv(tool: str, p: PgbenchParams, srv: pg.PgServer, clients: int, seconds: int, *extra: str) -> list[str]:
    threads = max(1, min(clients, os.cpu_count() or 1))
    return [tool, "-b", p.builtin, "-c", str(clients), "-j", str(threads), "-T", str(seconds), *extra,
            *srv.conn_args(), pg.DATABASE]


def run(ctx: AppContext, p: PgbenchParams, point: int) -> AppResult:
    """Start the server on the prepared PGDATA, warm up, measure ``point`` clients for ``p.time`` s, stop it."""
    t0 = time.monotonic()
    bindir = _bindir(ctx)
    tool = _pgbench(ctx, bindir)
    datadir = pg.pgdata_of(ctx)
    prefix = ctx.cwd / LOG_PREFIX
    for old in ctx.cwd.glob(LOG_PREFIX + ".*"):
        old.unlink()
    with pg.running(ctx, bindir, datadir, shared_buffers_mb=p.shared_buffers_mb,
                    synchronous_commit=p.synchronous_commit, max_connections=max(100, point + 10)) as srv:
        if p.warmup > 0:
            ctx.log.info("warming up: %d s at %d clients", p.warmup, point)
            rc, out = run_tool(_bench_argv(tool, p, srv, point, p.warmup), ctx.tool_out, stop=ctx.stop,
                               timeout_s=p.warmup + 600, env=pg.clean_env())
            if ctx.stop.is_set():
                raise Cancelled()
            if rc != 0:
                raise AppStepError("warm-up: " + failure_reason(out, rc))

        def on_line(line: str) -> None:
            if (pr := parse_progress(line)) is not None:
                live = {"point": float(point), "tps": pr.tps, "elapsed_s": pr.t}
                if pr.lat_ms is not None:
                    live["lat_avg_ms"] = pr.lat_ms
                ctx.live(live)

        ctx.log.info("measuring: %d s at %d clients", p.time, point)
        rc, out = run_tool(_bench_argv(tool, p, srv, point, p.time, "-P", "1", "-l", f"--log-prefix={prefix}"),
                           ctx.tool_out, on_line=on_line, stop=ctx.stop, timeout_s=p.time + 600, env=pg.clean_env())
        if ctx.stop.is_set():
            raise Cancelled()
        if rc != 0:
            raise AppStepError(failure_reason(out, rc))
        if srv.proc.poll() is not None:
            raise AppStepError(f"postgres exited ({srv.proc.returncode}) during the measurement")
    summary = parse_summary(out)
    if "tps" not in summary:
        raise AppStepError("the pgbench output holds no final report: " + failure_reason(out, rc))
    logs = list(ctx.cwd.glob(LOG_PREFIX + ".*"))
    try:
        txlog = read_txlogs(logs, p.time)
    finally:
        for f in logs:
            f.unlink(missing_ok=True)
    if txlog.hist.count == 0:
        raise AppStepError(f"pgbench wrote no per-transaction log ({len(logs)} files under {prefix}.*)")
    metrics, series = figures(summary, txlog, p.time)
    metrics["seconds"] = float(p.time)
    metrics["step_s"] = time.monotonic() - t0          # start, warm-up, measure, stop
    tool_version, server_version = _versions(tool, bindir)
    notes = {"builtin": p.builtin, "percentiles": "from the per-transaction log, histogram (<0.1 % resolution)"}
    if txlog.bad_lines:
        notes["log"] = f"{txlog.bad_lines} unreadable log lines skipped"
    return AppResult(tool="pgbench", tool_version=tool_version, server_version=server_version, metrics=metrics,
                     series=series, seconds=float(p.time), notes=notes)
