"""``labctl suite import``: a suite from an engineer's fio job files, every option mapped or listed with its reason.

Each job section becomes a profile, in file order (the suite runs them one after another, as fio's ``stonewall``
does); the ``[global]`` options in force where a job is defined apply to it, its own options after them (later
wins, as in fio). fio's defaults are written out where the suite's differ (``rw=read``, ``bs=4k``,
``ioengine=psync``, ``direct=0``, ``time_based=0``), so the suite runs what fio would. Every option that is not
taken, and every change of meaning (two jobs fio runs at the same time, a job without a runtime) is a
:class:`Note`; the result is refused (:class:`~labcontract.errors.JobFileError`) only when no job could be
imported, with every note as its reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from labcontract.errors import JobFileError, Problem, SuiteError
from labcontract.fioextra import URING_ONLY
from labcontract.fiojobfile import MAX_FILES, JobFile, Option, fio_bool, outside_value, parse_jobfile
from labcontract.fiomap import ALIASES, CONSUMED, ORDERING, TAKEN, Context, reason_not_taken
from labcontract.suite import MAX_RUNTIME_S, MIXED, WorkloadOptions, parse_suite
from labcontract.suitebase import problems_from

# where the suite's default differs from fio's, fio's is written into the profile
FIO_DEFAULTS: dict[str, Any] = {"rw": "read", "bs": "4k", "ioengine": "psync", "direct": False, "time_based": False}
DUT_NAME = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9_./:@+-]{0,255}\Z")
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


@dataclass(frozen=True)
class Note:
    """One thing of a job file the suite does not carry as written: where, which option, why."""

    source: str
    line: int | None
    section: str
    option: str
    message: str

    def __str__(self) -> str:
        return _PRINTABLE.sub("?", f"{self.source}: {self.where()}")

    def where(self) -> str:
        """The note without its file: line, section, option and message."""
        line = f"line {self.line}: " if self.line else ""
        option = f" {self.option}:" if self.option else ""
        return _PRINTABLE.sub("?", f"{line}[{self.section}]{option} {self.message}")


@dataclass(frozen=True)
class Imported:
    """The suite's YAML text, the jobs read and imported, and every note."""

    text: str
    jobs_read: int
    profiles: tuple[str, ...]
    notes: tuple[Note, ...]


def _profile_name(section: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "-", section).lstrip("_.-")[:60] or "job"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}-{k}", k + 1
    taken.add(name)
    return name


def _kb_base(options: Sequence[Option]) -> int:
    for opt in reversed(options):
        if opt.key == "kb_base" and opt.value is not None and opt.value.strip() in ("1000", "1024"):
            return int(opt.value.strip())
    return 1024


class _Job:
    """One job of a file: its options in force (globals first), read into suite keys."""

    def __init__(self, source: str, name: str, line: int, options: list[tuple[str, Option]], dut: str | None):
        self.source, self.name, self.line = source, name, line
        self.values: dict[str, Any] = {}
        self.notes: list[Note] = []
        self.stonewall = False
        self.refused: set[str] = set()        # options given but not taken for their value
        ctx = Context(kb_base=_kb_base([o for _, o in options]))
        for section, opt in options:
            self._take(section, opt, ctx, dut)

    def note(self, section: str, opt: Option | None, message: str) -> None:
        self.notes.append(Note(self.source, opt.line if opt else self.line, section, opt.key if opt else "",
                               message))

    def _take(self, section: str, opt: Option, ctx: Context, dut: str | None) -> None:
        key = ALIASES.get(opt.key, opt.key)
        if opt.value is not None and (why := outside_value(opt.value)) is not None:
            self.note(section, opt, why)
        elif key in ORDERING:
            try:
                self.stonewall = self.stonewall or key == "wait_for" or fio_bool(opt.value)
            except ValueError as e:
                self.note(section, opt, f"refused: {e}")
        elif key in CONSUMED:
            pass
        elif key in ("filename", "directory"):
            where = f" (--dut {dut})" if dut else " (--device)"
            self.note(section, opt, f"{key}={(opt.value or '')[:120]}: the job runs on the DUT named at submit{where}, "
                                    f"not on this {'file' if key == 'filename' else 'directory'}")
        elif (mapper := TAKEN.get(key)) is None:
            self.note(section, opt, reason_not_taken(key))
        else:
            try:
                self.values.update(mapper(opt.value, ctx))
            except ValueError as e:
                self.refused.add(key)
                self.values.pop(key, None)      # a [global] value it overrides is not what fio would run either
                self.note(section, opt, f"refused: {e}")

    def entry(self, name: str) -> dict[str, Any] | None:
        """The profile entry (None: the job cannot be imported; its notes say why)."""
        v = {k: val for k, val in self.values.items() if val is not None}
        lost = sorted(k for k in self.refused if k in FIO_DEFAULTS and k not in v)
        if lost:      # fio's default in its place would be another workload
            self.note(self.name, None, f"job not imported: its {', '.join(lost)} could not be taken")
            return None
        for key, default in FIO_DEFAULTS.items():
            v.setdefault(key, default)
        if "runtime" not in v:
            bound = "time_based without a runtime runs until stopped" if v["time_based"] else \
                "no runtime: the job ends once it has covered its size"
            self.note(self.name, None, f"{bound}; the suite bounds it at {MAX_RUNTIME_S // 86400} days "
                                       f"(runtime: {MAX_RUNTIME_S // 86400}d)")
            v["runtime"] = f"{MAX_RUNTIME_S // 86400}d"
        self._drop_contradictions(v)
        if "rwmixread" in v and v["rw"] not in MIXED:
            self.note(self.name, None, f"rwmixread={v.pop('rwmixread')} not taken: fio ignores it for rw={v['rw']}")
        for key in list(v):
            try:
                WorkloadOptions.model_validate({key: v[key]})
            except ValidationError as e:
                del v[key]
                self.note(self.name, None, f"{key}: refused: " + "; ".join(p.message for p in problems_from(e)))
        if "rw" not in v or "bs" not in v:
            self.note(self.name, None, "job not imported: it has no usable rw or bs")
            return None
        return {"name": name, **v}


    def _drop_contradictions(self, v: dict[str, Any]) -> None:
        """Options fio would refuse in this job's combination: left out, each with the reason (the job stays)."""
        for flag, engines in URING_ONLY.items():
            if v.get(flag) and v["ioengine"] not in engines:
                v.pop(flag)
                self.note(self.name, None, f"{flag} refused: an option of ioengine {' / '.join(engines)}, not of "
                                           f"{v['ioengine']}")
        if v.get("verify") and v.get("norandommap"):
            self.note(self.name, None, f"verify={v.pop('verify')} refused: fio cannot verify with norandommap")
        if v.get("verify") == "pattern" and not v.get("verify_pattern"):
            self.note(self.name, None, f"verify={v.pop('verify')} refused: it needs a verify_pattern")
        if v.get("verify_pattern") and not v.get("verify"):
            self.note(self.name, None, f"verify_pattern={v.pop('verify_pattern')} refused: it needs a verify")


def _jobs(jf: JobFile, dut: str | None) -> list[_Job]:
    glob: list[tuple[str, Option]] = []
    jobs: list[_Job] = []
    for sec in jf.sections:
        if sec.is_global:
            glob += [(sec.name, o) for o in sec.options]
            continue
        job = _Job(jf.source, sec.name, sec.line, [*glob, *((sec.name, o) for o in sec.options)], dut)
        if jobs and not job.stonewall:
            job.note(sec.name, None, f"fio runs it at the same time as [{jobs[-1].name}] (no stonewall between "
                                     f"them); the suite runs each job on its own, one after another")
        jobs.append(job)
    return jobs


def _factor_defaults(profiles: list[dict[str, Any]]) -> dict[str, Any]:
    """Options every profile sets to the same value, moved to ``defaults`` (the job files' [global], roughly)."""
    if len(profiles) < 2:
        return {}
    common = {k: v for k, v in profiles[0].items() if k != "name"
              and all(k in p and p[k] == v and type(p[k]) is type(v) for p in profiles[1:])}
    for p in profiles:
        for k in common:
            del p[k]
    return common


def _document(name: str, description: str, profiles: list[dict[str, Any]]) -> dict[str, Any]:
    copies = [dict(p) for p in profiles]
    defaults = _factor_defaults(copies)
    return {"suite": name, "description": description, **({"defaults": defaults} if defaults else {}),
            "profiles": copies}


def _suite_name(files: Sequence[tuple[str, str]], name: str | None) -> str:
    if name is not None:
        return name
    stem = Path(files[0][0]).stem if files else "imported"
    return (re.sub(r"[^A-Za-z0-9_.-]", "-", stem).lstrip("_.-")[:64]) or "imported"


def import_jobfiles(files: Sequence[tuple[str, str]], *, name: str | None = None,
                    dut: str | None = None) -> Imported:
    """The suite of ``files`` ((source, text) pairs, in order); JobFileError when no job could be imported or
    an input is over a bound. A later file's first job is stonewalled, as fio does with several job files."""
    if not files or len(files) > MAX_FILES:
        raise JobFileError("suite import", [Problem("", f"give 1 to {MAX_FILES} job files (got {len(files)})")])
    if dut is not None and not DUT_NAME.match(dut):
        raise JobFileError("suite import", [Problem("--dut", f"{dut[:60]!r} is not a DUT name or path")])
    suite_name = _suite_name(files, name)
    notes: list[Note] = []
    jobs: list[_Job] = []
    for source, text in files:
        jf = parse_jobfile(text, source)
        notes += [Note(source, line, "-", key, why) for line, key, why in jf.refused]
        file_jobs = _jobs(jf, dut)
        if not file_jobs:
            notes.append(Note(source, None, "-", "", "no job section: nothing to import"))
        jobs += file_jobs
    taken: set[str] = set()
    entries: list[tuple[_Job, dict[str, Any]]] = []
    for job in jobs:
        entry = job.entry(_profile_name(job.name, taken))
        if entry is not None:
            entries.append((job, entry))
    description = "imported from " + ", ".join(Path(s).name for s, _ in files)
    while entries:
        doc = _document(suite_name, description[:4096], [e for _, e in entries])
        text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
        try:
            parse_suite(text, "imported")
            break
        except SuiteError as e:
            bad = _profiles_of(e, entries)
            if not bad:
                raise
            entries = [pair for k, pair in enumerate(entries) if k not in bad]
    for job in jobs:
        notes += job.notes
    notes = list(dict.fromkeys(notes))
    if not entries:
        raise JobFileError(", ".join(s for s, _ in files)[:200],
                           [Problem("", "no job could be imported")]
                           + [Problem("", n.where() if len(files) == 1 else str(n)) for n in notes])
    return Imported(_header(files, notes, dut) + text, len(jobs), tuple(e["name"] for _, e in entries),
                    tuple(notes))


def _profiles_of(e: SuiteError, entries: list[tuple[_Job, dict[str, Any]]]) -> set[int]:
    """The profiles a suite error names (each noted on its job); problems of the defaults are charged to all."""
    bad: set[int] = set()
    for p in e.problems:
        m = re.match(r"^profiles\[(\d+)\]", p.location)
        hit = {int(m.group(1))} if m else set(range(len(entries))) if p.location.startswith("defaults") else set()
        for k in hit & set(range(len(entries))):
            job = entries[k][0]
            key = re.sub(r"^(profiles\[\d+\]|defaults)\.?", "", p.location)
            job.note(job.name, None, f"job not imported: {key + ': ' if key else ''}{p.message}")
            bad.add(k)
    return bad


def _header(files: Sequence[tuple[str, str]], notes: Sequence[Note], dut: str | None) -> str:
    lines = ["# Imported by labctl suite import from " + ", ".join(Path(s).name for s, _ in files) + ".",
             "# fio's defaults are written where the suite's differ (rw=read, bs=4k, ioengine=psync, direct=0, "
             "time_based=0).",
             f"# Submit: labctl submit THIS.yaml --host HOST --device {dut or 'DUT'}"]
    if notes:
        lines.append(f"# Not taken as written ({len(notes)}):")
        lines += [f"#   {n}" for n in notes]
    return "\n".join(_PRINTABLE.sub("?", line) for line in lines) + "\n"
