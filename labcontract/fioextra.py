"""The fio options a suite may set beyond the basic workload (issue 28): typed, bounded, checked twice.

Each option has one check (:data:`CHECKS`) that takes what a suite writes (or a start message carries) and returns
its canonical fio spelling, or raises ValueError with the reason. The suite schema (:mod:`labcontract.suite`)
validates with it, the renderer writes the canonical text, and the agent's job checker
(:func:`labcontract.fiojob.check_job`) runs the same check on the rendered job before fio reads it.

These options need an agent whose ``fio`` kind is at least :data:`FIO_KIND_VERSION`: a workload that sets none of
them serialises exactly as before (an older agent still reads it), one that sets any needs a newer agent (the
controller does not send it to an older one: :func:`needed_fio_version`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from labcontract.units import format_size, parse_size

FIO_KIND_VERSION = 2          # agents.kinds.fio.FioKind.command_version that knows the options here
FIO_RATE_PAIR_VERSION = 3     # ... and a per-direction rate_iops (READ,WRITE)
MIN_BS, MAX_BS = 512, 64 << 20
MAX_SPLITS = 64               # bssplit entries
MAX_RATE_IOPS = 100_000_000
MAX_RATE_BYTES = 1 << 50      # 1 PiB/s: above any device
MAX_OFFSET_BYTES = 1 << 50
MAX_CPU = 4095                # cpus_allowed: CPU numbers 0..4095
MAX_CPU_RANGES = 64
VERIFY_METHODS = ("md5", "crc64", "crc32", "crc32c", "crc32c-intel", "crc16", "crc7", "sha1", "sha256", "sha512",
                  "sha3-224", "sha3-256", "sha3-384", "sha3-512", "xxhash", "meta", "pattern")
URING_ONLY = {"fixedbufs": ("io_uring",), "hipri": ("io_uring", "pvsync2")}    # engine options of these engines
_DECIMAL = r"\d{1,3}(?:\.\d{1,6})?"


def _decimal(x: float) -> str:
    """A number as fio reads it back: no exponent, at most 6 decimals, no trailing zeros."""
    return f"{x:.6f}".rstrip("0").rstrip(".")


def _text(v: object, what: str, limit: int = 256) -> str:
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise ValueError(f"{what}: not a value ({type(v).__name__})")
    text = str(v).strip()
    if not text or len(text) > limit:
        raise ValueError(f"{what}: {text[:40]!r} must be 1 to {limit} characters")
    return text


def _split_size(text: str) -> int:
    n = parse_size(text)
    if not MIN_BS <= n <= MAX_BS or n % 512:
        raise ValueError(f"block size {text!r} must be 512 bytes to 64 MiB, a multiple of 512")
    return n


def check_bssplit(v: object) -> str:
    """``4k/10:64k/90`` (or a mapping ``{4k: 10, 64k: 90}``): block sizes with their percentage of the I/Os, the
    percentages summing to 100, no size twice; one split for reads and writes alike (no ``,``)."""
    if isinstance(v, Mapping):
        items = [(str(k), val) for k, val in v.items()]
    else:
        text = _text(v, "bssplit", 2048)
        if "," in text:
            raise ValueError("one split for reads and writes alike (fio's per-direction ',' form is not "
                             "taken)")
        items = []
        for part in text.split(":"):
            size, sep, pct = part.partition("/")
            if not sep:
                raise ValueError(f"{part[:40]!r} is not size/percentage")
            items.append((size, pct))
    if not 1 <= len(items) <= MAX_SPLITS:
        raise ValueError(f"1 to {MAX_SPLITS} block sizes")
    out: list[tuple[int, int]] = []
    for size, pct in items:
        n = _split_size(size)
        if isinstance(pct, bool) or not re.fullmatch(r"\d{1,3}", str(pct).strip()):
            raise ValueError(f"{str(pct)[:20]!r} is not a whole percentage")
        p = int(str(pct).strip())
        if not 1 <= p <= 100:
            raise ValueError(f"percentage {p} of {format_size(n)} must be 1 to 100")
        if any(n == m for m, _ in out):
            raise ValueError(f"{format_size(n)} is listed twice")
        out.append((n, p))
    total = sum(p for _, p in out)
    if total != 100:
        raise ValueError(f"the percentages sum to {total}, not 100")
    return ":".join(f"{format_size(n)}/{p}" for n, p in out)


def bssplit_max(split: str) -> int:
    return max(parse_size(part.split("/")[0]) for part in split.split(":"))


def check_random_distribution(v: object) -> str:
    """``zipf:THETA`` (above 0, not 1), ``pareto:H`` (0 < H < 1), ``normal:SIGMA`` (0 <= SIGMA < 100; ``gauss`` is
    fio's alias) or ``random`` (fio's default, uniform), with fio's ranges; no ``:center`` and no zoned forms."""
    text = _text(v, "random_distribution", 32).lower()
    if text == "random":
        return text
    kind, sep, value = text.partition(":")
    kind = "normal" if kind == "gauss" else kind
    if kind not in ("zipf", "pareto", "normal") or not sep:
        raise ValueError(f"random_distribution {text!r} is not zipf:THETA, pareto:H, normal:SIGMA or random "
                         f"(fio's zoned forms are not taken)")
    if not re.fullmatch(_DECIMAL, value):
        raise ValueError(f"random_distribution {text!r}: {value[:20]!r} is not a number (at most 6 decimals)")
    x = float(value)
    if kind == "zipf" and not (0 < x <= 100 and x != 1):
        raise ValueError(f"random_distribution {text!r}: zipf theta must be above 0, at most 100 and not 1.0")
    if kind == "pareto" and not 0 < x < 1:
        raise ValueError(f"random_distribution {text!r}: pareto h must be above 0 and below 1")
    if kind == "normal" and not 0 <= x < 100:
        raise ValueError(f"random_distribution {text!r}: normal sigma must be at least 0 and below 100")
    return f"{kind}:{_decimal(x)}"


def check_rate(v: object) -> str:
    """Bytes per second (``rate: 100m``), one rate for reads and writes alike; its shortest fio spelling."""
    text = _text(v, "rate", 32)
    if "," in text:
        raise ValueError("rate: one rate for reads and writes alike (fio's per-direction ',' form is not taken)")
    n = parse_size(text)
    if not 1 <= n <= MAX_RATE_BYTES:
        raise ValueError(f"rate {text!r} must be above 0 and at most {format_size(MAX_RATE_BYTES)} per second")
    return format_size(n)


def check_rate_iops(v: object) -> int | str:
    """``rate_iops``: one rate for reads and writes alike (a number: fio caps each direction at it), or one per
    direction, ``READ,WRITE`` (a mixed job keeps its mix only so: with one rate fio switches to the other direction
    whenever one is ahead, and the mix drifts toward 50/50). Returns the number, or the canonical ``R,W``."""
    low, high = 1, MAX_RATE_IOPS
    if isinstance(v, int) and not isinstance(v, bool):
        if not low <= v <= high:      # worded as the schema words a bound (one reason, not one per union branch)
            raise ValueError(f"{v} is out of range (must be {'>= ' + str(low) if v < low else '<= ' + str(high)})")
        return v
    text = _text(v, "rate_iops", 24)
    m = re.fullmatch(r"(\d{1,9})(?:,(\d{1,9}))?", text)
    if m is None:
        raise ValueError(f"rate_iops {text!r} is not a number of I/Os per second, nor READ,WRITE (two numbers)")
    nums = [int(g) for g in m.groups() if g is not None]
    bad = [n for n in nums if not low <= n <= high]
    if bad:
        raise ValueError(f"rate_iops {text!r}: each rate must be {low} to {high}")
    return nums[0] if len(nums) == 1 else f"{nums[0]},{nums[1]}"


def check_offset(v: object) -> str:
    """A start offset (``offset``, ``offset_increment``): a percentage of the device (0-99.99%) or a size; the
    canonical form is ``N%`` or a whole number of bytes."""
    text = _text(v, "offset", 32)
    if text.endswith("%"):
        if not re.fullmatch(_DECIMAL + "%", text):
            raise ValueError(f"offset {text!r} is not a percentage (at most 6 decimals)")
        pct = float(text[:-1])
        if not 0 <= pct < 100:
            raise ValueError(f"offset {text!r} must be at least 0% and below 100%")
        return f"{_decimal(pct)}%"
    n = parse_size(int(text) if text.isdigit() else text)
    if n > MAX_OFFSET_BYTES:
        raise ValueError(f"offset {text!r} is over the ceiling of {format_size(MAX_OFFSET_BYTES)}")
    return str(n)


def check_cpus(v: object) -> str:
    """A CPU list: numbers and ranges (``0-3,8,10-11``), CPUs 0-4095, at most 64 entries, ranges ascending."""
    text = _text(v, "cpus_allowed", 512).replace(" ", "")
    parts = text.split(",")
    if len(parts) > MAX_CPU_RANGES:
        raise ValueError(f"at most {MAX_CPU_RANGES} numbers or ranges")
    out = []
    for part in parts:
        m = re.fullmatch(r"(\d{1,4})(?:-(\d{1,4}))?", part)
        if m is None:
            raise ValueError(f"{part[:20]!r} is not a CPU number or range (N or N-M)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi > MAX_CPU or lo > hi:
            raise ValueError(f"{part!r} must be CPUs 0-{MAX_CPU}, ranges ascending")
        out.append(f"{lo}-{hi}" if hi != lo else str(lo))
    return ",".join(out)


def check_verify_pattern(v: object) -> str:
    """A verify pattern: hex bytes ``0x`` + 2 to 64 digits (an even count), or a whole number below 2**32."""
    text = _text(v, "verify_pattern", 66)
    if re.fullmatch(r"0[xX](?:[0-9a-fA-F]{2}){1,32}", text):
        return "0x" + text[2:].lower()
    if re.fullmatch(r"\d{1,10}", text) and int(text) < 1 << 32:
        return str(int(text))
    raise ValueError(f"verify_pattern {text[:40]!r} is not 0x followed by hex bytes (at most 32) or a number "
                     f"below 2**32 (fio's quoted and %o forms are not taken)")


def check_verify(v: object) -> str:
    text = _text(v, "verify", 16).lower()
    if text not in VERIFY_METHODS:
        raise ValueError(f"verify {text!r} is not one of fio's methods ({', '.join(VERIFY_METHODS)})")
    return text


# every extended option's check, by suite key (the same name as fio's option); ints and flags are typed by the
# schema and checked by pattern in a job file
CHECKS: dict[str, Callable[[object], str]] = {
    "bssplit": check_bssplit, "random_distribution": check_random_distribution, "rate": check_rate,
    "offset": check_offset, "offset_increment": check_offset, "cpus_allowed": check_cpus,
    "verify": check_verify, "verify_pattern": check_verify_pattern,
}
INTS = {"buffer_compress_percentage": (0, 100), "dedupe_percentage": (0, 100)}
RATE_IOPS = "rate_iops"       # a number or READ,WRITE (check_rate_iops)
FLAGS = ("hipri", "fixedbufs")
EXTENDED = (*CHECKS, RATE_IOPS, *INTS, *FLAGS)   # the job's line order (rate_iops where it always was)
# what a precondition round leaves out: it runs the workload at full load, and verifies nothing
NOT_IN_PRECONDITION = ("rate", "rate_iops", "verify", "verify_pattern")


def cross_problems(w: Mapping[str, Any]) -> list[str]:
    """What fio refuses (or silently breaks) in the combination of a workload's options."""
    out = []
    for flag, engines in URING_ONLY.items():
        if w.get(flag) and w.get("ioengine") not in engines:
            out.append(f"{flag} is an option of ioengine {' / '.join(engines)} (fio refuses it with "
                       f"{w.get('ioengine')})")
    if w.get("verify") == "pattern" and not w.get("verify_pattern"):
        out.append("verify: pattern needs verify_pattern (the bytes to write and check)")
    if w.get("verify_pattern") and not w.get("verify"):
        out.append("verify_pattern needs verify (a method: pattern, meta, crc32c, ...)")
    if w.get("verify") and w.get("norandommap"):
        out.append("verify with norandommap: fio cannot verify blocks written twice (its HOWTO: do not combine)")
    off, fp = w.get("offset"), w.get("footprint")
    if isinstance(off, str) and off.endswith("%") and isinstance(fp, str) and fp.endswith("%") \
            and float(off[:-1]) + float(fp[:-1]) > 100:
        out.append(f"offset {off} + footprint {fp} run past the device's end")
    return out


def fio_lines(w: Mapping[str, Any]) -> list[str]:
    """The job-section lines of the extended options a workload sets, canonical, in :data:`EXTENDED` order."""
    lines = []
    for key in EXTENDED:
        value = w.get(key)
        if value is None or value is False:
            continue
        if key in ("offset", "offset_increment") and not str(value).endswith("%"):
            value = format_size(int(value))
        lines.append(f"{key}={1 if value is True else value}")
    return lines


def needed_fio_version(workloads: Iterable[Mapping[str, Any]]) -> int:
    """The least ``fio`` kind version an agent needs to run these workloads: any extended option set (even to 0 or
    false: it is serialised, and an older agent refuses a key it does not know) needs :data:`FIO_KIND_VERSION`, a
    per-direction ``rate_iops`` (``R,W``) :data:`FIO_RATE_PAIR_VERSION`."""
    need = 1
    for w in workloads:
        if isinstance(w.get(RATE_IOPS), str):
            return FIO_RATE_PAIR_VERSION
        if any(w.get(k) is not None for k in EXTENDED):
            need = FIO_KIND_VERSION
    return need
