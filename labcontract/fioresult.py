"""Parse fio ``--output-format=json+`` output into the project's result schema.

The job files agents run (:mod:`labcontract.fiojob`) set ``group_reporting=1``,
``lat_percentiles=1`` and ``percentile_list=50:90:95:99:99.9:99.99``, so for each direction
fio reports *total* latency (``lat_ns``: submission + completion) with ``percentile`` and,
in json+, ``bins`` (histogram: bin value in ns as a string -> count). fio keeps completion
latency (``clat_ns``, what fio prints by default and many reviews quote) beside it, with its
own bins: both are read, each into its own fields (``lat`` / ``percentiles_ns`` total,
``clat`` / ``clat_percentiles_ns`` completion), never mixed. ``slat_ns`` is not read.

``fio --client`` output (``client_stats`` instead of ``jobs``: one entry per server, and an ``All clients`` sum
with no bins) is read the same way: the servers' entries are the jobs, the sum is only checked against them.

Percentiles come from the bins for the six points of the job's ``percentile_list`` and, from
the bins only, 99.999 when the step holds at least :data:`TAIL_BEYOND` I/Os beyond it
(1,000,000 I/Os): below that it would be one of the largest few samples, which max says.

How numbers are combined (several ``jobs`` entries, and read + write):

* counts, bytes, IOPS and bandwidth are summed; runtimes take the maximum;
* latency min/max are the min of mins / max of maxes over parts that did I/O;
* latency mean is the mean over all I/Os (each part weighted by its sample count ``N``);
* latency stddev is pooled exactly the way fio pools it for ``group_reporting`` and
  ``unified_rw_reporting`` (Chan et al. parallel algorithm, ``stat.c:__sum_stat``): fio's
  reported stddev is the *sample* stddev ``sqrt(S / (n - 1))``, so each part contributes
  ``S_i = stddev_i**2 * (n_i - 1)`` and the pooled value is::

      mean = sum(n_i * mean_i) / N
      S    = sum(S_i) + sum(n_i * (mean_i - mean)**2)
      stddev = sqrt(S / (N - 1))        (0 when N <= 1, as fio prints it)

  This reproduces fio's own ``mixed`` read+write numbers (``unified_rw_reporting=both``).
* percentiles come from the merged histogram bins with fio's own selection rule
  (:func:`percentiles_from_bins`), never from averaging percentiles. Without bins (plain
  ``json`` output) fio's reported percentiles are used only when exactly one part did I/O;
  otherwise percentiles are omitted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from labcontract.errors import FioError
from labcontract.hostcpu import HostCpu

__all__ = [
    "PERCENTILE_KEYS",
    "PERCENTILE_POINTS",
    "TAIL_BEYOND",
    "TAIL_POINTS",
    "Combined",
    "CpuStats",
    "DirectionStats",
    "JobMetrics",
    "LatencyStats",
    "StepMetrics",
    "bin_percentiles",
    "fio_report",
    "latency_bins",
    "latency_bins_both",
    "parse_fio_groups",
    "parse_fio_jobs",
    "parse_fio_output",
    "percentile_key",
    "percentiles_from_bins",
    "pool_mean_stddev",
    "summary_row",
]

#: The percentiles the job files ask fio for (same list as ``labcontract.fiojob.PERCENTILES``).
PERCENTILE_POINTS: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9, 99.99)


def percentile_key(point: float) -> str:
    """``50.0 -> "p50"``, ``99.9 -> "p99.9"``, ``99.99 -> "p99.99"``."""
    return f"p{point:g}"


#: Points read from the json+ bins only (fio is not asked for them), each when the sample holds it.
TAIL_POINTS: tuple[float, ...] = (99.999,)
#: A percentile is given only with at least this many I/Os beyond it (p99.999: 1,000,000 I/Os).
TAIL_BEYOND = 10

#: The only keys allowed in ``percentiles_ns``.
PERCENTILE_KEYS: frozenset[str] = frozenset(percentile_key(p) for p in (*PERCENTILE_POINTS, *TAIL_POINTS))

# fio compares the cumulative bin count against ``(long double) p / 100.0 * nr``. On x86-64
# Linux (where the lab's agents run) long double is the x87 80-bit format: 64-bit significand.
_LONG_DOUBLE_BITS = 64


# --------------------------------------------------------------------------- models


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _check_percentile_keys(value: dict[str, float]) -> dict[str, float]:
    unknown = sorted(set(value) - PERCENTILE_KEYS)
    if unknown:
        allowed = ", ".join(percentile_key(p) for p in PERCENTILE_POINTS)
        raise ValueError(f"unknown percentile key(s) {', '.join(unknown)}; allowed: {allowed}")
    return value


class LatencyStats(_Model):
    """Latency of one direction, in nanoseconds: total (submission + completion) in ``DirectionStats.lat``,
    completion only in ``DirectionStats.clat``."""

    min_ns: float = Field(ge=0)
    mean_ns: float = Field(ge=0)
    max_ns: float = Field(ge=0)
    stddev_ns: float = Field(ge=0)
    samples: int = Field(ge=1)
    percentiles_ns: dict[str, float] = Field(default_factory=dict)

    @field_validator("percentiles_ns")
    @classmethod
    def _known_keys(cls, value: dict[str, float]) -> dict[str, float]:
        return _check_percentile_keys(value)


class DirectionStats(_Model):
    """One direction (read or write), summed over every job entry of the step."""

    ios: int = Field(ge=0)
    io_bytes: int = Field(ge=0)
    iops: float = Field(ge=0)
    bw_bytes: float = Field(ge=0)
    runtime_ms: int = Field(ge=0)
    lat: LatencyStats | None = None    # total latency (fio's lat_ns)
    clat: LatencyStats | None = None   # completion latency (clat_ns); None in results stored before it was read


class Combined(_Model):
    """Review metrics over both directions. Latency fields are None when no I/O was done."""

    iops: float = Field(ge=0)
    bw_bytes: float = Field(ge=0)
    ios: int = Field(ge=0)
    lat_mean_ns: float | None = None
    lat_max_ns: float | None = None
    lat_stddev_ns: float | None = None
    percentiles_ns: dict[str, float] = Field(default_factory=dict)        # total latency
    clat_mean_ns: float | None = None                                     # completion latency (None: not read)
    clat_percentiles_ns: dict[str, float] = Field(default_factory=dict)

    @field_validator("percentiles_ns", "clat_percentiles_ns")
    @classmethod
    def _known_keys(cls, value: dict[str, float]) -> dict[str, float]:
        return _check_percentile_keys(value)


class CpuStats(_Model):
    """The CPU fio's own processes used over the step (``usr_cpu`` / ``sys_cpu`` of its job entries), in % of one
    CPU (several jobs can use more than 100%), and per completed I/O: the host CPU a host-driven card costs."""

    usr_pct: float = Field(ge=0, le=1e6)
    sys_pct: float = Field(ge=0, le=1e6)
    us_per_io: float | None = Field(default=None, ge=0)   # CPU µs (user + system) per I/O; None without I/O


class StepMetrics(_Model):
    """Everything the controller keeps from one fio run (one workload step)."""

    fio_version: str
    jobs: int = Field(ge=1)
    runtime_ms: int = Field(ge=0)
    read: DirectionStats
    write: DirectionStats
    combined: Combined
    errors: int
    cpu: CpuStats | None = None   # None from results stored before it was read, or fio output without it
    # the whole host's CPU over the step (the agent's /proc/stat readings, labcontract.hostcpu), added by the
    # controller; None: not read (Windows, results stored before, a reading refused)
    host_cpu: HostCpu | None = None


# --------------------------------------------------------------------------- pure math


def pool_mean_stddev(parts: Iterable[tuple[int, float, float]]) -> tuple[int, float, float]:
    """Pool ``(count, mean, stddev)`` triples into one ``(count, mean, stddev)``.

    ``stddev`` is fio's sample standard deviation, ``sqrt(S / (n - 1))``; the result uses the
    same convention (see the module docstring for the formula). Parts with count 0 are
    ignored; an empty input gives ``(0, 0.0, 0.0)``.
    """
    items = list(parts)
    if any(n < 0 or sd < 0 for n, _, sd in items):
        raise ValueError("sample counts and standard deviations must not be negative")
    live = [(n, mean, sd) for n, mean, sd in items if n > 0]
    if not live:
        return 0, 0.0, 0.0
    if len(live) == 1:  # returned as given: no rounding noise for a single job/direction
        n, mean, sd = live[0]
        return n, float(mean), float(sd)
    total = sum(n for n, _, _ in live)
    mean = math.fsum(n * m for n, m, _ in live) / total
    s = math.fsum(sd * sd * (n - 1) + n * (m - mean) ** 2 for n, m, sd in live)
    stddev = math.sqrt(s / (total - 1)) if total > 1 else 0.0
    return total, mean, stddev


def _round_significand(x: Fraction, bits: int) -> Fraction:
    """Round ``x`` to the nearest binary float with a ``bits``-bit significand (ties to even)."""
    if x == 0:
        return x
    sign = -1 if x < 0 else 1
    x = abs(x)
    exp = x.numerator.bit_length() - x.denominator.bit_length()
    if x < Fraction(2) ** exp:
        exp -= 1
    scale = Fraction(2) ** (bits - 1 - exp)
    scaled = x * scale
    q, r = divmod(scaled.numerator, scaled.denominator)
    if 2 * r > scaled.denominator or (2 * r == scaled.denominator and q % 2 == 1):
        q += 1
    return sign * Fraction(q) / scale


def _needed_count(point: float, total: int) -> int:
    """Smallest cumulative count ``c`` for which fio's test ``c >= p / 100.0 * nr`` holds.

    fio evaluates ``(long double) plist[j] / 100.0 * nr`` (``stat.c:calc_clat_percentiles``);
    both operations are emulated with correct rounding to the long double significand, so
    the rare ``p/100*nr`` values that sit on an integer are decided exactly as fio does.
    """
    ratio = _round_significand(Fraction(point) / 100, _LONG_DOUBLE_BITS)
    threshold = _round_significand(ratio * total, _LONG_DOUBLE_BITS)
    return math.ceil(threshold)


def percentiles_from_bins(
    bins: Mapping[int, int], points: Sequence[float] = PERCENTILE_POINTS
) -> dict[str, float]:
    """Percentiles (ns) of a json+ latency histogram, by fio's own rule.

    For each point ``p`` fio reports the value of the first bin (in ascending value order)
    whose cumulative count reaches ``p / 100 * total``. Keys are ``percentile_key(p)``
    (``"p50"``, ``"p99.9"``). An empty or all-zero histogram gives ``{}``.
    """
    for p in points:
        if not 0 < p <= 100:
            raise ValueError(f"percentile point out of range (0, 100]: {p!r}")
    for value, count in bins.items():
        if count < 0:
            raise ValueError(f"negative count {count} in latency bin {value}")
    ordered = sorted((v, c) for v, c in bins.items() if c > 0)
    total = sum(c for _, c in ordered)
    if total == 0:
        return {}
    result: dict[str, float] = {}
    for p in points:
        need = _needed_count(p, total)
        cumulative = 0
        for value, count in ordered:
            cumulative += count
            if cumulative >= need:
                result[percentile_key(p)] = float(value)
                break
    return result


# --------------------------------------------------------------------------- parsing


@dataclass
class _LatPart:
    """Latency of one job entry in one direction, as fio printed it."""

    n: int
    mean: float
    stddev: float
    min: float
    max: float
    bins: dict[int, int] | None
    percentiles: dict[str, float]


@dataclass
class _DirAcc:
    ios: int = 0
    io_bytes: int = 0
    iops: float = 0.0
    bw_bytes: float = 0.0
    runtime_ms: int = 0
    lat: list[_LatPart] = field(default_factory=list)
    clat: list[_LatPart] = field(default_factory=list)


def bin_percentiles(bins: Mapping[int, int]) -> dict[str, float]:
    """The percentiles of a merged json+ histogram the lab keeps: the job's six and each of :data:`TAIL_POINTS`
    the histogram holds at least :data:`TAIL_BEYOND` I/Os beyond."""
    total = sum(c for c in bins.values() if c > 0)
    points = (*PERCENTILE_POINTS, *(p for p in TAIL_POINTS if total * (100.0 - p) / 100.0 >= TAIL_BEYOND))
    return percentiles_from_bins(bins, points)


def _merged_percentiles(parts: Sequence[_LatPart]) -> dict[str, float]:
    if not parts:
        return {}
    if all(p.bins is not None for p in parts):
        merged: dict[int, int] = {}
        for part in parts:
            assert part.bins is not None
            for value, count in part.bins.items():
                merged[value] = merged.get(value, 0) + count
        return bin_percentiles(merged)
    if len(parts) == 1:
        return dict(parts[0].percentiles)
    return {}


def _latency(parts: Sequence[_LatPart]) -> LatencyStats | None:
    if not parts:
        return None
    n, mean, stddev = pool_mean_stddev((p.n, p.mean, p.stddev) for p in parts)
    return LatencyStats(
        min_ns=min(p.min for p in parts),
        mean_ns=mean,
        max_ns=max(p.max for p in parts),
        stddev_ns=stddev,
        samples=n,
        percentiles_ns=_merged_percentiles(parts),
    )


class _Reader:
    """Typed access to the decoded JSON with error messages that say where."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str) -> FioError:
        return FioError(message, path=self.source)

    def obj(self, parent: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
        value = parent.get(key)
        if not isinstance(value, dict):
            raise self.fail(f"{where}.{key}: missing or not an object")
        return value

    def int_(self, parent: Mapping[str, Any], key: str, where: str) -> int:
        value = parent.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{where}.{key}: expected an integer, got {value!r}")
        return value

    def num(self, parent: Mapping[str, Any], key: str, where: str) -> float:
        value = parent.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(f"{where}.{key}: expected a number, got {value!r}")
        return float(value)


def _decode_reports(text: str, source: str) -> dict[str, Any]:
    """The last JSON report in ``text``, skipping anything before the first line starting with '{'."""
    start = -1
    offset = 0
    for line in text.splitlines(keepends=True):
        if line.startswith("{"):
            start = offset
            break
        offset += len(line)
    if start < 0:
        what = "empty output" if not text.strip() else "no JSON object found (no line starts with '{')"
        raise FioError(f"{what}; expected fio --output-format=json+ output", path=source)
    decoder = json.JSONDecoder()
    report: object = None
    pos = start
    # With --status-interval fio prints one full report after another; the last is final.
    while pos < len(text) and text[pos] == "{":
        try:
            report, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise FioError(
                f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg} (truncated output?)",
                path=source,
            ) from None
        except (ValueError, RecursionError) as exc:    # an integer of thousands of digits, nesting past the stack
            raise FioError(f"unreadable JSON: {str(exc)[:200]}", path=source) from None
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if not isinstance(report, dict):
        raise FioError("fio output is not a JSON object", path=source)
    return report


def _read_direction(r: _Reader, job: Mapping[str, Any], name: str, where: str, acc: _DirAcc) -> None:
    d = r.obj(job, name, where)
    w = f"{where}.{name}"
    acc.ios += r.int_(d, "total_ios", w)
    acc.io_bytes += r.int_(d, "io_bytes", w)
    acc.iops += r.num(d, "iops", w)
    acc.bw_bytes += r.num(d, "bw_bytes", w)
    acc.runtime_ms = max(acc.runtime_ms, r.int_(d, "runtime", w))
    part = _lat_part(r, r.obj(d, "lat_ns", w), f"{w}.lat_ns")
    if part is not None:
        acc.lat.append(part)
    raw_clat = d.get("clat_ns")   # optional: completion latency, beside the total
    if raw_clat is not None:
        if not isinstance(raw_clat, dict):
            raise r.fail(f"{w}.clat_ns: expected an object")
        part = _lat_part(r, raw_clat, f"{w}.clat_ns")
        if part is not None:
            acc.clat.append(part)


def _lat_part(r: _Reader, lat: Mapping[str, Any], wl: str) -> _LatPart | None:
    """One job entry's latency in one direction (``lat_ns`` or ``clat_ns``); None when it did no I/O."""
    n = r.int_(lat, "N", wl)
    if n <= 0:
        return None
    bins: dict[int, int] | None = None
    raw_bins = lat.get("bins")
    if raw_bins is not None:
        if not isinstance(raw_bins, dict):
            raise r.fail(f"{wl}.bins: expected an object")
        bins = {}
        for key, count in raw_bins.items():
            try:
                value = int(key)
            except ValueError:
                raise r.fail(f"{wl}.bins: bin value {key!r} is not an integer") from None
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise r.fail(f"{wl}.bins[{key}]: expected a count, got {count!r}")
            bins[value] = bins.get(value, 0) + count
    percentiles: dict[str, float] = {}
    raw_pct = lat.get("percentile")
    if raw_pct is not None:
        if not isinstance(raw_pct, dict):
            raise r.fail(f"{wl}.percentile: expected an object")
        for key in raw_pct:
            try:
                label = percentile_key(float(key))
            except ValueError:
                raise r.fail(f"{wl}.percentile: key {key!r} is not a number") from None
            if label in PERCENTILE_KEYS:
                percentiles[label] = r.num(raw_pct, key, f"{wl}.percentile")
    return _LatPart(n=n, mean=r.num(lat, "mean", wl), stddev=r.num(lat, "stddev", wl), min=r.num(lat, "min", wl),
                    max=r.num(lat, "max", wl), bins=bins, percentiles=percentiles)


def _direction(acc: _DirAcc) -> DirectionStats:
    return DirectionStats(
        ios=acc.ios,
        io_bytes=acc.io_bytes,
        iops=acc.iops,
        bw_bytes=acc.bw_bytes,
        runtime_ms=acc.runtime_ms,
        lat=_latency(acc.lat),
        clat=_latency(acc.clat),
    )


def parse_fio_output(text: str | bytes, *, source: str = "fio output") -> StepMetrics:
    """Parse fio ``json+`` (or ``json``) output into :class:`StepMetrics`.

    Lines before the first line starting with ``{`` (fio warnings such as ``fio: ...``) are
    skipped. Every entry of ``jobs`` is merged (see the module docstring). Raises
    :class:`~labcontract.errors.FioError` with ``path=source`` when the output is empty,
    not JSON, truncated, has no jobs, or lacks a field the schema needs.
    """
    r, version, jobs = _report_jobs(text, source)
    return _step_metrics(r, version, list(enumerate(jobs)))


def parse_fio_groups(text: str | bytes, *, source: str = "fio output") -> dict[str, StepMetrics]:
    """Per-job-entry metrics of fio ``json+`` output, keyed by ``jobname``, in fio's order.

    A device-group step runs one job file with one section per device, each with
    ``new_group=1`` (``group_reporting=1`` in ``[global]``), so fio prints one ``jobs`` entry
    per device with the section name as ``jobname`` and that device's ``numjobs`` clones
    folded in. Each entry is computed exactly as :func:`parse_fio_output` computes a
    one-entry output (``jobs == 1``); :func:`parse_fio_output` on the same text is the
    aggregate over all entries. Raises :class:`~labcontract.errors.FioError` like
    :func:`parse_fio_output`, and when two entries share a ``jobname`` (e.g. ``numjobs > 1``
    without ``group_reporting``, or sections without ``new_group`` merged into one group).
    """
    r, version, jobs = _report_jobs(text, source)
    names: dict[str, int] = {}
    for i, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise r.fail(f"jobs[{i}]: not an object")
        name = job.get("jobname")
        if not isinstance(name, str) or not name:
            raise r.fail(f"jobs[{i}].jobname: missing or not a string")
        if name in names:
            raise r.fail(
                f"jobs[{i}].jobname: {name!r} repeats jobs[{names[name]}] "
                "(per-group results need group_reporting=1 and one section per group)"
            )
        names[name] = i
    return {name: _step_metrics(r, version, [(i, jobs[i])]) for name, i in names.items()}


def fio_report(text: str | bytes, *, source: str = "fio output") -> dict[str, Any]:
    """The final report of fio JSON output as decoded (what every parser here reads: lines before the first ``{``
    skipped, the last of a ``--status-interval`` stream); FioError when there is none or it is not JSON."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="replace")
    return _decode_reports(text, source)


@dataclass(frozen=True)
class JobMetrics:
    """One fio job of an output (:func:`parse_fio_jobs`): its name, its figures over every entry of that name,
    and with ``fio --client`` on several servers each server's own (``host:port`` -> figures)."""

    name: str
    metrics: StepMetrics
    servers: dict[str, StepMetrics]


def parse_fio_jobs(text: str | bytes, *, source: str = "fio output") -> list[JobMetrics]:
    """Per fio job (``jobname``), in fio's order: every entry of that name merged as :func:`parse_fio_output` merges a
    run's (a job's ``numjobs`` clones printed apart without ``group_reporting``; with ``fio --client`` on several
    servers, the job's entry of each server: the percentiles those of the servers' merged histograms), and each
    server's entries apart. A job of one entry is computed as :func:`parse_fio_groups` computes it. Raises
    :class:`~labcontract.errors.FioError` like :func:`parse_fio_output`."""
    r, version, jobs = _report_jobs(text, source)
    order: dict[str, list[tuple[int, Any]]] = {}
    per_server: dict[str, dict[str, list[tuple[int, Any]]]] = {}
    servers = {f"{j.get('hostname')}:{j.get('port')}" for j in jobs if isinstance(j, dict) and "hostname" in j}
    for i, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise r.fail(f"jobs[{i}]: not an object")
        name, server = job.get("jobname"), ""
        if not isinstance(name, str) or not name:
            raise r.fail(f"jobs[{i}].jobname: missing or not a string")
        if len(servers) > 1 and "hostname" in job:      # named job@host:port by _client_jobs
            server = f"{job.get('hostname')}:{job.get('port')}"
            name = name.removesuffix(f"@{server}")
        order.setdefault(name, []).append((i, job))
        if server:
            per_server.setdefault(name, {}).setdefault(server, []).append((i, job))
    return [JobMetrics(name, _step_metrics(r, version, entries),
                       {s: _step_metrics(r, version, e) for s, e in per_server.get(name, {}).items()})
            for name, entries in order.items()]


def _report_jobs(text: str | bytes, source: str) -> tuple[_Reader, str, list[Any]]:
    """The last report of ``text``: a reader for errors, the fio version and the ``jobs`` list."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="replace")
    report = _decode_reports(text, source)
    r = _Reader(source)
    version = report.get("fio version")
    if not isinstance(version, str) or not version:
        raise r.fail("missing 'fio version' (is this fio JSON output?)")
    jobs = report.get("jobs")
    if jobs is None and "client_stats" in report:
        jobs = _client_jobs(r, report["client_stats"])
    if not isinstance(jobs, list):
        raise r.fail("missing 'jobs' list (is this fio JSON output?)")
    if not jobs:
        raise r.fail("fio reported no jobs")
    return r, version, jobs


#: The entry ``fio --client`` adds to ``client_stats`` when it drove several servers: their sum, without bins.
ALL_CLIENTS = "All clients"


def _client_jobs(r: _Reader, entries: object) -> list[Any]:
    """The job entries of ``fio --client`` output (``client_stats``: one entry per server and job group, each with
    its ``hostname`` and ``port``, and the ``All clients`` sum when there were several servers). The servers'
    entries are what is merged, exactly as a local run's jobs (their bins give the percentiles; the sum has none);
    the sum is checked against them, I/O count by I/O count. With several servers an entry's name becomes
    ``job@host:port`` (per-group results) and the step has no CPU figure (CPU of several hosts is no one host's)."""
    if not isinstance(entries, list) or not entries:
        raise r.fail("client_stats: expected a non-empty list (fio --client output)")
    parts: list[tuple[int, dict[str, Any]]] = []
    sums: list[tuple[int, dict[str, Any]]] = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise r.fail(f"client_stats[{i}]: not an object")
        (sums if e.get("jobname") == ALL_CLIENTS else parts).append((i, e))
    servers = {(str(e.get("hostname")), str(e.get("port"))) for _i, e in parts}
    if not parts:
        raise r.fail("client_stats: no server's entry, only the 'All clients' sum")
    if len(sums) > 1 or (sums and len(servers) < 2):
        raise r.fail(f"client_stats: {len(sums)} 'All clients' entries for {len(servers)} server(s)")
    if sums:
        i, total = sums[0]
        for d in ("read", "write"):
            want = r.int_(r.obj(total, d, f"client_stats[{i}]"), "total_ios", f"client_stats[{i}].{d}")
            got = sum(r.int_(r.obj(e, d, f"client_stats[{j}]"), "total_ios", f"client_stats[{j}].{d}")
                      for j, e in parts)
            if want != got:
                raise r.fail(f"client_stats[{i}] ('{ALL_CLIENTS}'): {want} {d} I/Os, but the servers' entries "
                             f"sum to {got} (an output cut or edited?)")
    if len(servers) < 2:
        return [e for _i, e in parts]
    out = []
    for _i, e in parts:
        named = {k: v for k, v in e.items() if k not in ("usr_cpu", "sys_cpu")}
        named["jobname"] = f"{e.get('jobname')}@{e.get('hostname')}:{e.get('port')}"
        out.append(named)
    return out


def _step_metrics(r: _Reader, version: str, entries: Sequence[tuple[int, Any]]) -> StepMetrics:
    """Merge the given ``(index in jobs, job entry)`` pairs into one :class:`StepMetrics`."""
    read, write = _DirAcc(), _DirAcc()
    errors = 0
    cpu_s: list[float] | None = [0.0, 0.0]   # user and system CPU seconds over every job entry
    for i, job in entries:
        where = f"jobs[{i}]"
        if not isinstance(job, dict):
            raise r.fail(f"{where}: not an object")
        errors += r.int_(job, "error", where)
        cpu_s = _cpu_seconds(r, job, where, cpu_s)
        if "read" not in job and "mixed" in job:
            raise r.fail(f"{where}: unified_rw_reporting=mixed output has no read/write split")
        _read_direction(r, job, "read", where, read)
        _read_direction(r, job, "write", where, write)
        trim = job.get("trim")
        if isinstance(trim, dict) and trim.get("total_ios"):
            raise r.fail(f"{where}.trim: trim I/O is not part of the result schema")
    read_stats, write_stats = _direction(read), _direction(write)
    both = read.lat + write.lat
    n, mean, stddev = pool_mean_stddev((p.n, p.mean, p.stddev) for p in both)
    combined = Combined(
        iops=read_stats.iops + write_stats.iops,
        bw_bytes=read_stats.bw_bytes + write_stats.bw_bytes,
        ios=read_stats.ios + write_stats.ios,
        lat_mean_ns=mean if n else None,
        lat_max_ns=max(p.max for p in both) if both else None,
        lat_stddev_ns=stddev if n else None,
        percentiles_ns=_merged_percentiles(both),
        clat_mean_ns=_pooled_mean(read.clat + write.clat),
        clat_percentiles_ns=_merged_percentiles(read.clat + write.clat),
    )
    runtime_ms = max(read_stats.runtime_ms, write_stats.runtime_ms)
    cpu = None
    if cpu_s is not None and runtime_ms > 0:
        cpu = CpuStats(usr_pct=cpu_s[0] / (runtime_ms / 1000) * 100, sys_pct=cpu_s[1] / (runtime_ms / 1000) * 100,
                       us_per_io=(cpu_s[0] + cpu_s[1]) * 1e6 / combined.ios if combined.ios else None)
    return StepMetrics(
        fio_version=version,
        jobs=len(entries),
        runtime_ms=runtime_ms,
        read=read_stats,
        write=write_stats,
        combined=combined,
        errors=errors,
        cpu=cpu,
    )


def _pooled_mean(parts: Sequence[_LatPart]) -> float | None:
    n, mean, _ = pool_mean_stddev((p.n, p.mean, p.stddev) for p in parts)
    return mean if n else None


def _cpu_seconds(r: _Reader, job: Mapping[str, Any], where: str, acc: list[float] | None) -> list[float] | None:
    """Add a job entry's CPU seconds (``usr_cpu`` / ``sys_cpu`` are % of one CPU over the entry's runtime) to
    ``acc``; None once an entry lacks them (the step then has no CPU figure rather than a partial one)."""
    if acc is None or "usr_cpu" not in job or "sys_cpu" not in job:
        return None
    usr, sys_ = r.num(job, "usr_cpu", where), r.num(job, "sys_cpu", where)
    if not (0 <= usr <= 1e6 and 0 <= sys_ <= 1e6):
        raise r.fail(f"{where}: usr_cpu / sys_cpu out of range ({usr!r}, {sys_!r})")
    ms = max((d.get("runtime", 0) for d in (job.get("read"), job.get("write")) if isinstance(d, dict)), default=0)
    seconds = (ms if isinstance(ms, int | float) and not isinstance(ms, bool) else 0) / 1000
    return [acc[0] + usr / 100 * seconds, acc[1] + sys_ / 100 * seconds]


#: A merged total-latency histogram: ``{"read": [[ns, count], ...], "write": [...]}``, ascending, counts > 0.
LatBins = dict[str, list[list[int]]]


def latency_bins(text: str | bytes, *, source: str = "fio output",
                 completion: bool = False) -> tuple[LatBins, dict[str, LatBins]] | None:
    """fio json+ total-latency (``lat_ns``; ``completion``: ``clat_ns``) histogram bins, merged over every job
    entry and, separately, per ``jobname`` (a device group's sections, see :func:`parse_fio_groups`); read and
    write apart.

    Stored with a result so that any percentile or exceedance curve can be drawn later without the raw
    output (the percentiles in ``metrics`` are only the six fio was asked for). Bin values are fio's bucket
    values in ns, summed count by count exactly as :func:`percentiles_from_bins` merges them, so the
    percentiles of the merged bins are the result's. None when a direction that did I/O has no bins
    (plain ``json`` output, or job files without ``lat_percentiles=1``): nothing to store.
    Raises :class:`~labcontract.errors.FioError` like :func:`parse_fio_output`.
    """
    total, clat = latency_bins_both(text, source=source)
    return clat if completion else total


def latency_bins_both(text: str | bytes, *, source: str = "fio output",
                      ) -> tuple[tuple[LatBins, dict[str, LatBins]] | None, tuple[LatBins, dict[str, LatBins]] | None]:
    """:func:`latency_bins` of the total latency and of the completion latency, from one reading of the report
    (what the controller stores with every result)."""
    r, _version, jobs = _report_jobs(text, source)
    acc: dict[bool, tuple[dict[str, dict[int, int]], dict[str, dict[str, dict[int, int]]]] | None] = {
        False: ({"read": {}, "write": {}}, {}), True: ({"read": {}, "write": {}}, {})}
    for i, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise r.fail(f"jobs[{i}]: not an object")
        name = str(job.get("jobname") or f"jobs[{i}]")
        for direction in ("read", "write"):
            parts = _DirAcc()
            _read_direction(r, job, direction, f"jobs[{i}]", parts)
            for completion, got in ((False, parts.lat), (True, parts.clat)):
                into = acc[completion]
                if into is None:
                    continue
                total, per = into
                mine = per.setdefault(name, {"read": {}, "write": {}})[direction]
                for part in got:
                    if part.bins is None:
                        acc[completion] = None
                        break
                    for value, count in part.bins.items():
                        mine[value] = mine.get(value, 0) + count
                        total[direction][value] = total[direction].get(value, 0) + count

    def pairs(bins: Mapping[str, Mapping[int, int]]) -> LatBins:
        return {d: [[v, c] for v, c in sorted(b.items()) if c > 0] for d, b in bins.items()}

    def out(into: tuple[dict[str, dict[int, int]], dict[str, dict[str, dict[int, int]]]] | None,
            ) -> tuple[LatBins, dict[str, LatBins]] | None:
        return None if into is None else (pairs(into[0]), {name: pairs(b) for name, b in into[1].items()})

    return out(acc[False]), out(acc[True])


def summary_row(m: StepMetrics) -> dict[str, float]:
    """A flat row for tables and dashboards; combined latency in microseconds, NaN if absent."""
    c = m.combined

    def us(ns: float | None) -> float:
        return ns / 1000.0 if ns is not None else math.nan

    return {
        "read_iops": m.read.iops,
        "write_iops": m.write.iops,
        "iops": c.iops,
        "read_bw_bytes": m.read.bw_bytes,
        "write_bw_bytes": m.write.bw_bytes,
        "bw_bytes": c.bw_bytes,
        "lat_mean_us": us(c.lat_mean_ns),
        "lat_max_us": us(c.lat_max_ns),
        "lat_stddev_us": us(c.lat_stddev_ns),
        "lat_p50_us": us(c.percentiles_ns.get("p50")),
        "lat_p99_us": us(c.percentiles_ns.get("p99")),
        "lat_p99.99_us": us(c.percentiles_ns.get("p99.99")),
    }
