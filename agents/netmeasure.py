"""Network measurements an initiator host makes, per path: iSCSI (libiscsi tools) and fio (nbd).

Everything here runs the real tools; ``prefix`` is put in front of every argv so the same
code runs on a lab host (``prefix=()``) or inside a namespace host of the test lab
(``prefix=("ip", "netns", "exec", "<ns>")``).

iSCSI (userspace initiator, libiscsi):
  * :func:`iscsi_discover` -- ``iscsi-ls -s iscsi://addr/``: SendTargets discovery + LUN list.
  * :func:`iscsi_capacity` -- ``iscsi-readcapacity16``: a login and READ CAPACITY(16).
  * :func:`iscsi_perf_paths` -- ``iscsi-perf`` on every path at once for ``seconds``, then
    SIGINT. iscsi-perf prints one line a second with the I/Os completed in that second;
    bytes = sum(per-second I/Os) x transfer size and seconds = number of those lines, so
    the partial second before SIGINT is not counted.

fio (``ioengine=nbd`` against nbdkit serving the same LUN file on every path):
  * :func:`render_nbd_job` -- one job file, one section per path (``new_group=1``,
    ``uri=nbd://addr:port``), so run whole it gives per-path groups (``parse_fio_groups``).
  * :func:`run_fio_paths` -- runs that file as one fio process per path (``--section``),
    all started together, each with ``--status-interval=1`` json+ reports. A fio whose nbd
    connection stalls (path down) never ends its job and, run whole, also stops the status
    reports of the healthy paths and ignores SIGTERM; one process per path keeps the
    healthy paths' numbers intact. A process still running at ``runtime + ramp + grace`` is
    killed and its path is judged from its last status report.
  * :func:`path_failures` -- from the per-second series: which path stopped carrying data,
    when, and how long and how fast the other paths carried on.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labcontract.errors import FioError, ServiceError
from labcontract.fiojob import PERCENTILES, job_section, workload_lines
from labcontract.fioresult import StepMetrics, parse_fio_groups
from labcontract.procs import stop_group
from labcontract.suite import Workload
from labcontract.units import format_size

SYS_CLASS_NET = Path("/sys/class/net")
COUNT_INTERVAL_S = 0.1
GRACE_S = 3.0
STALL_S = 2.0
MIN_INTERVAL_S = 0.2  # a path whose bytes stop growing this long before the end has failed


class NetMeasureError(ServiceError):
    """An iSCSI tool failed or printed something this module cannot read."""


@dataclass(frozen=True)
class NetPathTarget:
    """What an initiator needs to reach the LUN over one path."""

    key: str            # path name as results are keyed, e.g. "ini0.a"
    address: str        # target portal address on this path
    iqn: str
    lun: int = 1
    iscsi_port: int = 3260
    nbd_port: int = 10809
    mtu: int | None = None  # as measured on the initiator interface; recorded in results

    @property
    def iscsi_url(self) -> str:
        return f"iscsi://{self.address}:{self.iscsi_port}/{self.iqn}/{self.lun}"

    @property
    def nbd_uri(self) -> str:
        return f"nbd://{self.address}:{self.nbd_port}"


def gbps(n_bytes: float, seconds: float) -> float:
    return n_bytes * 8 / 1e9 / seconds if seconds > 0 else 0.0


# --------------------------------------------------------------------------- iSCSI tools


@dataclass(frozen=True)
class DiscoveredTarget:
    iqn: str
    portal: str                         # "addr:port,tpgt" as the target announced it
    luns: dict[int, str] = field(default_factory=dict)  # lun -> "DIRECT_ACCESS (Size:255M)"


@dataclass(frozen=True)
class Capacity:
    block_size: int
    blocks: int

    @property
    def bytes(self) -> int:
        return self.block_size * self.blocks


@dataclass(frozen=True)
class IscsiPerfResult:
    path: str
    mtu: int | None
    transfer_bytes: int
    ios: int
    seconds: float
    per_second_ios: tuple[int, ...]

    @property
    def bytes(self) -> int:
        return self.ios * self.transfer_bytes

    @property
    def gbps(self) -> float:
        return gbps(self.bytes, self.seconds)

    @property
    def iops(self) -> float:
        return self.ios / self.seconds if self.seconds else 0.0


_TARGET = re.compile(r"^Target:(\S+)\s+Portal:(\S+)")
_LUN = re.compile(r"^Lun:(\d+)\s+Type:(.+?)\s*\Z")
_PERF_LINE = re.compile(r"(\d+):(\d\d):(\d\d) - lba \d+, iops current (\d+) \(")
_PERF_SIZE = re.compile(r"transfer size of (\d+) blocks \((\d+) byte\)")


def parse_iscsi_ls(text: str) -> list[DiscoveredTarget]:
    """``iscsi-ls -s`` output: ``Target:IQN Portal:...`` lines, each followed by its LUN lines."""
    found: list[tuple[str, str, dict[int, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if m := _TARGET.match(line):
            found.append((m[1], m[2], {}))
        elif (m := _LUN.match(line)) and found:
            found[-1][2][int(m[1])] = m[2]
    return [DiscoveredTarget(iqn, portal, luns) for iqn, portal, luns in found]


def parse_readcapacity16(text: str) -> Capacity:
    fields = dict(re.findall(r"^([A-Z ]+?):\s*(\d+)\s*$", text, re.MULTILINE))
    try:
        last_lba, block = int(fields["RETURNED LOGICAL BLOCK ADDRESS"]), int(fields["LOGICAL BLOCK LENGTH IN BYTES"])
    except KeyError as e:
        raise NetMeasureError(f"iscsi-readcapacity16 output lacks {e}") from None
    return Capacity(block, last_lba + 1)


def parse_iscsi_perf(text: str, *, path: str = "", mtu: int | None = None) -> IscsiPerfResult:
    """iscsi-perf's ``\\r``-separated per-second lines into an :class:`IscsiPerfResult`."""
    size = _PERF_SIZE.search(text)
    if size is None:
        raise NetMeasureError(f"{path or 'iscsi-perf'}: no 'transfer size' line in the output")
    ios = tuple(int(m[4]) for m in _PERF_LINE.finditer(text))
    if not ios:
        raise NetMeasureError(f"{path or 'iscsi-perf'}: no per-second lines (did it log in?)")
    return IscsiPerfResult(path, mtu, int(size[2]), sum(ios), float(len(ios)), ios)


def _tool(prefix: Sequence[str], args: Sequence[str], timeout: float) -> str:
    argv = [*prefix, *args]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NetMeasureError(f"{args[0]}: no answer within {timeout:g}s") from None
    except OSError as e:
        raise NetMeasureError(f"{args[0]}: {e}") from None
    if proc.returncode != 0:
        raise NetMeasureError(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return proc.stdout


def iscsi_discover(address: str, *, port: int = 3260, prefix: Sequence[str] = (), timeout: float = 15) -> list[
        DiscoveredTarget]:
    return parse_iscsi_ls(_tool(prefix, ["iscsi-ls", "-s", f"iscsi://{address}:{port}/"], timeout))


def iscsi_capacity(target: NetPathTarget, *, prefix: Sequence[str] = (), timeout: float = 15) -> Capacity:
    return parse_readcapacity16(_tool(prefix, ["iscsi-readcapacity16", target.iscsi_url], timeout))


def iscsi_perf_paths(targets: Sequence[NetPathTarget], *, seconds: float, transfer_blocks: int = 256,
                     max_requests: int = 16, random: bool = False, prefix: Sequence[str] = ()) -> dict[
                         str, IscsiPerfResult]:
    """Run iscsi-perf on every path at once for ``seconds`` (then SIGINT); per-path results.

    ``transfer_blocks`` is in LUN blocks (256 x 512 B = 128 KiB).
    """
    argv = ["iscsi-perf", "-b", str(transfer_blocks), "-m", str(max_requests), *(["-r"] if random else [])]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for t in targets:
            procs[t.key] = subprocess.Popen([*prefix, *argv, t.iscsi_url], stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + seconds
        for proc in procs.values():  # the measurement window; a process ending early ends its wait
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
    finally:
        for proc in procs.values():
            stop_group(proc, signal.SIGINT, GRACE_S)
    out = {key: proc.communicate()[0].decode(errors="replace") for key, proc in procs.items()}
    return {t.key: parse_iscsi_perf(out[t.key], path=t.key, mtu=t.mtu) for t in targets}


# --------------------------------------------------------------------------- fio over nbd


def methodology_workloads(runtime: int = 60, ramp_time: int = 0) -> tuple[Workload, ...]:
    """Section 6's large-block checks (as in the built-in ``pattern-125`` suite)."""
    common: dict[str, Any] = {"iodepth": 16, "runtime": runtime, "ramp_time": ramp_time, "norandommap": True,
                              "randrepeat": False}
    return (
        Workload(name="seq-128k-read", rw="read", bs=128 * 1024, **common),
        Workload(name="block-64k", rw="randrw", bs=64 * 1024, rwmixread=100, percentage_random=25, **common),
        Workload(name="block-128k", rw="randrw", bs=128 * 1024, rwmixread=100, percentage_random=25, **common),
    )


def path_section(workload: Workload, path: str) -> str:
    return job_section(f"{workload.name}.{path}")


def render_nbd_job(workload: Workload, targets: Sequence[NetPathTarget]) -> str:
    """One job file: the workload in ``[global]``, one ``new_group`` section per path.

    ``ioengine``, ``direct`` and the device of ``workload`` are replaced by ``ioengine=nbd``
    and each path's ``uri``; a ``footprint`` becomes ``size``.
    """
    w = workload
    # thread=1: a job stuck on a downed path dies with the fio process it belongs to
    lines = ["[global]", "ioengine=nbd", "thread=1", *(["time_based=1"] if w.time_based else [])]
    lines.append(f"runtime={w.runtime}")
    if w.ramp_time:
        lines.append(f"ramp_time={w.ramp_time}")
    if w.footprint:
        lines.append("size=" + (w.footprint if w.footprint.endswith("%") else format_size(int(w.footprint))))
    lines += ["group_reporting=1", "lat_percentiles=1", "percentile_list=" + ":".join(f"{p:g}" for p in PERCENTILES)]
    lines += workload_lines(w)
    for t in targets:
        lines += ["", f"[{path_section(w, t.key)}]", "new_group=1", f"uri={t.nbd_uri}"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Sample:
    """One fio status report of one path: seconds since the common start, cumulative bytes and I/Os."""

    t: float
    bytes: int
    ios: int


@dataclass(frozen=True)
class FioPathResult:
    path: str
    mtu: int | None
    metrics: StepMetrics        # final report, or the last status report of a killed fio
    samples: tuple[Sample, ...]
    completed: bool             # fio ended by itself with rc 0
    returncode: int | None

    @property
    def gbps(self) -> float:
        return self.metrics.combined.bw_bytes * 8 / 1e9

    @property
    def iops(self) -> float:
        return self.metrics.combined.iops

    @property
    def lat_mean_ns(self) -> float | None:
        return self.metrics.combined.lat_mean_ns

    def per_second_gbps(self) -> list[tuple[float, float]]:
        """``(t, Gbps over the interval ending at t)`` from consecutive status reports.

        An interval under ``MIN_INTERVAL_S`` (the final report comes right after the last status
        report) is folded into the next one rather than shown as a spike.
        """
        prev = Sample(0.0, 0, 0)
        out = []
        for s in self.samples:
            if s.t - prev.t < MIN_INTERVAL_S and s is not self.samples[-1]:
                continue
            if s.t - prev.t >= MIN_INTERVAL_S:
                out.append((round(s.t, 3), gbps(s.bytes - prev.bytes, s.t - prev.t)))
                prev = s
        return out


@dataclass(frozen=True)
class PathFailure:
    path: str
    stopped_at_s: float          # since the start: the report at which its bytes stopped growing
    survivors: tuple[str, ...]
    carried_on_s: float          # how long the surviving paths still moved data after that
    survivor_gbps: float         # their total Gbps from their first report after the stop to their last


@dataclass(frozen=True)
class FioRun:
    workload: str
    job: str
    paths: dict[str, FioPathResult]
    failures: tuple[PathFailure, ...]
    t0: float = 0.0             # epoch seconds when the fio processes were started (samples count from here)

    def summary(self) -> dict[str, Any]:
        """Plain data for the store: per-path and total Gbps, IOPS, mean latency, MTU, failures."""
        paths = {k: {"gbps": p.gbps, "iops": p.iops, "lat_mean_ns": p.lat_mean_ns, "mtu": p.mtu,
                     "completed": p.completed, "per_second_gbps": p.per_second_gbps()} for k, p in self.paths.items()}
        return {"workload": self.workload, "window_s": self.window_s, "total_gbps": self.total_gbps,
                "total_iops": self.total_iops, "paths": paths, "failures": [asdict(f) for f in self.failures]}

    @property
    def window_s(self) -> float:
        """The measured window: the longest fio runtime of any path."""
        return max(p.metrics.runtime_ms for p in self.paths.values()) / 1000.0

    @property
    def total_gbps(self) -> float:
        """Every path's measured bytes over the common window (a failed path adds only what it moved)."""
        n_bytes = sum(p.metrics.read.io_bytes + p.metrics.write.io_bytes for p in self.paths.values())
        return gbps(n_bytes, self.window_s)

    @property
    def total_iops(self) -> float:
        ios = sum(p.metrics.combined.ios for p in self.paths.values())
        return ios / self.window_s if self.window_s else 0.0


def split_reports(text: str) -> list[dict[str, Any]]:
    """Every complete JSON report in fio's stdout (status reports and the final one), in order.

    Lines before a report (fio warnings) are skipped; a report cut off by a kill is dropped.
    """
    dec = json.JSONDecoder()
    reports: list[dict[str, Any]] = []
    i = 0
    while (i := text.find("{", i)) >= 0:
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            break
        if isinstance(obj, dict) and "jobs" in obj:
            reports.append(obj)
    return reports


def fio_samples(reports: Sequence[dict[str, Any]], t0_ms: float) -> tuple[Sample, ...]:
    """Cumulative bytes/IOs on the wire per report. fio zeroes its counters when ``ramp_time``
    ends; the series carries on from the last value then, so it counts every byte moved."""
    out: list[Sample] = []
    base_bytes = base_ios = last_bytes = last_ios = 0
    for rep in reports:
        jobs = rep["jobs"]
        n_bytes = sum(int(j[d]["io_bytes"]) for j in jobs for d in ("read", "write"))
        ios = sum(int(j[d]["total_ios"]) for j in jobs for d in ("read", "write"))
        if n_bytes < last_bytes:  # counters reset at the end of ramp_time
            base_bytes, base_ios = base_bytes + last_bytes, base_ios + last_ios
        last_bytes, last_ios = n_bytes, ios
        out.append(Sample((float(rep["timestamp_ms"]) - t0_ms) / 1000.0, base_bytes + n_bytes, base_ios + ios))
    return tuple(out)


def fio_path_result(target: NetPathTarget, section: str, text: str, rc: int | None, t0_ms: float) -> FioPathResult:
    reports = split_reports(text)
    if not reports:
        raise FioError(f"no fio report (rc {rc})", path=target.key)
    metrics = parse_fio_groups(json.dumps(reports[-1]), source=f"fio {target.key}")
    if section not in metrics:
        raise FioError(f"no job {section!r} in the report", path=target.key)
    return FioPathResult(target.key, target.mtu, metrics[section], fio_samples(reports, t0_ms), rc == 0, rc)


def run_fio_paths(workload: Workload, targets: Sequence[NetPathTarget], workdir: Path, *,
                  prefix: Sequence[str] = (), grace_s: float = GRACE_S) -> FioRun:
    """Run ``workload`` on every path at once, one fio process per path; see the module docstring."""
    workdir.mkdir(parents=True, exist_ok=True)
    job = render_nbd_job(workload, targets)
    (workdir / "job.fio").write_text(job)
    t0_ms = time.time() * 1000.0
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for t in targets:
            procs[t.key] = _start_fio(workdir, path_section(workload, t.key), t.key, prefix)
        deadline = time.monotonic() + workload.expected_seconds + grace_s
        with ThreadPoolExecutor(len(procs)) as pool:
            rcs = dict(zip(procs, pool.map(lambda p: _wait_or_kill(p, deadline), procs.values()), strict=True))
    finally:
        for proc in procs.values():
            stop_group(proc, signal.SIGKILL, GRACE_S)
    paths = {t.key: fio_path_result(t, path_section(workload, t.key), (workdir / f"{t.key}.json").read_text(
        errors="replace"), rcs[t.key], t0_ms) for t in targets}
    return FioRun(workload.name, job, paths, path_failures(paths), t0_ms / 1000.0)


def _start_fio(workdir: Path, section: str, key: str, prefix: Sequence[str]) -> subprocess.Popen[bytes]:
    argv = [*prefix, "fio", "--output-format=json+", "--status-interval=1", f"--section={section}",
            str(workdir / "job.fio")]
    with open(workdir / f"{key}.json", "wb") as out, open(workdir / f"{key}.stderr", "wb") as err:
        return subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)


def _wait_or_kill(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    """The rc of a fio that ended by the deadline; None for one that had to be killed."""
    try:
        return proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop_group(proc, signal.SIGKILL, GRACE_S)
        return None


def _stopped_at(r: FioPathResult, end: float) -> float | None:
    """When a path stopped carrying data, or None if it carried data to (nearly) the end."""
    if not r.samples:
        return 0.0
    last = r.samples[-1]
    first_final = next(s for s in r.samples if s.bytes == last.bytes)
    if r.completed and end - first_final.t < STALL_S:
        return None
    return first_final.t


def _gbps_after(r: FioPathResult, t: float) -> float:
    """Gbps of a path from its first report at or after ``t`` to its last report."""
    start = next((s for s in r.samples if s.t >= t), None)
    if start is None:
        return 0.0
    last = r.samples[-1]
    return gbps(last.bytes - start.bytes, last.t - start.t)


def path_failures(paths: dict[str, FioPathResult]) -> tuple[PathFailure, ...]:
    """A path failed when its fio was killed or its bytes stopped growing ``STALL_S`` before the end."""
    ends = [r.samples[-1].t for r in paths.values() if r.samples]
    end = max(ends, default=0.0)
    failures = []
    for key, r in paths.items():
        stopped = _stopped_at(r, end)
        if stopped is None:
            continue
        others = [o for k, o in paths.items() if k != key and _stopped_at(o, end) is None]
        last = max((o.samples[-1].t for o in others), default=stopped)
        failures.append(PathFailure(key, stopped, tuple(o.path for o in others), max(0.0, last - stopped),
                                    sum(_gbps_after(o, stopped) for o in others)))
    return tuple(failures)


# --------------------------------------------------------------------------- NIC counters


def wait_until(t: float) -> None:
    """Until the wall clock reads ``t`` (a scheduled start shared by several hosts, or a sampling tick)."""
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 0.5))


def _counters(iface: str) -> tuple[int, int]:
    stats = SYS_CLASS_NET / iface / "statistics"
    return int((stats / "tx_bytes").read_text()), int((stats / "rx_bytes").read_text())


def count_nic_bytes(paths: Sequence[dict[str, Any]], seconds: float, interval_s: float = COUNT_INTERVAL_S, *,
                    stop: threading.Event | None = None) -> dict[str, Any]:
    """Each path's transmitted and received bytes every ``interval_s`` for ``seconds`` (or until ``stop`` is set):
    the target's view, and an initiator's per path under tool ``block`` (the kernel spreads one device's I/O over
    the paths). Finer than the initiators' one-second reports, so the window's edges (where traffic starts and
    stops) are cut within a tenth of a second instead of spreading a second's bytes over the window."""
    start = time.time()
    prev = {p["name"]: _counters(p["iface"]) for p in paths}
    prev_t = start
    series: dict[str, list[list[float]]] = {p["name"]: [] for p in paths}
    tx_total = dict.fromkeys(series, 0)
    rx_total = dict.fromkeys(series, 0)
    for tick in range(1, round(seconds / interval_s) + 1):
        if stop is not None and stop.is_set():
            break
        wait_until(start + tick * interval_s)
        now = time.time()
        for p in paths:
            tx, rx = _counters(p["iface"])
            dtx, drx = tx - prev[p["name"]][0], rx - prev[p["name"]][1]
            prev[p["name"]] = (tx, rx)
            tx_total[p["name"]] += dtx
            rx_total[p["name"]] += drx
            series[p["name"]].append([prev_t, now, float(dtx + drx), 0.0, float(dtx), float(drx)])
        prev_t = now
    end = time.time()
    out = {}
    for name in series:
        secs = end - start
        out[name] = {"gbps": gbps(tx_total[name] + rx_total[name], secs), "tx_gbps": gbps(tx_total[name], secs),
                     "rx_gbps": gbps(rx_total[name], secs), "bytes": tx_total[name] + rx_total[name], "iops": None,
                     "lat_mean_ns": None, "seconds": secs, "completed": True, "series": series[name]}
    return {"started_at": start, "ended_at": end, "paths": out}
