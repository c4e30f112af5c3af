"""Live status of a running attempt, read from its directory each second (see :mod:`labcontract.live`).

fio runs with ``--status-interval=1 --output-format=json+``, so the attempt's ``fio.json`` is a
growing stream of *cumulative* reports (:mod:`labcontract.fioseries`). The live figures come
from the last two complete reports only, read from the file's tail, so the cost does not grow
with the length of the step:

* cumulative ``ios_total`` (fio's ``total_ios``) and ``bytes_total`` (``io_bytes``) from the
  last report;
* the interval between the two reports (about one second; the first interval starts at the
  job start, where every counter is zero): IOPS, and total-latency mean, max and p99, each per
  device and direction. They are computed the way :mod:`labcontract.fioseries` computes its
  per-second series: the mean from the differences of ``N`` and ``N * mean``; the max exact
  when the cumulative max grew, otherwise the largest histogram bin whose count grew (fio's bin
  resolution); p99 from the difference of the json+ histograms, with fio's own percentile rule
  (:func:`labcontract.fioresult.percentiles_from_bins`). Latency fields are None when no I/O
  completed in the interval (and during ``ramp_time``, where fio records no latency).

A device group runs one fio job section per device (``<job>.devN``, ``new_group=1``), so a
report has one ``jobs`` entry per device: entry ``N`` (by its ``.devN`` suffix, else by
position) is ``devices[N]`` of the start message. A single device has one entry.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from agents import kinds
from agents.attempt import Attempt
from labcontract.errors import LabError, StepError
from labcontract.fioresult import percentiles_from_bins
from labcontract.fioseries import _bin_max, _Part, _Snapshot, _snapshot, _went_back, _zero
from labcontract.live import AppLive, DeviceLive, DirectionLive, LiveStatus
from labcontract.protocol import StartStep
from labcontract.suite import Workload

log = logging.getLogger(__name__)

__all__ = ["TAIL_BYTES", "LiveReader", "live_devices", "read_live", "tail_reports"]

#: First tail read of fio.json: a few reports' worth (a json+ report is 50-120 KB per device).
TAIL_BYTES = 512 * 1024
#: An application step's live.json (one second's figures): larger is garbage, and ignored.
APP_LIVE_MAX_BYTES = 4096
#: Figures of an application step older than this (by their "t", or the file's mtime) are stale: not shown.
APP_LIVE_STALE_S = 10.0
_DIRECTIONS = ("read", "write")
_DEV_SUFFIX = re.compile(r"\.dev(\d+)\Z")
_DECODER = json.JSONDecoder()


# --------------------------------------------------------------------------- the stream's tail


@dataclass(frozen=True)
class _Found:
    start: int                 # offsets of the report in the file
    end: int
    obj: dict[str, Any]


def _complete_reports(data: bytes, base: int, *, at_report: bool, want: int) -> list[_Found]:
    """Up to ``want`` last complete reports in ``data`` (read from file offset ``base``), oldest first.

    A report starts with ``{`` at the beginning of a line (fio indents everything inside a
    report). ``at_report``: ``data`` starts at a report boundary (the file's beginning, or just
    past a complete report), so its first ``{`` after whitespace starts one; otherwise a report
    cut at the front is skipped. A report still being written at the end does not decode and is
    skipped too.
    """
    starts: list[int] = []
    pos = len(data)
    while True:
        pos = data.rfind(b"\n{", 0, pos)
        if pos < 0:
            break
        starts.append(pos + 1)
    if at_report:
        head = len(data) - len(data.lstrip())
        if data[head:head + 1] == b"{" and (not starts or starts[-1] != head):
            starts.append(head)
    found: list[_Found] = []
    stop = len(data)
    for start in starts:                       # from the last report backwards
        text = data[start:stop].decode("utf-8", errors="surrogateescape")
        stop = start
        try:
            obj, end = _DECODER.raw_decode(text)
        except json.JSONDecodeError:
            continue                           # the report fio is writing right now
        if isinstance(obj, dict) and isinstance(obj.get("jobs"), list):
            nbytes = len(text[:end].encode("utf-8", errors="surrogateescape"))
            found.append(_Found(base + start, base + start + nbytes, obj))
            if len(found) == want:
                break
    found.reverse()
    return found


def _tail(f: BinaryIO, size: int, want: int, tail_bytes: int) -> list[_Found]:
    chunk = max(tail_bytes, 1)
    while True:
        offset = max(0, size - chunk)
        f.seek(offset)
        found = _complete_reports(f.read(size - offset), offset, at_report=offset == 0, want=want)
        if len(found) >= want or offset == 0:
            return found
        chunk *= 4


def tail_reports(path: Path, want: int = 2, tail_bytes: int = TAIL_BYTES) -> list[dict[str, Any]]:
    """The last ``want`` complete reports of a ``--status-interval`` json+ stream, oldest first.

    Reads only the file's tail: ``tail_bytes`` first, four times more while fewer than ``want``
    complete reports are found and the file has more. Fewer (or none) when the file holds fewer;
    ``[]`` when it does not exist yet.
    """
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return []
    with f:
        return [x.obj for x in _tail(f, os.fstat(f.fileno()).st_size, want, tail_bytes)]


# --------------------------------------------------------------------------- differencing


@dataclass(frozen=True)
class _Report:
    snap: _Snapshot
    io_bytes: tuple[tuple[int, int], ...]   # [job entry][direction]


def _parse(report: Mapping[str, Any], index: int, source: str) -> _Report:
    snap = _snapshot(index, report, source)
    io_bytes = []
    for job in report["jobs"]:
        row = []
        for ddir in _DIRECTIONS:
            value = job[ddir].get("io_bytes", 0)
            row.append(value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0)
        io_bytes.append((row[0], row[1]))
    return _Report(snap, tuple(io_bytes))


def _grown_bins(a: _Part, b: _Part) -> dict[int, int]:
    assert b.bins is not None
    prev = a.bins or {}
    return {value: count - prev.get(value, 0) for value, count in b.bins.items() if count > prev.get(value, 0)}


def _direction(a: _Part, b: _Part, io_bytes: int, dt: float) -> DirectionLive:
    """One direction of one job entry over the interval from ``a`` to ``b``."""
    iops = (b.ios - a.ios) / dt if dt > 0 else None
    n = b.n - a.n
    if n <= 0 or dt <= 0:
        return DirectionLive(ios_total=b.ios, bytes_total=io_bytes, iops=iops)
    mean = max((b.n * b.mean - a.n * a.mean) / n, 0.0)
    top: float | None
    if b.max > a.max:
        top = b.max                            # the run's max grew in this interval: exact
    elif b.bins is not None:
        top = min(max(_bin_max(a, b) or 0.0, mean), b.max)
    else:
        top = None
    p99 = percentiles_from_bins(_grown_bins(a, b), (99.0,)).get("p99") if b.bins is not None else None
    return DirectionLive(ios_total=b.ios, bytes_total=io_bytes, iops=iops, lat_mean_ns=mean, lat_max_ns=top,
                         lat_p99_ns=p99)


def _device_index(name: str, position: int, n_devices: int) -> int | None:
    m = _DEV_SUFFIX.search(name)
    if n_devices > 1 and m is not None and int(m.group(1)) < n_devices:
        return int(m.group(1))
    return position if position < n_devices else None


def _devices(prev: _Report | None, last: _Report | None, devices: Sequence[str], threads: int,
             iodepth: int) -> tuple[DeviceLive, ...]:
    empty = tuple(DeviceLive(device=d, threads=threads, iodepth=iodepth) for d in devices)
    if last is None:
        return empty
    b = last.snap
    a = prev.snap if prev is not None else _zero(b)
    if a.names != b.names or _went_back(a, b) is not None:
        a = _zero(b)                           # end of ramp_time: fio zeroed every counter
    dt = (b.t_ms - a.t_ms) / 1000.0
    out: dict[int, DeviceLive] = {}
    for i, name in enumerate(b.names):
        k = _device_index(name, i, len(devices))
        if k is None or k in out:
            continue
        read, write = (_direction(a.parts[i][d], b.parts[i][d], last.io_bytes[i][d], dt) for d in range(2))
        out[k] = DeviceLive(device=devices[k], threads=threads, iodepth=iodepth, read=read, write=write)
    return tuple(out.get(k, empty[k]) for k in range(len(devices)))


def live_devices(reports: Sequence[Mapping[str, Any]], devices: Sequence[str], threads: int, iodepth: int,
                 *, source: str = "fio.json") -> tuple[DeviceLive, ...]:
    """Per-device live figures from the last one or two cumulative reports (oldest first).

    With one report the interval starts at the job start (zero counters); with none every
    device has zero counters and no interval figures. A counter that went backwards (the end of
    ``ramp_time``, where fio zeroes everything) also starts the interval at zero.
    """
    parsed = [_parse(r, i, source) for i, r in enumerate(reports[-2:])]
    prev = parsed[-2] if len(parsed) == 2 else None
    return _devices(prev, parsed[-1] if parsed else None, devices, threads, iodepth)


# --------------------------------------------------------------------------- the attempt


@dataclass
class _Stream:
    """What was last read of one attempt's fio.json."""

    size: int                        # file size then
    end: int                         # file offset just past the last complete report
    report_bytes: int                # the size of that report (reports grow with the histograms)
    last: _Report | None
    devices: tuple[DeviceLive, ...]


class LiveReader:
    """Reads live status each second, cheaply: it keeps each attempt's start message and the last
    report it decoded, so a pass reads and decodes only what fio appended since the last one
    (normally one report) and only differences it against the kept one.

    Not thread-safe: one caller (the agent's monitor thread).
    """

    def __init__(self, tail_bytes: int = TAIL_BYTES) -> None:
        self.tail_bytes = tail_bytes
        self._starts: dict[str, tuple[StartStep, float]] = {}
        self._streams: dict[str, _Stream] = {}

    def forget(self, keep: set[str]) -> None:
        """Drop what is kept of every attempt not in ``keep``."""
        for cache in (self._starts, self._streams):
            for attempt_id in [a for a in cache if a not in keep]:
                del cache[attempt_id]

    def _start(self, attempt: Attempt) -> tuple[StartStep, float] | None:
        cached = self._starts.get(attempt.attempt_id)
        if cached is not None:
            return cached
        try:
            msg = attempt.start_message()
        except (OSError, ValueError):
            return None
        launched = attempt.state().get("launched_at")
        if not isinstance(launched, (int, float)):
            return None                           # state.json not written yet: next second
        self._starts[attempt.attempt_id] = (msg, float(launched))
        return msg, float(launched)

    def _stream(self, attempt: Attempt, msg: StartStep, w: Workload) -> tuple[DeviceLive, ...]:
        source = f"attempt {attempt.attempt_id} fio.json"
        try:
            f = attempt.file("fio.json").open("rb")
        except FileNotFoundError:
            return _devices(None, None, msg.devices, w.numjobs, w.iodepth)
        with f:
            size = os.fstat(f.fileno()).st_size
            kept = self._streams.get(attempt.attempt_id)
            prev: _Report | None
            last: _Report | None
            if kept is not None and size == kept.size:
                return kept.devices
            window = max(self.tail_bytes, 4 * kept.report_bytes) if kept is not None else self.tail_bytes
            if kept is not None and kept.last is not None and kept.end <= size <= kept.end + window:
                f.seek(kept.end)           # only what fio appended since the last complete report
                found = _complete_reports(f.read(size - kept.end), kept.end, at_report=True, want=2)
                if not found:
                    return kept.devices    # the next report is still being written
                new = [_parse(x.obj, i, source) for i, x in enumerate(found)]
                prev, last = (new[-2] if len(new) == 2 else kept.last), new[-1]
            else:
                found = _tail(f, size, 2, window)
                new = [_parse(x.obj, i, source) for i, x in enumerate(found)]
                prev = new[-2] if len(new) == 2 else None
                last = new[-1] if new else None
        devices = _devices(prev, last, msg.devices, w.numjobs, w.iodepth)
        self._streams[attempt.attempt_id] = _Stream(
            size=size, end=found[-1].end if found else 0,
            report_bytes=found[-1].end - found[-1].start if found else 0, last=last, devices=devices)
        return devices

    def fio_devices(self, attempt: Attempt, msg: StartStep, w: Workload) -> tuple[DeviceLive, ...]:
        """A fio step's per-device figures (zero counters while its fio.json is missing or unreadable)."""
        try:
            return self._stream(attempt, msg, w)
        except (OSError, StepError, KeyError, TypeError, ValueError) as e:
            log.debug("live status of attempt %s: %s", attempt.attempt_id, e)
            self._streams.pop(attempt.attempt_id, None)
            return _devices(None, None, msg.devices, w.numjobs, w.iodepth)

    def app_live(self, attempt: Attempt, now: float | None = None) -> AppLive | None:
        """An application step's last second (its ``live.json``); None when it is missing, too large, not the
        expected figures (finite, bounded) or stale."""
        now = time.time() if now is None else now
        try:
            with attempt.file("live.json").open("rb") as fh:
                raw = fh.read(APP_LIVE_MAX_BYTES + 1)
                mtime = os.fstat(fh.fileno()).st_mtime
        except OSError:
            return None
        if len(raw) > APP_LIVE_MAX_BYTES or now - mtime > APP_LIVE_STALE_S:
            return None
        try:
            live = AppLive.model_validate_json(raw)
        except (ValidationError, ValueError):
            log.debug("live status of attempt %s: live.json unreadable", attempt.attempt_id)
            return None
        return live if abs(now - live.t) <= APP_LIVE_STALE_S else None

    def read(self, attempt: Attempt, host: str, now: float) -> LiveStatus | None:
        """Live status of a running attempt; None when its start or state record is unreadable. What a step
        contributes besides its identity comes from its kind (:meth:`agents.kinds.StepKind.live`)."""
        start = self._start(attempt)
        if start is None:
            return None
        msg, launched = start
        try:
            figures = kinds.get(msg.action).live(self, attempt, msg)
        except LabError as e:
            log.debug("live status of attempt %s: %s", attempt.attempt_id, e)
            figures = kinds.LiveFigures()
        return LiveStatus(host=host, attempt_id=attempt.attempt_id, run_id=msg.run_id, step_id=msg.step_id,
                          step_name=msg.job_name, suite=msg.suite, phase=msg.kind, round=msg.round,
                          started_at=launched, elapsed_s=max(now - launched, 0.0), expected_s=figures.expected_s,
                          devices=figures.devices, updated_at=now, app=figures.app)


def read_live(attempt: Attempt, host: str, now: float) -> LiveStatus | None:
    """Live status of a RUNNING attempt (None when its records cannot be read yet).

    Purge steps have no per-device figures. A fio step has one :class:`DeviceLive` per device
    of the start message, with zero counters until fio's first report. Stateless: the agent uses
    a :class:`LiveReader`, which gives the same result and decodes only the newest report.
    """
    return LiveReader().read(attempt, host, now)
