"""The suite schema: what to run, independent of where and when.

A suite is YAML::

    suite: quick-look               # name
    description: optional text
    defaults:                       # workload options applied to every workload
      ioengine: libaio
      direct: true
      runtime: 60s
    workloads:
      - name: 4k-randread
        rw: randread
        bs: 4k
        iodepth: 16
        numjobs: 16

:func:`load_suite` validates the whole file and raises :class:`SuiteError` with every
problem at once, each named by key path (``workloads[1].bs``).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from labcontract.errors import Problem, SuiteError
from labcontract.units import parse_duration, parse_size

RwMode = Literal["read", "write", "randread", "randwrite", "rw", "readwrite", "randrw"]
IoEngine = Literal["libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio"]

_FOOTPRINT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _size(v: object) -> int:
    n = parse_size(v)
    if n < 512:
        raise ValueError(f"block size {v!r} is below 512 bytes")
    return n


def _footprint(v: object) -> str:
    """``"20%"`` of the device, or an absolute size (normalised to bytes)."""
    if isinstance(v, str) and (m := _FOOTPRINT.match(v)):
        pct = float(m.group(1))
        if not 0 < pct <= 100:
            raise ValueError(f"footprint {v!r} must be above 0% and at most 100%")
        return f"{pct:g}%"
    n = parse_size(v)
    if n <= 0:
        raise ValueError("footprint must be above zero")
    return str(n)


BlockSize = Annotated[int, BeforeValidator(_size)]
Seconds = Annotated[int, BeforeValidator(parse_duration)]
Footprint = Annotated[str, BeforeValidator(_footprint)]
Percent = Annotated[int, Field(ge=0, le=100)]


class WorkloadOptions(BaseModel):
    """fio options a suite may set; every one optional so ``defaults`` can hold any of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rw: RwMode | None = None
    bs: BlockSize | None = None
    rwmixread: Percent | None = None
    percentage_random: Percent | None = None
    iodepth: Annotated[int, Field(ge=1, le=65536)] | None = None
    numjobs: Annotated[int, Field(ge=1, le=4096)] | None = None
    runtime: Annotated[Seconds, Field(ge=1)] | None = None
    ramp_time: Seconds | None = None
    ioengine: IoEngine | None = None
    direct: bool | None = None
    footprint: Footprint | None = None
    refill_buffers: bool | None = None
    norandommap: bool | None = None
    randrepeat: bool | None = None


class WorkloadEntry(WorkloadOptions):
    name: Annotated[str, Field(pattern=_NAME.pattern)]


class Workload(BaseModel):
    """A fully resolved workload: defaults applied, every option set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    rw: RwMode
    bs: int
    rwmixread: int | None = None
    percentage_random: int | None = None
    iodepth: int = 1
    numjobs: int = 1
    runtime: int = 60
    ramp_time: int = 0
    ioengine: IoEngine = "libaio"
    direct: bool = True
    footprint: str | None = None
    refill_buffers: bool = False
    norandommap: bool = False
    randrepeat: bool = True

    @property
    def expected_seconds(self) -> int:
        return self.runtime + self.ramp_time


class SuiteDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: Annotated[str, Field(pattern=_NAME.pattern)]
    description: str = ""
    defaults: WorkloadOptions = WorkloadOptions()
    workloads: Annotated[list[WorkloadEntry], Field(min_length=1)]


class Suite(BaseModel):
    """A validated suite: its name, resolved workloads and the exact text it came from."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    workloads: tuple[Workload, ...]
    source: str
    source_text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source_text.encode()).hexdigest()

    def with_runtime(self, seconds: int) -> Suite:
        """The same suite with every workload's runtime set (demo, tests, benchmarks)."""
        wl = tuple(w.model_copy(update={"runtime": seconds, "ramp_time": 0}) for w in self.workloads)
        return self.model_copy(update={"workloads": wl})


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "constrained-")) or "[" in part:
            continue  # pydantic's internal validator names
        else:
            out += f".{part}" if out else part
    return out


def _message(err: dict[str, Any]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        return f"{err['input']!r} is not one of {err['ctx']['expected']}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bound = {"greater_than_equal": ">=", "less_than_equal": "<=",
                 "greater_than": ">", "less_than": "<"}[kind]
        limit = next(iter(err["ctx"].values()))
        return f"{err['input']!r} is out of range (must be {bound} {limit})"
    if kind == "value_error":
        return str(err["ctx"]["error"])
    if kind == "string_pattern_mismatch":
        return f"{err['input']!r} is not a valid name (letters, digits, '.', '_', '-'; at most 64)"
    return f"{err['msg'].lower()} (got {err['input']!r})"


def problems_from(exc: ValidationError, prefix: str = "") -> list[Problem]:
    problems = []
    for err in exc.errors():
        where = _loc(err["loc"])
        if prefix:
            where = f"{prefix}.{where}" if where and not where.startswith("[") else prefix + where
        problems.append(Problem(where, _message(dict(err))))
    return problems


def parse_suite(text: str, source: str) -> Suite:
    """Validate suite YAML text; raise :class:`SuiteError` listing every problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise SuiteError(source, [Problem(where, f"not valid YAML: {getattr(e, 'problem', e)}")]) from e
    if not isinstance(data, dict):
        raise SuiteError(source, [Problem("", "a suite must be a mapping with keys suite and workloads")])
    problems: list[Problem] = []
    try:
        doc: SuiteDocument | None = SuiteDocument.model_validate(data)
    except ValidationError as e:
        doc = None
        problems += problems_from(e)
    problems += _cross_checks(data)
    if problems or doc is None:
        raise SuiteError(source, _dedupe(problems))
    workloads = []
    for entry in doc.workloads:
        merged = {**doc.defaults.model_dump(exclude_none=True), **entry.model_dump(exclude_none=True)}
        if merged["rw"] in ("rw", "readwrite", "randrw"):
            merged.setdefault("rwmixread", 50)
        workloads.append(Workload.model_validate(merged))
    return Suite(name=doc.suite, description=doc.description, workloads=tuple(workloads),
                 source=source, source_text=text)


def _dedupe(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def _cross_checks(data: dict[str, Any]) -> list[Problem]:
    """Checks across keys, done on the raw mapping so they run even when a value is invalid."""
    problems: list[Problem] = []
    raw_defaults = data.get("defaults")
    defaults: dict[str, Any] = raw_defaults if isinstance(raw_defaults, dict) else {}
    entries = data.get("workloads")
    if not isinstance(entries, list):
        return problems
    names: set[str] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        where = f"workloads[{i}]"
        name = entry.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append(Problem(f"{where}.name", f"duplicate workload name {name!r}"))
            names.add(name)
        merged = {**defaults, **entry}
        for key in ("rw", "bs"):
            if key not in merged:
                problems.append(Problem(f"{where}.{key}", "required key is missing (here or in defaults)"))
        rw = merged.get("rw")
        if rw in ("read", "write", "randread", "randwrite") and "rwmixread" in merged:
            problems.append(Problem(f"{where}.rwmixread", f"only applies to mixed modes, not rw={rw}"))
    return problems


def load_suite(path: str | Path) -> Suite:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SuiteError(str(p), [Problem("", f"cannot read: {e.strerror or e}")]) from e
    return parse_suite(text, str(p))
