"""Render a resolved workload into the fio job file an agent runs.

The same function renders for ``labctl suite render`` and on the agent, so what an
engineer reads is byte for byte what fio gets (the job artifact's sha256 equals the plan's).

One device: ``[global]`` holds the device-independent options and one job section holds the
workload. A device group: the workload goes into ``[global]`` and each device gets its own
section with ``new_group=1``, so fio reports one result per device (``group_reporting``
folds each device's ``numjobs`` clones together) and the parser aggregates them.

Per platform: a DUT's contract path is ``/``-rooted (on Windows ``//./PhysicalDriveN``); ``spell`` says how
the agent's platform writes it as fio's ``filename`` (``\\\\.\\PhysicalDriveN``). :func:`check_job` takes that
one Windows form besides plain absolute paths and reports it as its contract path, so the agent matches it
against its declared DUTs. The controller renders without ``spell`` (the contract path as is).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labcontract.errors import FioError
from labcontract.facts import windows_drive_path
from labcontract.fioextra import CHECKS, FLAGS, INTS, RATE_IOPS, check_rate_iops, cross_problems, fio_lines
from labcontract.suite import Workload
from labcontract.units import format_size

# fio reports total latency (submission + completion) percentiles and json+ bins for it.
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9, 99.99)
DUT_PLACEHOLDER = "${LAB_DUT}"


def _flag(v: bool) -> str:
    return "1" if v else "0"


# never in a rendered value: a line break starts a new option or section, ';' / '#' a comment, '[' ']' a
# section, '=' a second assignment, '$' fio's environment expansion, '`' / '(' fio's shell / math forms
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\[\];#=$`()\\\s]")


def _opt(key: str, value: object) -> str:
    """``key=value`` for a typed value; refuses (defence in depth) a value that could open another option."""
    text = str(value)
    if not text or _UNSAFE.search(text):
        raise FioError(f"refusing to render {key}={text[:60]!r}: not a plain value")
    return f"{key}={text}"


def _filename(path: str, spell: Callable[[str], str] | None = None) -> str:
    """A device path as fio reads it: ':' (fio's separator of several files) escaped; nothing else special.

    ``spell`` (the agent's platform) writes the validated contract path as fio's filename on its host; what
    it writes must be a filename :func:`check_job` accepts and reads back as ``path``, or it is refused."""
    if path == DUT_PLACEHOLDER:
        return path
    if not path.startswith("/") or _UNSAFE.search(path):
        raise FioError(f"refusing to render filename={path[:60]!r}: not a plain absolute path")
    if spell is None:
        return path.replace(":", "\\:")
    spelled = spell(path)
    try:
        back = _parse_filename(spelled)
    except ValueError as e:
        raise FioError(f"refusing to render filename={spelled[:60]!r} (for {path[:60]!r}): {e}") from None
    if back != path:
        raise FioError(f"refusing to render filename={spelled[:60]!r}: it reads back as {back[:60]!r}, "
                       f"not as the DUT {path[:60]!r}")
    return spelled


def job_section(name: str) -> str:
    """A fio job name: no brackets or spaces."""
    return re.sub(r"[^A-Za-z0-9_.:-]", "_", name)


def device_section(name: str, index: int) -> str:
    return f"{job_section(name)}.dev{index}"


def workload_lines(w: Workload) -> list[str]:
    """A workload's own options (pattern, block size, mix, threads, depth, buffers), engine- and target-free."""
    lines = [_opt("rw", w.rw), _opt("bs", format_size(int(w.bs)))]
    if w.rwmixread is not None:
        lines.append(_opt("rwmixread", int(w.rwmixread)))
    if w.percentage_random is not None:
        lines.append(_opt("percentage_random", int(w.percentage_random)))
    lines += [_opt("iodepth", int(w.iodepth)), _opt("numjobs", int(w.numjobs))]
    if w.refill_buffers:
        lines.append("refill_buffers=1")
    if w.norandommap:
        lines.append("norandommap=1")
    if not w.randrepeat:
        lines.append("randrepeat=0")
    for line in fio_lines(w.__dict__):       # the extended options a suite set (labcontract.fioextra), canonical
        key, value = line.split("=", 1)
        lines.append(_opt(key, value))
    return lines


def size_value(footprint: str) -> str:
    """fio's ``size`` for a footprint: ``N%`` as is, a byte count in its shortest spelling."""
    return footprint if footprint.endswith("%") else format_size(int(footprint))


def render_job(workload: Workload, devices: str | Sequence[str] = DUT_PLACEHOLDER, *,
               spell: Callable[[str], str] | None = None) -> str:
    """The job file of ``workload`` on ``devices`` (contract paths, validated); ``spell`` writes each as fio's
    filename on the host that runs it (None: as is, ':' escaped; what the controller plans)."""
    w = workload
    devs = [devices] if isinstance(devices, str) else list(devices)
    lines = ["[global]"]
    if len(devs) == 1:
        lines.append(f"filename={_filename(devs[0], spell)}")
    lines += [_opt("ioengine", w.ioengine), _opt("direct", _flag(w.direct))]
    if w.time_based:
        lines.append("time_based=1")
    lines.append(_opt("runtime", int(w.runtime)))
    if w.ramp_time:
        lines.append(_opt("ramp_time", int(w.ramp_time)))
    if w.footprint:
        lines.append(_opt("size", size_value(w.footprint)))
    lines += [
        "group_reporting=1",
        "lat_percentiles=1",
        "percentile_list=" + ":".join(f"{p:g}" for p in PERCENTILES),
    ]
    if len(devs) == 1:
        lines += ["", f"[{job_section(w.name)}]", *workload_lines(w)]
    else:
        lines += workload_lines(w)
        for i, dev in enumerate(devs):
            lines += ["", f"[{device_section(w.name, i)}]", "new_group=1", f"filename={_filename(dev, spell)}"]
    return "\n".join(lines) + "\n"


# --- checking a rendered job file (what an agent runs, as the interlock sees it) -----------------------

MAX_JOB_BYTES = 64 * 1024
MAX_JOB_SECTIONS = 257                      # [global] and a device group of 256
READ_ONLY_RW = frozenset({"read", "randread"})   # any other rw (and any write option) writes
_DIGITS = r"\d{1,12}"
_SIZE_VALUE = r"\d{1,20}[kmgtp]?"
# every option render_job emits, with the values it may take; anything else in a job file is refused
# (exec_prerun, write_iolog, include, ioengine=external, trim..., '$' expansions, comments)
ALLOWED_OPTIONS: dict[str, re.Pattern[str]] = {k: re.compile(f"^(?:{v})\\Z") for k, v in {
    "ioengine": "libaio|io_uring|psync|sync|pvsync2|posixaio|windowsaio",
    "direct": "0|1", "time_based": "0|1", "group_reporting": "1", "lat_percentiles": "1", "new_group": "1",
    "refill_buffers": "1", "norandommap": "1", "randrepeat": "0|1",
    "runtime": _DIGITS, "ramp_time": _DIGITS, "rwmixread": _DIGITS, "percentage_random": _DIGITS,
    "iodepth": _DIGITS, "numjobs": _DIGITS,
    "size": r"\d{1,3}(?:\.\d{1,9})?%|" + _SIZE_VALUE, "bs": _SIZE_VALUE,
    "percentile_list": r"[0-9.]{1,8}(?::[0-9.]{1,8}){0,15}",
    "rw": "read|write|randread|randwrite|rw|readwrite|randrw",
    "filename": r".+",                      # checked on its own (_parse_filename)
    # the extended options: their form here, their value by its check (labcontract.fioextra.CHECKS) below
    **{k: r"[A-Za-z0-9:/.,%-]{1,2048}" for k in CHECKS},
    **{k: _DIGITS for k in INTS}, **{k: "1" for k in FLAGS}, RATE_IOPS: _DIGITS + "(?:," + _DIGITS + ")?",
}.items()}
_SECTION = re.compile(r"^\[([A-Za-z0-9_.:-]{1,255})\]\Z")
_OPTION = re.compile(r"^([a-z_]{1,32})=(.*)\Z")
_PATH_CHAR = re.compile(r"^/[A-Za-z0-9/_.+@,=-]*\Z")
# the one filename with backslashes: a Windows disk in the device namespace, as fio's HOWTO writes it
_WINDOWS_DRIVE = re.compile(r"\\\\\.\\PhysicalDrive(0|[1-9][0-9]{0,3})\Z")


@dataclass(frozen=True)
class JobSection:
    """One job of a checked job file: its name, the files it opens and whether it writes to them."""

    name: str
    filenames: tuple[str, ...]
    rw: str

    @property
    def writes(self) -> bool:
        return self.rw not in READ_ONLY_RW


def _parse_filename(value: str) -> str:
    """A filename option's one file: ':' must be escaped (an unescaped one separates several files).

    ``\\\\.\\PhysicalDriveN`` (N: 0..9999, no leading zero), exactly, is returned as its contract path
    ``//./PhysicalDriveN``; any other filename with a backslash is refused."""
    if value == DUT_PLACEHOLDER:
        return value
    if (m := _WINDOWS_DRIVE.match(value)) is not None:
        return windows_drive_path(int(m.group(1)))
    parts = re.split(r"(?<!\\):", value)
    if len(parts) > 1:
        raise ValueError(f"filename {value[:80]!r} names several files (':' separators)")
    path = value.replace("\\:", ":")
    if not _PATH_CHAR.match(path.replace(":", "_")):
        raise ValueError(f"filename {value[:80]!r} is not a plain absolute path (nor \\\\.\\PhysicalDriveN)")
    return path


def _check_value(key: str, value: str) -> None:
    """An extended option's value, checked as the suite checks it (its canonical text read back)."""
    if key in CHECKS:
        try:
            CHECKS[key](value)
        except ValueError as e:
            raise ValueError(f"{key}={value[:60]!r}: {e}") from None
    elif key == RATE_IOPS:
        try:
            check_rate_iops(value)
        except ValueError as e:
            raise ValueError(f"{key}={value[:60]!r}: {e}") from None
    elif key in INTS:
        low, high = INTS[key]
        if not low <= int(value) <= high:
            raise ValueError(f"{key}={value} is out of range ({low}-{high})")


def check_job(text: str) -> tuple[JobSection, ...]:
    """Parse a job file as render_job writes it: every job with its file(s) and whether it writes.

    Only the options render_job emits, with values of their type, are accepted; a comment, an
    ``include``, an unknown option, a second ``[global]``, a job without a filename, or a filename
    with ':' separators or a ``$`` expansion is refused with :class:`~labcontract.errors.FioError`. A filename
    is a plain absolute path or, exactly, a Windows disk ``\\\\.\\PhysicalDriveN``, reported in
    :attr:`JobSection.filenames` as its contract path ``//./PhysicalDriveN``."""
    if len(text) > MAX_JOB_BYTES:
        raise FioError(f"job file refused: {len(text)} bytes, over {MAX_JOB_BYTES}")
    glob: dict[str, str] = {}
    jobs: list[tuple[str, dict[str, str]]] = []
    current: dict[str, str] | None = None
    for n, line in enumerate(text.split("\n"), 1):
        try:
            if not line:
                continue
            if (m := _SECTION.match(line)) is not None:
                name = m.group(1)
                if name == "global":
                    if current is not None:
                        raise ValueError("[global] must be the first section, and only once")
                    current = glob
                else:
                    if len(jobs) >= MAX_JOB_SECTIONS:
                        raise ValueError(f"more than {MAX_JOB_SECTIONS} jobs")
                    jobs.append((name, {}))
                    current = jobs[-1][1]
                continue
            if (m := _OPTION.match(line)) is None:
                raise ValueError(f"{line[:80]!r} is not an option of a rendered job (key=value)")
            key, value = m.group(1), m.group(2)
            pattern = ALLOWED_OPTIONS.get(key)
            if pattern is None:
                raise ValueError(f"option {key!r} is not allowed in a job file")
            if not pattern.match(value):
                raise ValueError(f"{key}={value[:80]!r} is not a valid value")
            _check_value(key, value)
            if current is None:
                raise ValueError(f"option {key} before any section")
            if key in current:
                raise ValueError(f"option {key} set twice in one section")
            current[key] = _parse_filename(value) if key == "filename" else value
        except ValueError as e:
            raise FioError(f"job file refused: line {n}: {e}") from e
    if not jobs:
        raise FioError("job file refused: it holds no job")
    out = []
    for name, own in jobs:
        opts = {**glob, **own}
        if "filename" not in opts:
            raise FioError(f"job file refused: job {name} names no filename (fio would create a file of its name)")
        if why := cross_problems({**opts, "footprint": opts.get("size")}):
            raise FioError(f"job file refused: job {name}: {'; '.join(why)}")
        out.append(JobSection(name, (opts["filename"],), opts.get("rw", "read")))
    return tuple(out)
