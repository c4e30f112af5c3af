"""How each fio option of an imported job file becomes a suite key, or why it does not (``labctl suite import``).

One registry, :data:`TAKEN`: a fio option (or its alias) -> a function of its value giving the suite keys it sets.
Options storagelab does not take have their reason in :data:`NOT_TAKEN` (by family); any other option gets
:data:`UNKNOWN`. Nothing is dropped without its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labcontract.fioextra import CHECKS, INTS, MAX_RATE_IOPS
from labcontract.fiojobfile import fio_bool, fio_int, fio_seconds, fio_size
from labcontract.units import format_size

RW_MODES = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")
ENGINES = ("libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio", "windowsaio")
ALIASES = {"readwrite": "rw", "blocksize": "bs", "timeout": "runtime",
           "cpumask_allowed": "cpus_allowed"}


@dataclass(frozen=True)
class Context:
    """What reading a value depends on: fio's kb_base of the job."""

    kb_base: int = 1024


Mapper = Callable[[str | None, Context], dict[str, Any]]


def _needs(value: str | None) -> str:
    if value is None:
        raise ValueError("needs a value")
    return value


def _choice(key: str, values: tuple[str, ...], why: str) -> Mapper:
    def f(v: str | None, ctx: Context) -> dict[str, Any]:
        text = _needs(v).strip().lower()
        if text not in values:
            raise ValueError(f"{text[:40]!r} {why} ({', '.join(values)})")
        return {key: text}
    return f


def _flag(key: str, invert: bool = False) -> Mapper:
    return lambda v, ctx: {key: fio_bool(v) != invert}


def _int(key: str, low: int, high: int) -> Mapper:
    return lambda v, ctx: {key: fio_int(_needs(v), low, high)}


def _seconds(key: str) -> Mapper:
    return lambda v, ctx: {key: fio_seconds(_needs(v))}


def _bs(v: str | None, ctx: Context) -> dict[str, Any]:
    text = _needs(v)
    n = fio_size(text, kb_base=ctx.kb_base)
    assert isinstance(n, int)
    if n % 512:
        quirk = (f"; fio's kb_base={ctx.kb_base} reads {'KiB, MiB' if ctx.kb_base == 1024 else 'k, m'} as powers "
                 f"of 10" if "ib" in text.lower() or ctx.kb_base == 1000 else "")
        raise ValueError(f"{text!r} is {n} bytes, not a multiple of 512{quirk}")
    return {"bs": format_size(n)}


def _footprint(v: str | None, ctx: Context) -> dict[str, Any]:
    n = fio_size(_needs(v), kb_base=ctx.kb_base, percent=True)
    if n == 0:
        return {"footprint": None}          # fio: size=0 is the whole file / device
    return {"footprint": n if isinstance(n, str) else format_size(n)}


def _rwmixwrite(v: str | None, ctx: Context) -> dict[str, Any]:
    return {"rwmixread": 100 - fio_int(_needs(v), 0, 100)}     # fio sets both shares from either


def _percentage_random(v: str | None, ctx: Context) -> dict[str, Any]:
    text = _needs(v)
    if "," in text:
        raise ValueError(f"{text[:40]!r} gives reads, writes (and trims) their own random share; the suite has one")
    return {"percentage_random": fio_int(text, 0, 100)}


def _runtime(v: str | None, ctx: Context) -> dict[str, Any]:
    return {"runtime": fio_seconds(_needs(v)) or None}     # fio: runtime=0 is no time limit


def _rw(v: str | None, ctx: Context) -> dict[str, Any]:
    text = _needs(v).strip().lower()
    if ":" in text:
        raise ValueError(f"{text[:40]!r}: an offset modifier (':N') is not in the suite language")
    if text in ("randtrim", "trim", "trimwrite", "randtrimwrite"):
        raise ValueError(f"{text!r}: trims are not measured by suites (phases.purge discards the device)")
    return _choice("rw", RW_MODES, "is not a mode a suite runs")(text, ctx)


def _bssplit(v: str | None, ctx: Context) -> dict[str, Any]:
    """fio's ``size/pct:size/pct`` with the job's kb_base, checked as the suite checks it."""
    text = _needs(v)
    if "," in text:
        raise ValueError(f"{text[:40]!r} gives reads and writes their own split; the suite has one")
    split: dict[str, str] = {}
    for part in text.split(":"):
        size, sep, pct = part.partition("/")
        if not sep or not pct.strip():
            raise ValueError(f"{part[:40]!r} is not size/percentage (fio's share-the-rest form is not taken)")
        split[str(fio_size(size, kb_base=ctx.kb_base))] = pct.strip()
    return {"bssplit": CHECKS["bssplit"](split)}


def _sized(key: str) -> Mapper:
    """A size (or percentage) read with the job's kb_base, then the suite's check."""
    def f(v: str | None, ctx: Context) -> dict[str, Any]:
        value = CHECKS[key](str(fio_size(_needs(v), kb_base=ctx.kb_base, percent=key != "rate")))
        return {key: value if value.endswith("%") or key == "rate" else format_size(int(value))}
    return f


def _rate_iops(v: str | None, ctx: Context) -> dict[str, Any]:
    """``rate_iops=N`` (reads and writes alike) or ``R,W`` (per direction); a rate for one direction only (``,W``,
    ``R,``) or for trims (a third value) is not taken."""
    parts = _needs(v).split(",")
    if len(parts) > 2 or any(not p.strip() for p in parts):
        raise ValueError("takes one rate, or one for reads and one for writes (READ,WRITE); a rate for one "
                         "direction only or for trims is not taken")
    nums = [fio_int(p.strip(), 1, MAX_RATE_IOPS) for p in parts]
    return {"rate_iops": nums[0] if len(nums) == 1 else f"{nums[0]},{nums[1]}"}


def _checked(key: str) -> Mapper:
    return lambda v, ctx: {key: CHECKS[key](_needs(v))}


def _verify(v: str | None, ctx: Context) -> dict[str, Any]:
    text = _needs(v).strip().lower()
    return {"verify": None if text in ("0", "null") else CHECKS["verify"](text)}     # 0 / null: no verification


# fio option -> the suite keys it sets (every value typed by its mapper; the suite's own validation follows)
TAKEN: dict[str, Mapper] = {
    "rw": _rw,
    "bs": _bs,
    "rwmixread": _int("rwmixread", 0, 100),
    "rwmixwrite": _rwmixwrite,
    "percentage_random": _percentage_random,
    "iodepth": _int("iodepth", 1, 65536),
    "numjobs": _int("numjobs", 1, 4096),
    "runtime": _runtime,
    "time_based": _flag("time_based"),
    "ramp_time": _seconds("ramp_time"),
    "size": _footprint,
    "ioengine": _choice("ioengine", ENGINES, "is not an engine storagelab runs"),
    "direct": _flag("direct"),
    "buffered": _flag("direct", invert=True),
    "refill_buffers": _flag("refill_buffers"),
    "norandommap": _flag("norandommap"),
    "randrepeat": _flag("randrepeat"),
    # the extended options (labcontract.fioextra)
    "bssplit": _bssplit,
    "random_distribution": _checked("random_distribution"),
    "rate": _sized("rate"),
    "offset": _sized("offset"),
    "offset_increment": _sized("offset_increment"),
    "cpus_allowed": _checked("cpus_allowed"),
    "verify": _verify,
    "verify_pattern": _checked("verify_pattern"),
    "rate_iops": _rate_iops,
    **{k: _int(k, low, high) for k, (low, high) in INTS.items()},
    "hipri": _flag("hipri"),
    "fixedbufs": _flag("fixedbufs"),
}

# options that only order jobs, or are read while importing: taken, with what they did
ORDERING = ("stonewall", "wait_for_previous", "wait_for")
CONSUMED = {"kb_base": "sizes read with it"}

_OUTSIDE = ("refused: it writes files or runs commands on the agent's host; storagelab keeps fio's json+ output "
            "and its per-second status instead")
_REPORTING = ("not taken: it changes what fio reports, not the I/O; storagelab always writes group_reporting=1, "
              "lat_percentiles=1 and its percentile_list")
_TARGET = "not taken: the job runs on the one DUT named at submit (--device), not on files of its own"
_NAMING = "not taken: the profile is named after the job's section"
NOT_TAKEN: dict[str, str] = {
    **{k: _OUTSIDE for k in ("exec_prerun", "exec_postrun", "write_iolog", "read_iolog", "write_bw_log",
                             "write_lat_log", "write_iops_log", "write_hist_log", "log_avg_msec", "log_hist_msec",
                             "per_job_logs", "log_offset", "log_compression", "log_store_compressed", "ioscheduler",
                             "replay_redirect", "trigger", "trigger_file", "trigger_cmd", "trigger_timeout",
                             "ioengine_args", "exitall_on_error", "exitall", "pre_read", "cgroup", "uid", "gid",
                             "write_barrier", "steadystate", "ss", "ss_dur", "ss_ramp", "nice", "prio", "prioclass")},
    **{k: _REPORTING for k in ("group_reporting", "lat_percentiles", "clat_percentiles", "slat_percentiles",
                               "percentile_list", "new_group", "stats", "disable_lat", "disable_clat",
                               "disable_slat", "disable_bw_measurement", "gtod_reduce", "significant_figures",
                               "unified_rw_reporting", "write_lat_percentiles")},
    **{k: _TARGET for k in ("filename", "directory", "filename_format", "unique_filename", "nrfiles", "filesize",
                            "file_service_type", "openfiles", "create_serialize", "create_on_open",
                            "allow_file_create", "allow_mounted_write", "fallocate", "unlink", "unlink_each_loop",
                            "create_only", "create_fsync", "lockfile", "file_append", "fill_device", "fill_fs")},
    **{k: _NAMING for k in ("name", "description")},
    "thread": "not taken: fio runs jobs as threads instead of processes; the agent runs fio's default (processes), "
              "the I/O issued is the same",
    "loops": "refused: the suite runs each job once (a suite's repeat runs every cell N times)",
    "startdelay": "refused: the suite starts each job when the one before it ends",
    "io_size": "refused: the suite ends a job by its runtime or footprint, not by an I/O amount",
    "number_ios": "refused: the suite ends a job by its runtime or footprint, not by an I/O count",
    "bsrange": "refused: a range of block sizes is not in the suite language",
    "blocksize_range": "refused: a range of block sizes is not in the suite language",
    **{k: "refused: not in the suite language (a suite takes verify and verify_pattern; fio's default for this)"
       for k in ("do_verify", "verify_interval", "verify_offset", "verify_backlog", "verify_fatal", "verify_async",
                 "verify_only", "verify_state_save", "verify_state_load", "verify_dump", "verify_write_sequence",
                 "verify_header_seed", "experimental_verify")},
    "zonemode": "refused: zoned I/O is not in the suite language",
    "zonesize": "refused: zoned I/O is not in the suite language",
    "zonerange": "refused: zoned I/O is not in the suite language",
    "zoneskip": "refused: zoned I/O is not in the suite language",
}
UNKNOWN = "refused: not in storagelab's allowlist of fio options (docs/suites.md, Workload options)"


def reason_not_taken(key: str) -> str:
    return NOT_TAKEN.get(key, UNKNOWN)
