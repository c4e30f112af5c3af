"""fio's job-file format, read the way fio reads it, bounded: what ``labctl suite import`` starts from.

A job file is INI-like (fio's ``parse_jobs_ini``): sections ``[name]``; a section whose name starts with
``global`` sets defaults for the jobs defined after it; ``;`` and ``#`` start a comment anywhere on a line; an
option is ``key=value`` or a bare ``key`` (a flag). What fio would take from outside the file is refused with the
reason, never followed: ``include`` (another file), ``$VAR`` / ``${VAR}`` (the environment, or fio's ``$ncpus``
keywords) and ``(...)`` arithmetic.

Values are read with fio's own rules (:func:`fio_size`, :func:`fio_seconds`, :func:`fio_bool`): sizes with
``k m g t p`` (binary multiples) and fio's default ``kb_base=1024`` quirk that ``KiB`` / ``MiB`` are powers of
*ten* there (``4KiB`` is 4000 bytes; ``kb_base=1000`` swaps the two), an optional ``%``; times in seconds unless a
unit (``us ms s m h d``) is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from labcontract.errors import JobFileError, Problem

MAX_JOBFILE_BYTES = 256 * 1024        # one job file's text
MAX_LINE_CHARS = 4096                 # fio's own OPT_LEN_MAX is 4096
MAX_JOBS = 256                        # job sections in one file (a suite holds them as profiles)
MAX_OPTIONS = 256                     # options of one section
MAX_FILES = 32                        # job files of one import

_SECTION = re.compile(r"^\[([^\]\n]{1,255})\]")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


@dataclass(frozen=True)
class Option:
    """One option as written: its key (lower case), its value (None: a bare flag) and its line."""

    key: str
    value: str | None
    line: int


@dataclass
class Section:
    name: str
    line: int
    options: list[Option] = field(default_factory=list)

    @property
    def is_global(self) -> bool:
        return self.name.startswith("global")     # fio: strncmp(name, "global", 6)


@dataclass(frozen=True)
class JobFile:
    source: str
    sections: tuple[Section, ...]
    refused: tuple[tuple[int, str, str], ...]   # (line, option, why): lines not taken (include, outside a section)


def _strip_comment(line: str) -> str:
    """fio's strip_blank_end: everything from the first ';' or '#' on is a comment."""
    for mark in (";", "#"):
        cut = line.find(mark)
        if cut >= 0:
            line = line[:cut]
    return line.strip()


def parse_jobfile(text: str, source: str) -> JobFile:
    """The sections of a job file; JobFileError (every problem at once) when it is over a bound or not text fio
    would read. An ``include`` line is not followed: it is kept as a refusal with its reason."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_JOBFILE_BYTES:
        raise JobFileError(source, [Problem("", f"the job file is {size} bytes, over the limit of "
                                                f"{MAX_JOBFILE_BYTES} bytes")])
    problems: list[Problem] = []
    refused: list[tuple[int, str, str]] = []
    sections: list[Section] = []
    for n, raw in enumerate(text.splitlines(), 1):
        where = f"line {n}"
        if len(raw) > MAX_LINE_CHARS:
            problems.append(Problem(where, f"{len(raw)} characters, over the limit of {MAX_LINE_CHARS}"))
            continue
        line = _strip_comment(raw)
        if not line:
            continue
        if line.startswith("["):
            m = _SECTION.match(line)
            if m is None or m.end() != len(line):
                problems.append(Problem(where, f"{line[:80]!r} is not a section header [name]"))
                continue
            if sum(not s.is_global for s in sections) >= MAX_JOBS and not m.group(1).startswith("global"):
                problems.append(Problem(where, f"more than {MAX_JOBS} jobs in one file"))
                break
            sections.append(Section(m.group(1), n))
            continue
        if line.startswith("include") and (len(line) == 7 or line[7] in " \t"):
            refused.append((n, "include", "refused: an included file is not read (copy its options into this file)"))
            continue
        key, sep, value = line.partition("=")
        key = key.strip().lower()
        if not _KEY.match(key):
            problems.append(Problem(where, f"{line[:80]!r} is not an option (key or key=value)"))
            continue
        if not sections:
            refused.append((n, key, "refused: an option outside any [section] (fio refuses it)"))
            continue
        if len(sections[-1].options) >= MAX_OPTIONS:
            problems.append(Problem(where, f"more than {MAX_OPTIONS} options in section [{sections[-1].name}]"))
            continue
        sections[-1].options.append(Option(key, value.strip() if sep else None, n))
    if problems:
        raise JobFileError(source, problems)
    return JobFile(source, tuple(sections), tuple(refused))


# --- values, as fio reads them ---------------------------------------------------------------------

_NUMBER = re.compile(r"^(\d{1,19})([A-Za-z%]*)\Z")
_POW = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_TIME_MULT_US = {"": None, "us": 1, "usec": 1, "ms": 1000, "msec": 1000, "s": 10**6, "m": 60 * 10**6,
                 "h": 3600 * 10**6, "d": 86400 * 10**6}


def outside_value(value: str) -> str | None:
    """Why a value takes something from outside the file (None: it does not)."""
    if "$" in value:
        return "refused: a $VAR / ${VAR} expansion takes its value from the environment of the host that runs fio"
    if "(" in value or ")" in value:
        return "refused: fio arithmetic ((...)) is not imported; write the value out"
    return None


def fio_size(value: str, *, kb_base: int = 1024, percent: bool = False) -> int | str:
    """Bytes of a fio size (``4k``, ``4K``, ``1m``, ``10G``, ``4ki``, ``4KiB``); ``"N%"`` when ``percent``
    and it ends in ``%``. ValueError with the reason otherwise (decimals, hex, ranges and lists are refused)."""
    v = value.strip()
    if "," in v or ":" in v or "-" in v[1:]:
        raise ValueError(f"{v[:40]!r} is a list or range of sizes, not one size")
    m = _NUMBER.match(v)
    if m is None:
        raise ValueError(f"{v[:40]!r} is not a whole size with fio's units (k, m, g, t, p, ki, KiB, %)")
    number, unit = int(m.group(1)), m.group(2).lower()
    if unit == "%":
        if not percent:
            raise ValueError(f"{v!r}: a percentage is not a size here")
        return f"{number}%"
    if unit in ("", "b"):
        return number
    head = unit[0]
    if head not in _POW or unit[1:] not in ("", "b", "i", "ib"):
        raise ValueError(f"{v[:40]!r}: unit {unit!r} is none of fio's (k, m, g, t, p, with b, i or ib)")
    mult = kb_base
    if unit[1:] == "ib":      # fio's parse: "KiB" is the other base (1000 under the default kb_base=1024)
        mult = 1000 if kb_base == 1024 else 1024
    return int(number * mult ** _POW[head])


def fio_seconds(value: str) -> int:
    """Whole seconds of a fio time (``900``, ``60s``, ``2m``, ``1h``, ``5000ms``); ValueError otherwise."""
    v = value.strip()
    m = _NUMBER.match(v)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _TIME_MULT_US:
        raise ValueError(f"{v[:40]!r} is not a time with fio's units (us, ms, s, m, h, d)")
    us = int(m.group(1)) * (_TIME_MULT_US[unit] or 10**6)
    if us % 10**6:
        raise ValueError(f"{v!r} is not a whole number of seconds")
    return us // 10**6


def fio_bool(value: str | None) -> bool:
    """A fio flag: bare (set), or 0 / 1."""
    if value is None or value.strip() == "1":
        return True
    if value.strip() == "0":
        return False
    raise ValueError(f"{value[:40]!r} is not 0 or 1")


def fio_int(value: str, low: int, high: int) -> int:
    v = value.strip()
    if not re.fullmatch(r"\d{1,12}", v):
        raise ValueError(f"{v[:40]!r} is not a whole number")
    n = int(v)
    if not low <= n <= high:
        raise ValueError(f"{n} is out of range ({low}-{high})")
    return n


def read_jobfile(path: str) -> tuple[str, str]:
    """``(path, text)`` of a job file, read at most one byte past the bound; JobFileError when it cannot be read."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_JOBFILE_BYTES + 1)
    except IsADirectoryError:
        raise JobFileError(path, [Problem("", "is a directory, not a job file")]) from None
    except OSError as e:
        raise JobFileError(path, [Problem("", f"cannot read: {e.strerror or e}")]) from None
    if len(raw) > MAX_JOBFILE_BYTES:
        raise JobFileError(path, [Problem("", f"the job file is over the limit of {MAX_JOBFILE_BYTES} bytes")])
    try:
        return path, raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JobFileError(path, [Problem("", f"not UTF-8 text (byte {e.start})")]) from None
