"""Per-second series from fio ``--status-interval=1 --output-format=json+`` output.

What fio writes (verified with fio 3.33): with ``--status-interval=N`` fio prints a complete
``json+`` report every N seconds to the output file, one after another, each starting with
``{`` at the beginning of a line and separated by a newline, followed by the ordinary final
report when the jobs end. Every report is *cumulative* since the job started; the interim
ones are built by the same code as the final one, so they have the same keys. A run of
``runtime=4`` gives 4 interim reports (at about 0.9, 1.9, 2.9 and 3.9 s of job runtime: the
status clock starts when fio starts, the job clock a little later) plus the final report.

Time: each ``read``/``write`` object's ``runtime`` (ms) is the job's runtime at the instant
of the snapshot (the final report: the job's whole runtime), the maximum over a group's
members with ``group_reporting``. It is the clock used here: ``t`` of a report is the largest
``runtime`` in it. Not used: ``timestamp_ms`` (wall clock when the report was printed; the
final one comes some 50-150 ms after the I/O stopped), ``jobs[].elapsed`` (whole seconds
since fio started, rounded up) and ``job_runtime`` (sum over a group's members).

Each sample is the interval between two consecutive reports, found by differencing; the
first interval starts at the job start (``t = 0``), where every counter is zero, so the
samples tile the whole run and add up exactly to the last report:

* IOPS: ``Δ total_ios / Δt`` per direction (``total_ios`` counts issued I/Os; in the final
  report it equals the completed ones).
* latency mean and stddev, exact up to float rounding of fio's printed numbers: per job entry
  and direction, with fio's cumulative count ``N``, mean ``m`` and *sample* stddev ``sd``
  (``sqrt(S / (N - 1))``, see :mod:`labcontract.fioresult`), the interval has
  ``n = ΔN``, ``Σx = Δ(N·m)`` and ``Σx² = Δ((N - 1)·sd² + N·m²)``; parts (jobs, directions)
  are pooled by adding those sums, and the interval's stddev is again the sample stddev.
  The arithmetic is done in exact rationals, so no cancellation error is added.
* latency max: when the cumulative ``max`` grew during the interval, the new ``max`` is the
  interval's maximum, exactly. Otherwise it comes from the json+ histogram: the largest
  ``bins`` value whose count grew. That is exact only to fio's bin resolution (the bin's
  midpoint; bins are 1/64 of a power of two wide, so within 0.8 %), clamped to at least the
  interval's mean and at most the cumulative max.
* "combined" values pool every job entry and both directions (the four review metrics:
  throughput = read + write IOPS, I/O-weighted mean latency, max latency, pooled stddev).

Interim reports are snapshots fio takes while the jobs run, without stopping them, so a
report's count, sums and bins can disagree by a sample or two; only the final report is
exactly consistent.

``ramp_time``: during the ramp fio counts issued I/O and runtime but records no latency, and
when the ramp ends it zeroes everything and restarts the job clock. Reports taken before
that reset (no latency sample recorded yet) are dropped; any other counter that goes
backwards is an error.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from labcontract.errors import FioError
from labcontract.fioresult import StepMetrics, parse_fio_output

__all__ = [
    "SecondSample",
    "StatusStream",
    "parse_status_stream",
    "read_status_stream",
    "series_summary",
    "split_status_stream",
]

_DIRECTIONS = ("read", "write")


@dataclass(frozen=True)
class SecondSample:
    """One status interval (normally one second) of a fio run.

    ``t`` is the end of the interval in seconds of job runtime (0 = the job started doing
    I/O, after ``ramp_time`` if any), ``dt`` its length in seconds. IOPS are per second of the
    interval; latency fields (ns) pool every job entry and both directions and are None when
    no I/O completed in the interval (``lat_samples == 0``). ``lat_max_ns`` is exact when the
    run's maximum grew in the interval, otherwise exact to fio's histogram bin resolution.
    """

    t: float
    read_iops: float
    write_iops: float
    iops: float
    lat_mean_ns: float | None
    lat_max_ns: float | None
    lat_stddev_ns: float | None
    dt: float
    lat_samples: int


# --------------------------------------------------------------------------- the stream


def _report_start(text: str, pos: int) -> int:
    """Where the next report starts at or after ``pos`` (a ``{`` after whitespace, or a line
    starting with ``{``), skipping any other text; -1 when there is none."""
    n = len(text)
    while pos < n and text[pos].isspace():
        pos += 1
    if pos < n and text[pos] == "{":
        return pos
    found = text.find("\n{", pos)
    return -1 if found < 0 else found + 1


def _reports(text: str, source: str) -> list[tuple[int, int, dict[str, Any]]]:
    """``(start, end, decoded)`` of every complete report; a truncated last one is left out."""
    decoder = json.JSONDecoder()
    found: list[tuple[int, int, dict[str, Any]]] = []
    pos = _report_start(text, 0)
    while pos >= 0:
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            if _report_start(text, pos + 1) < 0:
                break  # the last report is cut off (fio killed, file copied while written)
            line = text.count("\n", 0, pos) + 1
            raise FioError(
                f"report[{len(found)}] at line {line}: invalid JSON "
                f"({exc.msg} at line {exc.lineno} column {exc.colno}) although more reports follow",
                path=source,
            ) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("jobs"), list):
            raise FioError(f"report[{len(found)}]: not a fio JSON report (no 'jobs' list)", path=source)
        found.append((pos, end, obj))
        pos = _report_start(text, end)
    if not found:
        what = "empty output" if not text.strip() else "no complete JSON report"
        raise FioError(f"{what}; expected fio --status-interval --output-format=json+ output", path=source)
    return found


def _as_text(text: str | bytes) -> str:
    if isinstance(text, bytes | bytearray):
        return bytes(text).decode("utf-8", errors="replace")
    return text


def split_status_stream(text: str | bytes, *, source: str = "fio output") -> list[str]:
    """The text of every complete report in a ``--status-interval`` stream, in order.

    Text between reports that is not JSON is skipped; a truncated last report is left out.
    ``split_status_stream(raw)[-1]`` is the report :func:`parse_status_stream` takes as the
    step's result (hand it to :func:`~labcontract.fioresult.parse_fio_groups` for per-device
    results of the same report). Raises :class:`~labcontract.errors.FioError` when there is no
    complete report, or when a report other than the last is not valid JSON.
    """
    s = _as_text(text)
    return [s[start:end] for start, end, _ in _reports(s, source)]


# --------------------------------------------------------------------------- snapshots


@dataclass(frozen=True)
class _Part:
    """One direction of one job entry, cumulative, as fio printed it."""

    ios: int
    n: int
    mean: float
    stddev: float
    max: float
    bins: Mapping[int, int] | None


_ZERO_PART = _Part(ios=0, n=0, mean=0.0, stddev=0.0, max=0.0, bins={})


@dataclass(frozen=True)
class _Snapshot:
    index: int  # position in the stream; -1 for the zero state at the job start
    t_ms: int
    names: tuple[str, ...]
    parts: tuple[tuple[_Part, ...], ...]  # [job entry][direction]

    def measuring(self) -> bool:
        """Whether any latency sample was recorded (false during ramp_time)."""
        return any(p.n > 0 for entry in self.parts for p in entry)


def _int(obj: Mapping[str, Any], key: str, where: str, source: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FioError(f"{where}.{key}: expected a count, got {value!r}", path=source)
    return value


def _num(obj: Mapping[str, Any], key: str, where: str, source: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise FioError(f"{where}.{key}: expected a non-negative number, got {value!r}", path=source)
    return float(value)


def _obj(obj: Mapping[str, Any], key: str, where: str, source: str) -> dict[str, Any]:
    value = obj.get(key)
    if not isinstance(value, dict):
        raise FioError(f"{where}.{key}: missing or not an object", path=source)
    return value


def _part(job: Mapping[str, Any], ddir: str, where: str, source: str) -> tuple[_Part, int]:
    d = _obj(job, ddir, where, source)
    w = f"{where}.{ddir}"
    lat = _obj(d, "lat_ns", w, source)
    wl = f"{w}.lat_ns"
    bins: dict[int, int] | None = None
    raw_bins = lat.get("bins")
    if raw_bins is not None:
        if not isinstance(raw_bins, dict):
            raise FioError(f"{wl}.bins: expected an object", path=source)
        bins = {}
        for key in raw_bins:
            try:
                value = int(key)
            except ValueError:
                raise FioError(f"{wl}.bins: bin value {key!r} is not an integer", path=source) from None
            bins[value] = bins.get(value, 0) + _int(raw_bins, key, f"{wl}.bins", source)
    part = _Part(
        ios=_int(d, "total_ios", w, source),
        n=_int(lat, "N", wl, source),
        mean=_num(lat, "mean", wl, source),
        stddev=_num(lat, "stddev", wl, source),
        max=_num(lat, "max", wl, source),
        bins=bins,
    )
    return part, _int(d, "runtime", w, source)


def _snapshot(index: int, report: Mapping[str, Any], source: str) -> _Snapshot:
    jobs = report["jobs"]
    if not jobs:
        raise FioError(f"report[{index}]: fio reported no jobs", path=source)
    names: list[str] = []
    parts: list[tuple[_Part, ...]] = []
    t_ms = 0
    for i, job in enumerate(jobs):
        where = f"report[{index}].jobs[{i}]"
        if not isinstance(job, dict):
            raise FioError(f"{where}: not an object", path=source)
        if "read" not in job and "mixed" in job:
            raise FioError(f"{where}: unified_rw_reporting=mixed output has no read/write split", path=source)
        name = job.get("jobname")
        names.append(name if isinstance(name, str) else f"#{i}")
        entry: list[_Part] = []
        for ddir in _DIRECTIONS:
            part, runtime = _part(job, ddir, where, source)
            entry.append(part)
            t_ms = max(t_ms, runtime)
        parts.append(tuple(entry))
    return _Snapshot(index=index, t_ms=t_ms, names=tuple(names), parts=tuple(parts))


def _zero(like: _Snapshot) -> _Snapshot:
    parts = tuple(tuple(_ZERO_PART for _ in entry) for entry in like.parts)
    return _Snapshot(index=-1, t_ms=0, names=like.names, parts=parts)


# fio's final report can give a job a few ms less runtime than the last interim report did: an interim
# snapshot counts time up to "now", the final one stops the clock where the job's I/O ended.
RUNTIME_SLACK_MS = 1000


def _went_back(a: _Snapshot, b: _Snapshot) -> str | None:
    """What went backwards from ``a`` to ``b`` (None when nothing did). A runtime a little lower with no
    counter lower is the final report's clock, not a reset."""
    counters = _counters_went_back(a, b)
    if counters is not None:
        return counters
    if b.t_ms < a.t_ms - RUNTIME_SLACK_MS:
        return f"runtime {a.t_ms} -> {b.t_ms} ms"
    return None


def _counters_went_back(a: _Snapshot, b: _Snapshot) -> str | None:
    for i, (ea, eb) in enumerate(zip(a.parts, b.parts, strict=True)):
        for ddir, pa, pb in zip(_DIRECTIONS, ea, eb, strict=True):
            where = f"jobs[{i}].{ddir}"
            if pb.ios < pa.ios:
                return f"{where}.total_ios {pa.ios} -> {pb.ios}"
            if pb.n < pa.n:
                return f"{where}.lat_ns.N {pa.n} -> {pb.n}"
            if pa.bins and pb.bins is not None:
                for value, count in pa.bins.items():
                    if pb.bins.get(value, 0) < count:
                        return f"{where}.lat_ns.bins[{value}] {count} -> {pb.bins.get(value, 0)}"
    return None


def _timeline(snaps: Sequence[_Snapshot], source: str) -> list[_Snapshot]:
    """The zero state followed by the reports that start a new interval (strictly later ``t``)."""
    zero = _zero(snaps[0])
    kept = [zero]
    for snap in snaps:
        if snap.names != zero.names:
            raise FioError(
                f"report[{snap.index}]: job entries {list(snap.names)} differ from report[0]'s {list(zero.names)}",
                path=source,
            )
        back = _went_back(kept[-1], snap)
        if back is not None:
            if any(k.measuring() for k in kept):
                raise FioError(
                    f"report[{snap.index}]: {back} went backwards from report[{kept[-1].index}] "
                    "(counters reset while latency was being recorded)",
                    path=source,
                )
            kept = [zero]  # end of ramp_time: fio zeroed the counters and restarted the clock
        if snap.t_ms > kept[-1].t_ms:
            kept.append(snap)
        elif kept[-1] is not zero:
            kept[-1] = snap  # same instant of job time: the later snapshot supersedes it
        # else: no job time has passed yet; the zero state stays the interval start
    return kept


# --------------------------------------------------------------------------- differencing


def _sum_sq(p: _Part) -> Fraction:
    """Σx² of a part from its count, mean and sample stddev: (N - 1)·sd² + N·mean²."""
    if p.n == 0:
        return Fraction(0)
    mean, sd = Fraction(p.mean), Fraction(p.stddev)
    return (p.n - 1) * sd * sd + p.n * mean * mean


def _bin_max(a: _Part, b: _Part) -> float | None:
    """The largest bin value whose count grew from ``a`` to ``b``."""
    assert b.bins is not None
    prev = a.bins or {}
    grown = [value for value, count in b.bins.items() if count > prev.get(value, 0)]
    return float(max(grown)) if grown else None


def _interval(a: _Snapshot, b: _Snapshot, source: str) -> SecondSample:
    dt = (b.t_ms - a.t_ms) / 1000.0
    dir_ios = [0, 0]
    total_n = 0
    total_sum = Fraction(0)
    total_sq = Fraction(0)
    lat_max: float | None = None
    for i, (ea, eb) in enumerate(zip(a.parts, b.parts, strict=True)):
        for d, (pa, pb) in enumerate(zip(ea, eb, strict=True)):
            dir_ios[d] += pb.ios - pa.ios
            n = pb.n - pa.n
            if n <= 0:
                continue
            s = pb.n * Fraction(pb.mean) - pa.n * Fraction(pa.mean)
            total_n += n
            total_sum += s
            total_sq += _sum_sq(pb) - _sum_sq(pa)
            mean = float(s / n)
            if pb.max > pa.max:
                top = pb.max  # the run's maximum grew in this interval: exact
            else:
                if pb.bins is None:
                    raise FioError(
                        f"report[{b.index}].jobs[{i}].{_DIRECTIONS[d]}.lat_ns.bins: missing; the series "
                        "needs --output-format=json+ and lat_percentiles=1",
                        path=source,
                    )
                top = min(max(_bin_max(pa, pb) or 0.0, mean), pb.max)
            lat_max = top if lat_max is None else max(lat_max, top)
    read_iops, write_iops = dir_ios[0] / dt, dir_ios[1] / dt
    lat_mean = lat_sd = None
    if total_n:
        lat_mean = float(total_sum / total_n)
        ss = total_sq - total_sum * total_sum / total_n
        lat_sd = math.sqrt(float(ss) / (total_n - 1)) if total_n > 1 and ss > 0 else 0.0
    return SecondSample(
        t=b.t_ms / 1000.0,
        read_iops=read_iops,
        write_iops=write_iops,
        iops=read_iops + write_iops,
        lat_mean_ns=lat_mean,
        lat_max_ns=lat_max if total_n else None,
        lat_stddev_ns=lat_sd,
        dt=dt,
        lat_samples=total_n,
    )


def parse_status_stream(text: str | bytes, *, source: str = "fio output") -> tuple[list[SecondSample], StepMetrics]:
    """Per-interval samples and the step's metrics from a ``--status-interval`` json+ stream.

    Reports are read with :meth:`json.JSONDecoder.raw_decode` one after another; other text
    between them is skipped and a truncated last report is ignored. Each sample covers one
    interval between consecutive reports, the first from the job start (all counters zero)
    to the first report, so ``n`` reports give ``n`` samples and the samples add up to the
    last report: ``Σ iops·dt`` is its ``total_ios`` and the ``lat_samples``-weighted mean of
    ``lat_mean_ns`` its mean (see the module docstring for how each value is computed;
    ``lat_max_ns`` is exact to fio's histogram bin resolution, exact where the run's max grew).
    Reports at the same instant of job time are merged into one interval.

    The :class:`StepMetrics` is :func:`~labcontract.fioresult.parse_fio_output` of the last
    complete report: the final report unless the output was cut off.

    Raises :class:`~labcontract.errors.FioError` (``path=source``) when there is no complete
    report, a report is not fio JSON, the job entries change between reports, a counter goes
    backwards (naming the report, e.g. ``report[3]``) other than at the end of ``ramp_time``,
    or histogram bins are missing (plain ``json`` output).
    """
    got = read_status_stream(text, source=source)
    return got.samples, got.metrics


@dataclass(frozen=True)
class StatusStream:
    """A ``--status-interval`` stream read once: its samples, the step's metrics and the text of the report they
    are taken from (for :func:`~labcontract.fioresult.latency_bins` and per-device groups of the same report)."""

    samples: list[SecondSample]
    metrics: StepMetrics
    final: str


def read_status_stream(text: str | bytes, *, source: str = "fio output") -> StatusStream:
    """:func:`parse_status_stream`, with the final report's text: ``split_status_stream(text)[-1]`` without
    reading the stream a second time (the controller stores every result this way)."""
    s = _as_text(text)
    reports = _reports(s, source)
    start, end, _ = reports[-1]
    metrics = parse_fio_output(s[start:end], source=source)
    snaps = [_snapshot(k, obj, source) for k, (_, _, obj) in enumerate(reports)]
    kept = _timeline(snaps, source)
    samples = [_interval(a, b, source) for a, b in itertools.pairwise(kept)]
    return StatusStream(samples, metrics, s[start:end])


def series_summary(samples: Sequence[SecondSample]) -> dict[str, list[float | None]]:
    """Column lists for storing a series as JSON: ``t`` (s), ``iops``, ``read_iops``,
    ``write_iops``, and combined latency ``lat_mean_us``, ``lat_max_us``, ``lat_stddev_us``
    (None where no I/O completed in the interval)."""

    def us(ns: float | None) -> float | None:
        return ns / 1000.0 if ns is not None else None

    return {
        "t": [x.t for x in samples],
        "iops": [x.iops for x in samples],
        "read_iops": [x.read_iops for x in samples],
        "write_iops": [x.write_iops for x in samples],
        "lat_mean_us": [us(x.lat_mean_ns) for x in samples],
        "lat_max_us": [us(x.lat_max_ns) for x in samples],
        "lat_stddev_us": [us(x.lat_stddev_ns) for x in samples],
    }
