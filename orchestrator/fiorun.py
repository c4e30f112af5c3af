"""fio JSON output made outside the lab as a run of the lab (``labctl import-fio``): a plain local fio run, or
``fio --client`` driving ``fio --server`` processes (``client_stats`` and its ``All clients`` sum).

Every file is untrusted input: bounded in size (an artifact's bound, :data:`labcontract.protocol.ARTIFACT_MAX_BYTES`),
parsed and typed by :mod:`labcontract.fioresult` as the lab's own results are, its options and names checked, and
the steps it gives validated as the controller will validate them (:mod:`labcontract.rundoc`). Every problem of
every file is collected before anything is refused (:class:`FioImportError`), each with its file.

The run (:func:`build_run`): one measure step per fio job (``jobname``) of each file, in file order, whose result
is computed as the lab computes its own from fio's output (:func:`result_of`: every entry of the job merged,
percentiles from the merged histogram bins; with ``fio --client`` on several servers each server's figures in
``per_device`` and its bins in ``lat_hist["per_device"]``, keyed ``host:port``). Each step's attempt holds the file
itself as ``fio.json``, so that every figure can be computed again from the raw output. A job found in several
files is a repeated cell (``repeat: k``, the step ``NAME.repK``), as a suite's ``repeat`` makes one. The run's id is
the digest of the files' contents, and every time in it is fio's own (``timestamp``): importing the same files
again makes the same document, which the controller leaves as it is."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from labcontract.bounds import MAX_EPOCH
from labcontract.errors import FioError, FioImportError, LabError, Problem
from labcontract.fioresult import JobMetrics, LatBins, StepMetrics, fio_report, latency_bins_both, parse_fio_jobs
from labcontract.protocol import ARTIFACT_MAX_BYTES, ENTRY_MAX_BYTES
from labcontract.rundoc import MAX_STEPS, ResultDoc, RunDoc, StepDoc, problems_of

if TYPE_CHECKING:
    from orchestrator.queries import RunDetail

ARTIFACT = "fio.json"
MAX_FILES = 64                  # files of one import
MAX_OPTIONS = 1024              # options of one section ("global options", a job's "job options")
OPTION_MAX = 4096               # characters of an option's value
NAME_MAX = 128                  # a job's name (a step's name is at most 160, with ".repK")
SUBMITTED_BY = "labctl import-fio"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_OPTION_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}\Z")


@dataclass(frozen=True)
class FioFile:
    """One file of fio output, read and checked: its bytes, digest, report and figures per job."""

    name: str                                  # as given on the command line (problems name it so)
    raw: bytes
    sha256: str
    version: str
    timestamp: float                           # fio's: when it wrote the report (the run's end)
    seconds: float                             # how long its jobs ran, group after group
    global_options: dict[str, str]
    job_options: dict[str, dict[str, str] | None]   # job name -> its options (the first entry's that has them;
                                                    # None: fio printed none, as fio --client past the 1st group)
    servers: list[str]                         # fio --client: host:port of each server; [] for a local run
    jobs: list[JobMetrics]
    bins: LatBins | None                       # total latency, merged over the file
    job_bins: dict[str, LatBins]               # per entry name (job, or job@host:port with several servers)
    job_clat: dict[str, LatBins]

    @property
    def started(self) -> float:
        return max(self.timestamp - self.seconds, 0.0)


def read_fio_file(path: Path, name: str | None = None) -> FioFile:
    """A file of fio JSON output, read within an artifact's bound and checked; FioImportError with every problem."""
    name = name or str(path)
    try:
        if not path.is_file():
            raise FioImportError([Problem(name, "not a regular file" if path.exists() else "no such file")])
        with path.open("rb") as f:
            raw = f.read(ARTIFACT_MAX_BYTES + 1)
    except OSError as e:
        raise FioImportError([Problem(name, f"cannot be read: {e.strerror or e}")]) from None
    if len(raw) > ARTIFACT_MAX_BYTES:
        raise FioImportError([Problem(name, f"larger than {ARTIFACT_MAX_BYTES >> 20} MiB (an artifact's bound)")])
    return parse_fio_file(raw, name)


def _unsendable(raw: bytes) -> str | None:
    """Why a file cannot travel to the controller in one ``import_artifact`` command (gzip + base64 past a stream
    entry's bound, with room for the command's own fields); None when it can. Compressed only when it could be."""
    import base64
    import gzip

    room = ENTRY_MAX_BYTES - (64 << 10)
    if len(raw) * 1.01 * 4 / 3 + 1024 < room:
        return None
    packed = len(base64.b64encode(gzip.compress(raw, 6)))
    return None if packed <= room else f"{packed} bytes packed (gzip, base64): more than one command carries ({room})"


def parse_fio_file(raw: bytes, name: str) -> FioFile:
    """fio JSON output (``jobs`` or ``client_stats``) as :class:`FioFile`; FioImportError with every problem."""
    try:
        report = fio_report(raw, source=name)
        jobs = parse_fio_jobs(raw, source=name)
        bins, clat = latency_bins_both(raw, source=name)
    except FioError as e:
        raise FioImportError([Problem(name, str(e).removeprefix(f"{name}: "))]) from None
    except ValidationError as e:            # a figure fio never writes (a negative rate, a count below one)
        raise FioImportError([Problem(f"{name}: {p.location}", p.message) for p in problems_of(e)]) from None
    problems: list[Problem] = []
    if (why := _unsendable(raw)) is not None:
        problems.append(Problem(name, why))
    version = str(report.get("fio version"))
    if len(version) > 32 or _CONTROL.search(version):
        problems.append(Problem(name, "'fio version': not a fio version (at most 32 printable characters)"))
    timestamp = report.get("timestamp")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float) or not 0 < timestamp <= MAX_EPOCH:
        problems.append(Problem(name, f"'timestamp': expected fio's epoch seconds, got {str(timestamp)[:40]!r}"))
        timestamp = 0.0
    glob = _options(report.get("global options", {}), f"{name}: 'global options'", problems)
    entries = report.get("jobs")
    if entries is None:
        entries = [e for e in report.get("client_stats") or [] if e.get("jobname") != "All clients"]
    servers = sorted({f"{e.get('hostname')}:{e.get('port')}" for e in entries if "hostname" in e})
    job_options: dict[str, dict[str, str] | None] = {}
    for job in jobs:
        where = f"{name}: job {job.name[:80]!r}"
        if len(job.name) > NAME_MAX or _CONTROL.search(job.name):
            problems.append(Problem(where, f"a job name of at most {NAME_MAX} printable characters"))
        given = [e["job options"] for e in entries if e.get("jobname") == job.name and e.get("job options")
                 is not None]
        job_options[job.name] = _options(given[0], f"{where}: 'job options'", problems) if given else None
    if problems:
        raise FioImportError(problems)
    return FioFile(name=name, raw=raw, sha256=hashlib.sha256(raw).hexdigest(), version=version,
                   timestamp=float(timestamp), seconds=_seconds(entries), global_options=glob,
                   job_options=job_options, servers=servers, jobs=jobs,
                   bins=bins[0] if bins else None, job_bins=bins[1] if bins else {},
                   job_clat=clat[1] if clat else {})


def _options(value: object, where: str, problems: list[Problem]) -> dict[str, str]:
    """fio's options of a section (name -> string, as fio prints them), checked."""
    if not isinstance(value, dict) or len(value) > MAX_OPTIONS:
        problems.append(Problem(where, f"expected an object of at most {MAX_OPTIONS} options"))
        return {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if not _OPTION_NAME.match(k):
            problems.append(Problem(where, f"{k[:40]!r}: not a fio option name"))
        elif not isinstance(v, str) or len(v) > OPTION_MAX or _CONTROL.search(v):
            problems.append(Problem(f"{where}.{k}", f"expected a string of at most {OPTION_MAX} printable "
                                                    f"characters, got {str(v)[:40]!r}"))
        else:
            out[k] = v
    return out


def _seconds(entries: Sequence[Mapping[str, Any]]) -> float:
    """How long the jobs ran: per server, its groups one after another (each as long as its longest job)."""
    groups: dict[tuple[str, str], float] = {}
    for e in entries:
        ms = max((d.get("runtime", 0) for d in (e.get("read"), e.get("write")) if isinstance(d, dict)), default=0)
        key = (f"{e.get('hostname')}:{e.get('port')}", str(e.get("groupid")))
        groups[key] = max(groups.get(key, 0.0), float(ms) / 1000)
    per_server: dict[str, float] = {}
    for (server, _group), s in groups.items():
        per_server[server] = per_server.get(server, 0.0) + s
    return max(per_server.values(), default=0.0)


def job_text(f: FioFile, job: str) -> str:
    """The job as fio reported its options (``global options`` then the job's ``job options``), as a job file."""
    own = f.job_options.get(job)
    lines = ["[global]", *(f"{k}={v}" for k, v in f.global_options.items()), f"[{job}]",
             *([f"{k}={v}" for k, v in own.items()] if own is not None else ["# fio printed no options of this job"])]
    return "\n".join(lines) + "\n"


def _add(total: dict[str, dict[int, int]], bins: LatBins) -> None:
    for d, pairs in bins.items():
        acc = total.setdefault(d, {})
        for v, c in pairs:
            acc[v] = acc.get(v, 0) + c


def _pairs(total: Mapping[str, Mapping[int, int]]) -> LatBins:
    return {d: [[v, c] for v, c in sorted(total.get(d, {}).items())] for d in ("read", "write")}


def _job_bins(f: FioFile, job: str, per_entry: Mapping[str, LatBins]) -> tuple[LatBins, dict[str, LatBins]]:
    """A job's bins merged over its entries, and each server's."""
    names = {s: f"{job}@{s}" for s in f.servers} if len(f.servers) > 1 else {"": job}
    total: dict[str, dict[int, int]] = {}
    servers: dict[str, LatBins] = {}
    for server, entry in names.items():
        bins = per_entry.get(entry, {"read": [], "write": []})
        _add(total, bins)
        if server:
            servers[server] = bins
    return _pairs(total), servers


def result_of(f: FioFile, job: JobMetrics, provenance: dict[str, Any]) -> ResultDoc:
    """The result of one job of a file, as the lab stores a fio step's (orchestrator.kinds.fio.fio_result)."""
    m: StepMetrics = job.metrics
    c, r, w = m.combined, m.read, m.write
    lat_hist: dict[str, Any] | None = None
    if f.bins is not None:
        total, servers = _job_bins(f, job.name, f.job_bins)
        lat_hist = dict(total)
        clat, _ = _job_bins(f, job.name, f.job_clat)
        if clat["read"] or clat["write"]:
            lat_hist["clat"] = clat
        if servers:
            lat_hist["per_device"] = servers
    per_device = {s: sm.model_dump(mode="json") for s, sm in job.servers.items()} or None
    return ResultDoc.model_validate({
        "kind": "fio", "tool": "fio", "tool_version": m.fio_version, "throughput": c.iops, "throughput_unit": "IOPS",
        "read_iops": r.iops, "write_iops": w.iops, "iops": c.iops, "read_bw_bytes": r.bw_bytes,
        "write_bw_bytes": w.bw_bytes, "bw_bytes": c.bw_bytes, "lat_mean_ns": c.lat_mean_ns,
        "lat_max_ns": c.lat_max_ns, "lat_stddev_ns": c.lat_stddev_ns, "lat_p99_ns": c.percentiles_ns.get("p99"),
        "runtime_ms": m.runtime_ms, "fio_version": m.fio_version, "metrics": m.model_dump(mode="json"),
        "per_device": per_device, "series": None, "lat_hist": lat_hist, "provenance": provenance,
        "created_at": f.timestamp})


@dataclass(frozen=True)
class Target:
    """What the files were measured on and how the run is named (labctl import-fio's options)."""

    host: str
    device: str
    suite_name: str = ""
    note: str = ""


def run_id_of(files: Sequence[FioFile]) -> str:
    """The run's id: the digest of its files' contents, in their order."""
    return "fio-" + hashlib.sha256("\n".join(f.sha256 for f in files).encode()).hexdigest()[:16]


def _provenance(f: FioFile, job: str, target: Target, suite_sha: str, text: str) -> dict[str, Any]:
    device = {"name": target.device, "path": target.device}
    return {
        "imported_from": {"format": "fio JSON output", "file": Path(f.name).name, "sha256": f.sha256,
                          "size": len(f.raw), "fio_version": f.version, "timestamp": f.timestamp,
                          "client": bool(f.servers), "servers": f.servers, "global_options": f.global_options,
                          "job_options": f.job_options.get(job), "imported_by": SUBMITTED_BY,
                          "note": target.note},
        "host": {"hostname": target.host}, "agent_version": None, "device": device, "devices": [device],
        "op_mode": "stock", "op_note": "", "suite_sha256": suite_sha,
        "job_sha256": hashlib.sha256(text.encode()).hexdigest()}


def build_run(files: Sequence[FioFile], target: Target) -> RunDoc:
    """The run of ``files`` (see the module docstring); FioImportError with every problem, each with its file."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for f in files:
        if f.sha256 in seen:
            problems.append(Problem(f.name, f"the same content as {seen[f.sha256]} (a file given twice)"))
        seen.setdefault(f.sha256, f.name)
    if len(files) > MAX_FILES:
        problems.append(Problem("", f"{len(files)} files: at most {MAX_FILES} in one import"))
    count = sum(len(f.jobs) for f in files)
    if count > MAX_STEPS:
        problems.append(Problem("", f"{count} jobs: at most {MAX_STEPS} in one run"))
    if problems:
        raise FioImportError(problems)
    run_id = run_id_of(files)
    suite_text = "".join(f"# {Path(f.name).name}: fio output {f.sha256} ({f.version})\n"
                         + "".join(job_text(f, j.name) for j in f.jobs) for f in files)
    suite_sha = hashlib.sha256(suite_text.encode()).hexdigest()
    times = {j.name: 0 for f in files for j in f.jobs}
    for f in files:
        for j in f.jobs:
            times[j.name] += 1
    steps: list[StepDoc] = []
    done: dict[str, int] = {}
    for f in files:
        for job in f.jobs:
            done[job.name] = k = done.get(job.name, 0) + 1
            step_id = f"{run_id}-s{len(steps):03d}"
            text = job_text(f, job.name)
            try:
                result = result_of(f, job, _provenance(f, job.name, target, suite_sha, text))
                steps.append(StepDoc.model_validate({
                    "id": step_id, "seq": len(steps), "kind": "measure",
                    "name": job.name + (f".rep{k}" if times[job.name] > 1 else ""),
                    "cell": {"op_mode": "stock", "profile": job.name, **({"repeat": k} if times[job.name] > 1
                                                                         else {})},
                    "note": f"imported from {Path(f.name).name} (fio output, sha256 {f.sha256[:12]})",
                    "workload": workload_of(job.name, f.global_options, f.job_options.get(job.name)),
                    "job_text": text, "state": "SUCCEEDED", "ended_at": f.timestamp,
                    "attempts": [{"id": f"{step_id}-a1", "number": 1, "host": target.host, "device": target.device,
                                  "state": "SUCCEEDED", "timeout_s": 0, "started_at": f.started,
                                  "fio_started_at": f.started, "fio_ended_at": f.timestamp,
                                  "ended_at": f.timestamp, "result": result,
                                  "artifacts": [{"name": ARTIFACT, "sha256": f.sha256, "size": len(f.raw)}]}]}))
            except ValidationError as e:
                problems += [Problem(f"{f.name}: job {job.name[:80]!r}: {p.location}", p.message)
                             for p in problems_of(e)]
    if problems:
        raise FioImportError(problems)
    names = ", ".join(Path(f.name).name for f in files)
    try:
        return RunDoc.model_validate({
            "id": run_id, "suite_name": (target.suite_name or Path(files[0].name).stem)[:128],
            "suite_source": f"fio output: {names}"[:512], "suite_text": suite_text, "suite_sha256": suite_sha,
            "host": target.host, "device": target.device, "devices": [target.device], "state": "SUCCEEDED",
            "reason": "imported from fio output" + (f": {target.note}" if target.note else ""),
            "submitted_at": min(f.started for f in files), "started_at": min(f.started for f in files),
            "ended_at": max(f.timestamp for f in files),
            "submitted_by": SUBMITTED_BY, "live": False, "steps": steps})
    except ValidationError as e:
        raise FioImportError(problems_of(e, "run")) from None


# fio's defaults where a job names no value (fio's own, as labcontract.fioimport writes them out)
_DEFAULTS = {"rw": "read", "bs": "4k", "iodepth": "1", "numjobs": "1"}


def workload_of(name: str, glob: Mapping[str, str], own: Mapping[str, str] | None) -> dict[str, Any]:
    """What the reports describe a step by (rw, block size, read share, random share, threads x queue depth),
    from fio's options of the job (its own after the global ones, fio's defaults for the rest); an option whose
    value is not a plain number is left out. A job whose options fio did not print (``own`` None) has the global
    ones only, no default: what it ran is not known."""
    from labcontract.fiojobfile import fio_size

    opts = {**(_DEFAULTS if own is not None else {}), **glob, **(own or {})}
    out: dict[str, Any] = {"name": name}
    if "rw" in opts:
        out["rw"] = opts["rw"].split(":")[0]
    for key, parse in (("bs", fio_size), ("iodepth", int), ("numjobs", int), ("rwmixread", int),
                       ("percentage_random", int), ("runtime", int)):
        value = opts.get(key)
        if key == "rwmixread" and value is None and (write := _int(opts.get("rwmixwrite", ""))) is not None:
            value = str(100 - write)
        try:
            if value is not None:
                out[key] = parse(value)
        except (ValueError, TypeError, LabError):
            continue
    return out


def _int(v: str) -> int | None:
    try:
        return int(v)
    except ValueError:
        return None


def imported_rows(detail: RunDetail) -> list[tuple[str, str]]:
    """The files of fio output a run was imported from (labctl import-fio: each result's ``imported_from``), one
    row per file: name, sha256, fio version, fio --client servers; and the note it was imported with."""
    files: dict[str, Mapping[str, Any]] = {}
    for st in detail.steps:
        res = detail.results.get(st.id)
        src = (res.provenance or {}).get("imported_from") if res is not None else None
        if isinstance(src, dict):
            files.setdefault(str(src.get("sha256")), src)
    rows: list[tuple[str, str]] = []
    for sha, src in files.items():
        servers = src.get("servers") or []
        how = f"fio --client, {len(servers)} server(s): {', '.join(map(str, servers))}" if servers else "local fio"
        rows.append((f"file {src.get('file')}", f"sha256 {sha}, {src.get('fio_version')}, {how}"))
    note = next((str(s.get("note")) for s in files.values() if s.get("note")), None)
    return rows + ([("note", note)] if note else [])
