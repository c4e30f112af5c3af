"""The suite schema: what to run, independent of where and when.

A suite is YAML (the language is documented in docs/suites.md)::

    suite: enterprise-synthetic
    devices: 1                       # DUTs a submission names (a device group when > 1)
    op_modes: [stock, "hp:20"]       # overprovisioning modes, the outermost dimension
    cell_limit: 1000                 # refuse suites that expand past this many steps
    defaults: {ioengine: libaio, direct: true, runtime: 60s}
    phases:
      purge: true                    # purge (secure erase / discard) before each precondition
      precondition: {numjobs: 16, iodepth: 16, round: 60s, max_rounds: 360}
    retry: {max_attempts: 2, when: [lost, timeout], repurge: false}   # for steps that fail by no fault of theirs
    profiles:
      - name: 8k-7030
        rw: randrw
        bs: 8k
        rwmixread: 70
        ladder: {numjobs: [2, 4, 8, 16], iodepth: [2, 4, 8, 16]}   # thread x queue-depth ladder
      - name: pattern
        rw: randrw
        sweep: {rwmixread: [100, 0], bs: [4k, 64k]}                 # cartesian product

:func:`load_suite` validates the whole file and raises :class:`SuiteError` with every
problem at once, each named by key path (``profiles[1].sweep.bs[2]``).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from labcontract import limits
from labcontract.apps import APP_KINDS, ExternalParams, PgbenchParams, SysbenchParams
from labcontract.appsuite import (
    MIN_FS_BYTES,
    count_app_steps,
    ladder,
    override_app_problems,
    validate_document,
    with_app_overrides,
)
from labcontract.errors import Problem, SuiteError
from labcontract.fioextra import (
    CHECKS,
    EXTENDED,
    FIO_KIND_VERSION,
    FIO_RATE_PAIR_VERSION,
    MAX_RATE_IOPS,
    bssplit_max,
    check_rate_iops,
    cross_problems,
    needed_fio_version,
)
from labcontract.rounds import DEFAULT_WIPC_LIMIT_S, WIPC_PASSES, matches, tracked_problems
from labcontract.suitebase import Retry, check_op_modes, problems_from
from labcontract.suitebounds import load_yaml, raw_cell_count
from labcontract.units import format_size, parse_duration, parse_size

RwMode = Literal["read", "write", "randread", "randwrite", "rw", "readwrite", "randrw"]
# windowsaio: Windows' engine; an agent runs the engine its platform has for the one declared (docs/windows.md)
IoEngine = Literal["libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio", "windowsaio"]
MIXED = ("rw", "readwrite", "randrw")
PURE = ("read", "write", "randread", "randwrite")
DEFAULT_CELL_LIMIT = 1000
BUILTIN_DIR = Path(__file__).resolve().parent / "suites"

# Bounds on everything a suite (and so a start message) may carry: checked before any work is done.
MAX_SUITE_BYTES = 256 * 1024          # suite text, checked before YAML parsing
MAX_YAML_DEPTH = 16                   # nesting of mappings / sequences in a suite
MAX_REPEAT = limits.MAX_REPEAT        # runs of one cell a suite (or --repeat) may ask for
RepeatOrder = Literal["interleaved", "back_to_back"]
MAX_CELLS = 10_000                    # hard ceiling of measured cells (and of cell_limit itself)
MAX_RUN_STEPS = 100_000               # a run's steps over its whole life, each round phase at its max_rounds
MIN_BS, MAX_BS = 512, 64 << 20        # block size: 512 B .. 64 MiB, a multiple of 512
MAX_RUNTIME_S = 7 * 86400             # a runtime (or precondition round) of at most 7 days
MAX_RAMP_S = 86400                    # a ramp time of at most 1 day
MAX_FOOTPRINT_BYTES = 1 << 50         # an absolute footprint of at most 1 PiB (and the DUT's size, at submit)
MAX_IODEPTH, MAX_NUMJOBS = 65536, 4096
MAX_LOAD_POINTS = 20                  # points of a latency-vs-load curve (load_curve), besides its maximum
MAX_INFLIGHT_BYTES = 16 << 30         # numjobs x iodepth x bs: the I/O buffers fio allocates per device
MIN_FOOTPRINT_PCT = 0.01

_FOOTPRINT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*\Z")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# a resolved workload's name (a cell name: profile, dims and OP mode joined by '.'; '%' from a footprint sweep)
WORKLOAD_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.%-]{0,199}$"
# a resolved footprint: a percentage (at most 9 decimals) or a whole number of bytes, nothing else
_WORKLOAD_FOOTPRINT = re.compile(r"^(?:(\d{1,3}(?:\.\d{1,9})?)%|(\d{1,16}))\Z")   # \Z: no final newline


def _size(v: object) -> int:
    n = parse_size(v)
    if n < MIN_BS:
        raise ValueError(f"block size {v!r} is below {MIN_BS} bytes")
    if n > MAX_BS:
        raise ValueError(f"block size {v!r} is over the ceiling of {format_size(MAX_BS)}")
    if n % 512:
        raise ValueError(f"block size {v!r} is not a multiple of 512 bytes")
    return n


def _footprint(v: object) -> str:
    """``"20%"`` of the device, or an absolute size (normalised to bytes)."""
    if isinstance(v, str) and (m := _FOOTPRINT.match(v)):
        pct = float(m.group(1))
        if not 0 < pct <= 100:
            raise ValueError(f"footprint {v!r} must be above 0% and at most 100%")
        if pct < MIN_FOOTPRINT_PCT:
            raise ValueError(f"footprint {v!r} is below {MIN_FOOTPRINT_PCT:g}%")
        return f"{round(pct, 4):g}%"
    n = parse_size(v)
    if n <= 0:
        raise ValueError("footprint must be above zero")
    if n > MAX_FOOTPRINT_BYTES:
        raise ValueError(f"footprint {v!r} is over the ceiling of {format_size(MAX_FOOTPRINT_BYTES)}")
    return str(n)


def check_footprint(v: str) -> str:
    """A resolved footprint as a start message carries it: ``N%`` (0 < N <= 100) or a byte count."""
    m = _WORKLOAD_FOOTPRINT.match(v) if isinstance(v, str) else None
    if m is None:
        raise ValueError(f"footprint {repr(v)[:80]} is neither a percentage (N%) nor a whole number of bytes")
    if m.group(1) is not None:
        if not 0 < float(m.group(1)) <= 100:
            raise ValueError(f"footprint {v!r} must be above 0% and at most 100%")
    elif not 0 < int(m.group(2)) <= MAX_FOOTPRINT_BYTES:
        raise ValueError(f"footprint {v!r} must be above zero and at most {format_size(MAX_FOOTPRINT_BYTES)}")
    return v


BlockSize = Annotated[int, BeforeValidator(_size)]
Seconds = Annotated[int, BeforeValidator(parse_duration)]
Footprint = Annotated[str, BeforeValidator(_footprint)]
Percent = Annotated[int, Field(ge=0, le=100)]
Runtime = Annotated[Seconds, Field(ge=1, le=MAX_RUNTIME_S)]
RampTime = Annotated[Seconds, Field(ge=0, le=MAX_RAMP_S)]
IoDepth = Annotated[int, Field(ge=1, le=MAX_IODEPTH)]
NumJobs = Annotated[int, Field(ge=1, le=MAX_NUMJOBS)]
# the extended fio options (labcontract.fioextra): each checked to its canonical fio spelling
# (the lengths: each check's own input bound, so that the schema of what crosses the wire says it too)
BsSplit = Annotated[str, BeforeValidator(CHECKS["bssplit"]), Field(max_length=2048)]
RandomDistribution = Annotated[str, BeforeValidator(CHECKS["random_distribution"]), Field(max_length=32)]
Rate = Annotated[str, BeforeValidator(CHECKS["rate"]), Field(max_length=32)]
Offset = Annotated[str, BeforeValidator(CHECKS["offset"]), Field(max_length=32)]
CpuList = Annotated[str, BeforeValidator(CHECKS["cpus_allowed"]), Field(max_length=512)]
VerifyMethod = Annotated[str, BeforeValidator(CHECKS["verify"]), Field(max_length=16)]
VerifyPattern = Annotated[str, BeforeValidator(CHECKS["verify_pattern"]), Field(max_length=66)]
# a number (reads and writes alike), or READ,WRITE: a string, kept apart from the number so that a workload that
# sets one rate serialises as before (an agent's fio kind 2 reads it; a pair needs 3: fioextra.needed_fio_version)
# (checked once, before the type: one reason for a bad value, not one per branch of the union; true is refused)
RateIops = Annotated[Annotated[int, Field(ge=1, le=MAX_RATE_IOPS)] | Annotated[str, Field(max_length=24)],
                     BeforeValidator(check_rate_iops)]


class ExtendedOptions(BaseModel):
    """fio options beyond the basic workload (issue 28; docs/suites.md "More fio options"): unset unless a suite
    sets them, and then only sent to an agent whose fio kind knows them (labcontract.fioextra)."""

    bssplit: BsSplit | None = None
    random_distribution: RandomDistribution | None = None
    rate_iops: RateIops | None = None
    rate: Rate | None = None
    buffer_compress_percentage: Percent | None = None
    dedupe_percentage: Percent | None = None
    offset: Offset | None = None
    offset_increment: Offset | None = None
    cpus_allowed: CpuList | None = None
    hipri: bool | None = None
    fixedbufs: bool | None = None
    verify: VerifyMethod | None = None
    verify_pattern: VerifyPattern | None = None


class WorkloadOptions(ExtendedOptions):
    """fio options a suite may set; every one optional so ``defaults`` can hold any of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rw: RwMode | None = None
    bs: BlockSize | None = None
    rwmixread: Percent | None = None
    percentage_random: Percent | None = None
    iodepth: IoDepth | None = None
    numjobs: NumJobs | None = None
    runtime: Runtime | None = None
    ramp_time: RampTime | None = None
    ioengine: IoEngine | None = None
    direct: bool | None = None
    footprint: Footprint | None = None
    time_based: bool | None = None
    refill_buffers: bool | None = None
    norandommap: bool | None = None
    randrepeat: bool | None = None


SWEEPABLE = tuple(WorkloadOptions.model_fields)


LoadPct = Annotated[int, Field(strict=True, ge=1, le=99)]


class ProfileEntry(WorkloadOptions):
    name: Annotated[str, Field(pattern=_NAME.pattern)]
    sweep: dict[str, list[Any]] = {}
    ladder: dict[Literal["numjobs", "iodepth"], list[Any]] = {}
    precondition: bool = True
    # a latency-vs-load curve (docs/suites.md): after the cell's own measurement (its maximum), the cell again
    # rate-limited to each of these percentages of the IOPS it reached
    load_curve: Annotated[list[LoadPct], Field(max_length=MAX_LOAD_POINTS)] = []

    @field_validator("load_curve")
    @classmethod
    def _load_curve(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("a percentage is listed twice")
        return sorted(v)


class Workload(ExtendedOptions):
    """A fully resolved workload: defaults applied, every option set.

    This is what travels in a start message and reaches a job file, so it is as strict as the suite
    schema: typed values (strict: no coercion from strings), each within the suite's bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=WORKLOAD_NAME)]
    rw: RwMode
    bs: Annotated[int, Field(ge=MIN_BS, le=MAX_BS, multiple_of=512)]
    rwmixread: Percent | None = None
    percentage_random: Percent | None = None
    iodepth: Annotated[int, Field(ge=1, le=MAX_IODEPTH)] = 1
    numjobs: Annotated[int, Field(ge=1, le=MAX_NUMJOBS)] = 1
    runtime: Annotated[int, Field(ge=1, le=MAX_RUNTIME_S)] = 60
    ramp_time: Annotated[int, Field(ge=0, le=MAX_RAMP_S)] = 0
    ioengine: IoEngine = "libaio"
    direct: bool = True
    # the footprint's own check first (its reason is the news), then the bound every wire string has
    footprint: Annotated[str, BeforeValidator(check_footprint), Field(max_length=64)] | None = None
    time_based: bool = True
    refill_buffers: bool = False
    norandommap: bool = False
    randrepeat: bool = True

    @model_validator(mode="after")
    def _inflight(self) -> Workload:
        """Each bound alone still allows 4096 jobs x 65536 deep x 64 MiB: fio would take the host's memory."""
        bs = self.largest_bs
        inflight = self.numjobs * self.iodepth * bs
        if inflight > MAX_INFLIGHT_BYTES:
            raise ValueError(f"numjobs x iodepth x bs = {self.numjobs} x {self.iodepth} x {format_size(bs)} "
                             f"= {format_size(inflight)} of I/O buffers per device, over the ceiling of "
                             f"{format_size(MAX_INFLIGHT_BYTES)}")
        why = cross_problems(self.__dict__)
        if why:
            raise ValueError("; ".join(why))
        return self

    @model_serializer(mode="wrap")
    def _without_unset_extended(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An extended option that is unset is left out: a workload that sets none serialises as before, so an
        agent that does not know them still reads it (labcontract.fioextra)."""
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if not (k in EXTENDED and v is None)}

    @property
    def largest_bs(self) -> int:
        """The largest block size the job issues (its bssplit's, when larger than bs)."""
        return max(self.bs, bssplit_max(self.bssplit)) if self.bssplit else self.bs

    @property
    def expected_seconds(self) -> int:
        return self.runtime + self.ramp_time

    @property
    def identity(self) -> tuple[object, ...]:
        """What makes two workloads "the same workload" for preconditioning (not T/Q, not time)."""
        return (self.rw, self.bs, self.rwmixread, self.percentage_random, self.footprint, self.bssplit,
                self.random_distribution, self.offset, self.offset_increment, self.buffer_compress_percentage,
                self.dedupe_percentage)


class Precondition(BaseModel):
    """Rounds of the measured workload at heavy load until SNIA PTS steady state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    numjobs: NumJobs = 16
    iodepth: IoDepth = 16
    round: Runtime = 60
    max_rounds: Annotated[int, Field(ge=1, le=100_000)] = 360
    window: Annotated[int, Field(ge=2, le=100)] = 5
    max_range_pct: Annotated[float, Field(gt=0, le=100)] = 20.0
    max_excursion_pct: Annotated[float, Field(gt=0, le=100)] = 10.0
    track: Literal["iops", "lat_mean"] = "iops"


class Rounds(BaseModel):
    """``phases.rounds``: rounds of the whole matrix until the tracked cell is steady (SNIA PTS-E;
    :mod:`labcontract.rounds`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # the tracked cell: its swept values (and profile, when the suite has several), e.g. {rwmixread: 0, bs: 4k}
    cell: Annotated[dict[str, Any], Field(min_length=1, max_length=8)]
    track: Literal["iops", "lat_mean", "bw"] = "iops"
    max_rounds: Annotated[int, Field(ge=1, le=1000)] = 25
    window: Annotated[int, Field(ge=2, le=100)] = 5
    max_range_pct: Annotated[float, Field(gt=0, le=100)] = 20.0
    max_excursion_pct: Annotated[float, Field(gt=0, le=100)] = 10.0
    # workload-independent preconditioning before round 1: the device (its footprint) written twice over in
    # 128 KiB sequential writes, each pass at most wipc_limit long
    wipc: bool = True
    wipc_limit: Runtime = DEFAULT_WIPC_LIMIT_S


class Phases(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    purge: bool = False
    precondition: Precondition | None = None
    rounds: Rounds | None = None   # SNIA PTS-E's form: rounds of the whole matrix (labcontract.rounds)
    provision: bool = False        # purge / OP mode through Ansible (playbooks/dut_state.yml); DUT facts
                                   # before and after (playbooks/facts.yml); needs a controller --inventory


NetTool = Literal["fio", "iscsi", "block"]
PathMode = Literal["single", "multi"]
NET_MTUS = (1500, 9000)


class Network(BaseModel):
    """A multi-host network test (methodology section 6): a target, its initiators, the paths between them.

    ``mtu`` and ``multipath`` are dimensions: every profile runs at each MTU, over the first path alone
    (``single``) and over all of them (``multi``). ``target`` and ``initiators`` may be left to the
    submission (``labctl submit --host TARGET --initiator HOST``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: Annotated[str, Field(pattern=_NAME.pattern)] | None = None
    initiators: tuple[Annotated[str, Field(pattern=_NAME.pattern)], ...] = ()
    paths: Annotated[tuple[Annotated[str, Field(pattern=_NAME.pattern)], ...], Field(min_length=1, max_length=8)]
    mtu: Annotated[tuple[Literal[1500, 9000], ...], Field(min_length=1)] = (1500,)
    multipath: Annotated[tuple[PathMode, ...], Field(min_length=1)] = ("multi",)
    tool: NetTool = "fio"          # fio: nbd engine, any workload; iscsi: iscsi-perf, reads only;
                                   # block: fio on the kernel's iSCSI LUN (one path) or dm-multipath map, reads only
    iqn: str | None = None         # default: the one target the portals announce (SendTargets)
    lun: Annotated[int, Field(ge=0, le=16383)] = 1
    nbd_port: Annotated[int, Field(ge=1, le=65535)] = 10809
    iscsi_port: Annotated[int, Field(ge=1, le=65535)] = 3260

    @field_validator("paths", "mtu", "multipath", "initiators")
    @classmethod
    def _unique(cls, v: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(set(v)) != len(v):
            raise ValueError("a value is listed twice")
        return v

    def paths_for(self, mode: str) -> tuple[str, ...]:
        return self.paths[:1] if mode == "single" else self.paths


class SuiteDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: Annotated[str, Field(pattern=_NAME.pattern)]
    kind: Literal["fio"] = "fio"     # sysbench / pgbench / external: labcontract.appsuite
    description: Annotated[str, Field(max_length=4096)] = ""
    devices: Annotated[int, Field(ge=1, le=256)] | Literal["any"] = 1
    op_modes: Annotated[list[str], Field(min_length=1, max_length=91)] = ["stock"]
    cell_limit: Annotated[int, Field(ge=1, le=MAX_CELLS)] = DEFAULT_CELL_LIMIT
    defaults: WorkloadOptions = WorkloadOptions()
    phases: Phases = Phases()
    retry: Retry = Retry()
    network: Network | None = None
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT)] = 1      # runs of every measured cell (docs/statistics.md)
    repeat_order: RepeatOrder = "interleaved"
    profiles: Annotated[list[ProfileEntry], Field(min_length=1, max_length=MAX_CELLS)]

    @field_validator("op_modes")
    @classmethod
    def _op_modes(cls, v: list[str]) -> list[str]:
        return check_op_modes(v)


class Cell(BaseModel):
    """One measured point: a profile with its swept values fixed, in one OP mode."""

    model_config = ConfigDict(frozen=True)

    profile: str
    op_mode: str
    dims: dict[str, Any]          # the swept values that make this cell (empty for a plain profile)
    workload: Workload
    precondition: bool
    load_curve: tuple[int, ...] = ()   # percentages of the cell's maximum measured after it (a load curve)


class Suite(BaseModel):
    """A validated suite: the resolved cells and the exact text it came from."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    devices: int | None           # DUTs a submission must name; None: any number (at least one)
    op_modes: tuple[str, ...]
    cell_limit: int
    phases: Phases
    cells: tuple[Cell, ...]
    retry: Retry = Retry()
    network: Network | None = None
    source: str
    source_text: str
    kind: Literal["fio", "sysbench", "pgbench", "external"] = "fio"
    # an application suite's workload (labcontract.appsuite); its cells are () and its steps come from here
    app: SysbenchParams | PgbenchParams | ExternalParams | None = None
    repeat: int = 1                      # each measured cell runs this many times (planner: repeat_order)
    repeat_order: RepeatOrder = "interleaved"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source_text.encode()).hexdigest()

    @property
    def workloads(self) -> tuple[Workload, ...]:
        return tuple(c.workload for c in self.cells)


def op_footprint(op_mode: str, footprint: str | None) -> tuple[str | None, str]:
    """Footprint of a workload under an OP mode, and a note saying how the mode was applied.

    ``hp:P`` until real overprovisioning exists: the usable capacity is (100-P)% of the
    device, so percentage footprints shrink by that factor and a whole-device run becomes
    (100-P)%.
    """
    if op_mode == "stock":
        return footprint, ""
    usable = 100 - int(op_mode.split(":")[1])
    note = f"{op_mode} emulated by a footprint limit ({usable}% of capacity usable); no device OP applied"
    if footprint is None:
        return f"{usable}%", note
    if footprint.endswith("%"):
        return f"{round(float(footprint[:-1]) * usable / 100, 6):g}%", note
    return footprint, note + "; absolute footprint kept"


def cell_name(profile: str, dims: dict[str, Any], op_mode: str, n_op_modes: int) -> str:
    abbr = {"numjobs": "t", "iodepth": "q", "rwmixread": "r", "percentage_random": "rand", "bs": "", "rw": "",
            "runtime": "s", "mtu": "mtu", "paths": ""}
    parts = [profile]
    for k, v in dims.items():
        # a value's ':' '/' ',' (zipf:1.2, a bssplit, a CPU list) become '-': a cell name is a job section's name
        value = format_size(v) if k == "bs" else re.sub(r"[^a-z0-9_.%-]", "-", str(v).lower())
        parts.append(f"{abbr.get(k, k + '-')}{value}")
    name = ".".join(parts)
    return f"{op_mode.replace(':', '')}.{name}" if n_op_modes > 1 else name


def _dedupe(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def _dimension_values(where: str, key: str, values: list[Any]) -> tuple[list[Any], list[Problem]]:
    """Validate each value of a swept option as that option."""
    if key not in SWEEPABLE:
        return [], [Problem(f"{where}.{key}", f"cannot sweep {key!r} (sweepable: {', '.join(SWEEPABLE)})")]
    if not values:
        return [], [Problem(f"{where}.{key}", "a sweep needs at least one value")]
    out, problems = [], []
    for j, v in enumerate(values):
        if v is None:      # every option is optional in WorkloadOptions: a swept null would pass as "unset"
            problems.append(Problem(f"{where}.{key}[{j}]", "a swept value may not be empty (null)"))
            continue
        try:
            out.append(getattr(WorkloadOptions.model_validate({key: v}), key))
        except ValidationError as e:
            problems += [Problem(f"{where}.{key}[{j}]", p.message) for p in problems_from(e)]
    if len(set(map(str, out))) != len(out):
        problems.append(Problem(f"{where}.{key}", "a value is listed twice"))
    return out, problems


def _expand(doc: SuiteDocument, *, combine: bool = True) -> tuple[list[Cell], list[Problem]]:
    """The suite's cells and the problems of its dimensions; with ``combine`` False (too many cells),
    only each swept value is validated and no cell is made."""
    problems: list[Problem] = []
    cells: list[Cell] = []
    defaults = doc.defaults.model_dump(exclude_none=True)
    names: set[str] = set()
    net = doc.network
    outer: list[dict[str, Any]] = [{}] if net is None else [
        {"mtu": m, "paths": mode} for m in net.mtu for mode in net.multipath]
    for op_mode, net_dims, (i, prof) in itertools.product(doc.op_modes, outer, enumerate(doc.profiles)):
        where = f"profiles[{i}]"
        fixed = {**defaults, **prof.model_dump(exclude_none=True,
                                               exclude={"name", "sweep", "ladder", "precondition",
                                                        "load_curve"})}
        dims: dict[str, list[Any]] = {}
        for section, mapping in (("sweep", prof.sweep), ("ladder", prof.ladder)):
            for key, values in mapping.items():
                if key in dims:
                    problems.append(Problem(f"{where}.{section}.{key}", "swept twice (in sweep and ladder)"))
                    continue
                if key in prof.model_fields_set:
                    problems.append(Problem(f"{where}.{section}.{key}", "also set as a fixed option of "
                                                                         "the profile"))
                vals, probs = _dimension_values(f"{where}.{section}", key, list(values))
                problems += probs
                dims[key] = vals
        if not combine or any(not v for v in dims.values()):
            continue
        for combo in itertools.product(*dims.values()):
            point = {**net_dims, **dict(zip(dims, combo, strict=True))}
            merged = {**fixed, **dict(zip(dims, combo, strict=True))}
            for key in ("rw", "bs"):
                if key not in merged:
                    problems.append(Problem(f"{where}.{key}", "required key is missing (here, in a sweep "
                                                              "or in defaults)"))
            if "rw" not in merged or "bs" not in merged:
                break
            rw = merged["rw"]
            if rw in PURE and merged.get("rwmixread") is not None:
                problems.append(Problem(f"{where}.rwmixread", f"contradicts rw={rw} (only mixed modes "
                                                               f"{'/'.join(MIXED)} take a read share)"))
                break
            if rw in MIXED:
                merged.setdefault("rwmixread", 50)
            if net is not None and net.tool == "iscsi" and not _iscsi_readable(merged):
                problems.append(Problem(f"{where}.rw", "network.tool iscsi (iscsi-perf) only reads, sequentially "
                                                       "or at random: rw read or randread (or randrw with "
                                                       "rwmixread 100 and percentage_random 0 or 100)"))
                break
            if net is not None and net.tool == "block" and merged.get("rw") not in ("read", "randread"):
                problems.append(Problem(f"{where}.rw", "network.tool block reads the target's LUN through the "
                                                       "initiator's kernel (it does not own it): rw read or randread"))
                break
            if prof.load_curve and (limited := [k for k in ("rate", "rate_iops") if merged.get(k) is not None]):
                problems.append(Problem(f"{where}.load_curve", f"the curve sets each point's rate itself: "
                                                               f"{' and '.join(limited)} may not be set too"))
                break
            if net is not None and prof.load_curve:
                problems.append(Problem(f"{where}.load_curve", "not available in a network suite (its initiators "
                                                               "run their own fio jobs)"))
                break
            if net is not None and (extra := [k for k in EXTENDED if merged.get(k) is not None]):
                problems.append(Problem(f"{where}.{extra[0]}", f"{', '.join(extra)}: not available in a network "
                                                               "suite (its initiators run their own fio jobs)"))
                break
            fp, _note = op_footprint(op_mode, merged.get("footprint"))
            merged["footprint"] = fp
            name = cell_name(prof.name, point, op_mode, len(doc.op_modes))
            if name in names:
                problems.append(Problem(f"{where}.name", f"duplicate profile name {prof.name!r}"))
                break
            names.add(name)
            try:
                workload = Workload.model_validate({**merged, "name": name})
            except ValidationError as e:
                problems += problems_from(e, where)
                break
            cells.append(Cell(profile=prof.name, op_mode=op_mode, dims=point, workload=workload,
                              precondition=prof.precondition and doc.phases.precondition is not None,
                              load_curve=tuple(prof.load_curve)))
    return cells, problems


def _rounds_problems(doc: SuiteDocument, cells: Sequence[Cell], *, combine: bool) -> list[Problem]:
    """What ``phases.rounds`` may not be combined with, and whether its ``cell`` names exactly one cell."""
    rounds = doc.phases.rounds
    assert rounds is not None
    where = "phases.rounds"
    problems = []
    for what, bad in (("phases.precondition (the rounds are the preconditioning)", doc.phases.precondition),
                      ("repeat (the steady-state window's rounds are each cell's repeats)", doc.repeat > 1),
                      ("a network suite", doc.network),
                      ("load_curve (a round measures each cell at its maximum)",
                       any(p.load_curve for p in doc.profiles)),
                      ("retry.repurge (a purge between two rounds would put the device back to FOB in the middle of "
                       "its steady-state rounds: a failed cell is retried as it is)", doc.retry.repurge)):
        if bad:
            problems.append(Problem(where, f"not available with {what}"))
    normalised: dict[str, Any] = {}
    for key, value in rounds.cell.items():
        if key == "profile":
            normalised[key] = value
            continue
        vals, probs = _dimension_values(f"{where}.cell", key, [value])
        problems += [Problem(p.location.replace(f".{key}[0]", f".{key}"), p.message) for p in probs]
        if vals:
            normalised[key] = vals[0]
    if combine and len(normalised) == len(rounds.cell):
        problems += [Problem(f"{where}.cell", why) for why in tracked_problems(
            [(c.op_mode, c.profile, c.dims) for c in cells], normalised, doc.op_modes)]
    return problems


def tracked_cell(suite: Suite, op_mode: str) -> Cell:
    """The cell ``phases.rounds.cell`` names in ``op_mode`` (exactly one: checked when the suite parsed)."""
    rounds = suite.phases.rounds
    assert rounds is not None
    normalised = {k: v if k == "profile" else _dimension_values("", k, [v])[0][0] for k, v in rounds.cell.items()}
    return next(c for c in suite.cells if c.op_mode == op_mode and matches(c.profile, c.dims, normalised))


def _iscsi_readable(merged: dict[str, Any]) -> bool:
    rw = merged.get("rw")
    if rw in ("read", "randread"):
        return True
    return rw == "randrw" and merged.get("rwmixread") == 100 and merged.get("percentage_random") in (None, 0, 100)


def _network_problems(data: dict[str, Any]) -> list[Problem]:
    """What a network suite may not combine (its steps measure paths, not a local DUT); judged on the raw
    mapping so that it is reported together with any other problem of the file."""
    net = data.get("network")
    if not isinstance(net, dict):
        return []
    problems = []
    if data.get("op_modes", ["stock"]) != ["stock"]:
        problems.append(Problem("op_modes", "a network suite runs in stock mode only (OP modes are a DUT's "
                                            "property; provision the target's backing store instead)"))
    raw_phases = data.get("phases")
    phases: dict[str, Any] = raw_phases if isinstance(raw_phases, dict) else {}
    for key in ("purge", "precondition", "provision"):
        if phases.get(key):
            problems.append(Problem(f"phases.{key}", "not available in a network suite (the initiators do not own "
                                                     "the target's devices)"))
    raw_inis = net.get("initiators")
    inis: list[Any] = raw_inis if isinstance(raw_inis, list) else []
    if net.get("target") is not None and net.get("target") in inis:
        problems.append(Problem("network.initiators", f"{net['target']} is also the target"))
    return problems


def _cross_checks(data: dict[str, Any]) -> list[Problem]:
    """Checks on the raw mapping that still run when a value elsewhere is invalid."""
    problems: list[Problem] = []
    raw_defaults = data.get("defaults")
    defaults: dict[str, Any] = raw_defaults if isinstance(raw_defaults, dict) else {}
    entries = data.get("profiles")
    if not isinstance(entries, list):
        return problems
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        merged = {**defaults, **entry}
        swept = {**(entry.get("sweep") or {}), **(entry.get("ladder") or {})} if isinstance(
            entry.get("sweep") or {}, dict) and isinstance(entry.get("ladder") or {}, dict) else {}
        for key in ("rw", "bs"):
            if key not in merged and key not in swept:
                problems.append(Problem(f"profiles[{i}].{key}", "required key is missing (here, in a sweep or "
                                                               "in defaults)"))
        rw = merged.get("rw")
        if rw in PURE and "rwmixread" in merged:
            problems.append(Problem(f"profiles[{i}].rwmixread", f"contradicts rw={rw} (only mixed modes "
                                                                f"{'/'.join(MIXED)} take a read share)"))
    return problems


def starts_precondition_group(cells: Sequence[Cell], i: int) -> bool:
    """Whether cell ``i`` is preceded by a precondition: the first of a run of consecutive cells that
    are the same workload (profile, rw, bs, read share, random share, footprint) in one OP mode."""
    c = cells[i]
    if not c.precondition:
        return False
    if i == 0:
        return True
    prev = cells[i - 1]
    return (prev.op_mode, prev.profile, prev.workload.identity) != (c.op_mode, c.profile, c.workload.identity)


def count_steps(cells: list[Cell], phases: Phases, network: Network | None = None, repeat: int = 1) -> int:
    """Planned steps, as the planner makes them: measured cells (each ``repeat`` times); per precondition group
    a precondition (and a purge); a purge per OP mode without preconditioning when the suite purges. A network
    cell is one step per host (the target and each initiator; one initiator when the submission names them)."""
    if network is not None:
        return len(cells) * repeat * (1 + max(len(network.initiators), 1))
    groups = sum(starts_precondition_group(cells, i) for i in range(len(cells)))
    purges = groups if phases.purge else 0
    if phases.purge:
        purges += sum(1 for mode in dict.fromkeys(c.op_mode for c in cells)
                      if not any(c.precondition for c in cells if c.op_mode == mode))
    if phases.provision:
        # the host's provisioning, facts before and after; the purges become dut_state steps, and each
        # OP mode starts with one
        purges += 3 + (0 if phases.purge else len(dict.fromkeys(c.op_mode for c in cells)))
    points = sum(len(c.load_curve) for c in cells)      # a load curve's points follow its cell's measurement
    if phases.rounds is not None and phases.rounds.wipc:   # round 1 is planned; the next rounds follow it
        purges += WIPC_PASSES * len(dict.fromkeys(c.op_mode for c in cells))
    return (len(cells) + points) * repeat + groups + purges


def most_steps(cells: list[Cell], phases: Phases, network: Network | None = None, repeat: int = 1) -> int:
    """The steps a run of these cells may come to over its life: :func:`count_steps` (round 1 of each phase
    is planned) and every further round up to ``max_rounds``: a precondition group's rounds, and with
    ``phases.rounds`` every measured cell once a round."""
    steps = count_steps(cells, phases, network, repeat)
    if phases.precondition is not None:
        groups = sum(starts_precondition_group(cells, i) for i in range(len(cells)))
        steps += groups * (phases.precondition.max_rounds - 1)
    if phases.rounds is not None:
        steps += len(cells) * (phases.rounds.max_rounds - 1)
    return steps


def _load(text: object, source: str) -> dict[str, Any]:
    """The suite's raw mapping: text size-bounded before parsing, YAML without aliases or deep nesting."""
    if not isinstance(text, str):
        raise SuiteError(source, [Problem("", f"a suite is text, not {type(text).__name__}")])
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_SUITE_BYTES:
        raise SuiteError(source, [Problem("", f"the suite text is {size} bytes, over the limit of "
                                              f"{MAX_SUITE_BYTES} bytes")])
    try:
        data = load_yaml(text, MAX_YAML_DEPTH)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise SuiteError(source, [Problem(where, f"not valid YAML: {getattr(e, 'problem', e)}")]) from e
    except (ValueError, OverflowError, RecursionError) as e:
        raise SuiteError(source, [Problem("", f"not a valid suite value: {str(e)[:200]}")]) from e
    if not isinstance(data, dict):
        raise SuiteError(source, [Problem("", "a suite must be a mapping with keys suite and profiles")])
    return data


def _cell_bound(data: dict[str, Any], doc: SuiteDocument | None) -> Problem | None:
    """Cells counted from the dimension sizes, before expansion, against the cell limit and MAX_CELLS."""
    n = raw_cell_count(data)
    if n <= MAX_CELLS:
        return None     # at most MAX_CELLS to expand: cheap; the step count is judged against cell_limit after
    return Problem("cell_limit", f"the suite's dimensions make {n} measured cells (op_modes x network x each "
                                 f"profile's sweep and ladder sizes), over the ceiling of {MAX_CELLS}"
                                 + (f" and the limit of {doc.cell_limit}" if doc is not None else ""))


def parse_suite(text: str, source: str) -> Suite:
    """Validate suite YAML text; raise :class:`SuiteError` listing every problem."""
    data = _load(text, source)
    problems: list[Problem] = []
    kind = data.get("kind", "fio")
    if isinstance(kind, str) and kind in APP_KINDS:
        return _parse_app_suite(data, text, source)
    if kind != "fio":
        problems.append(Problem("kind", f"{kind!r} is not a suite kind (fio, {', '.join(APP_KINDS)})"))
        data = {k: v for k, v in data.items() if k != "kind"}
    try:
        doc: SuiteDocument | None = SuiteDocument.model_validate(data)
        kept = list(range(len(data.get("profiles") or [])))
    except ValidationError as e:
        problems += problems_from(e)
        doc, kept = _valid_part(data, e)
    problems += _cross_checks(data) + _network_problems(data)
    too_many = _cell_bound(data, doc)
    if too_many is not None:
        problems.append(too_many)
    if doc is None:
        raise SuiteError(source, _dedupe(problems))
    cells, expand_problems = _expand(doc, combine=too_many is None)
    problems += [p for p in map(lambda p: _renumber(p, kept), expand_problems) if p not in problems]
    if doc.phases.rounds is not None:
        problems += _rounds_problems(doc, cells, combine=too_many is None)
    steps = count_steps(cells, doc.phases, doc.network, doc.repeat)
    if too_many is None and steps > doc.cell_limit:
        runs = f" x repeat {doc.repeat}" if doc.repeat > 1 else ""
        problems.append(Problem("cell_limit", f"the suite expands to {steps} steps ({len(cells)} measured "
                                              f"cells{runs}), over the limit of {doc.cell_limit}"))
    elif too_many is None and (most := most_steps(cells, doc.phases, doc.network, doc.repeat)) > MAX_RUN_STEPS:
        key = "phases.rounds.max_rounds" if doc.phases.rounds is not None else "phases.precondition.max_rounds"
        problems.append(Problem(key, f"a run of this suite may come to {most} steps over its rounds (every round "
                                     f"up to max_rounds), over the ceiling of {MAX_RUN_STEPS}: lower max_rounds"))
    if problems:
        raise SuiteError(source, _dedupe(problems))
    return Suite(name=doc.suite, description=doc.description,
                 devices=None if doc.devices == "any" else doc.devices, op_modes=tuple(doc.op_modes),
                 cell_limit=doc.cell_limit, phases=doc.phases, cells=tuple(cells), retry=doc.retry,
                 network=doc.network, source=source, source_text=text, repeat=doc.repeat,
                 repeat_order=doc.repeat_order)


def _parse_app_suite(data: dict[str, Any], text: str, source: str) -> Suite:
    doc = validate_document(data, source)
    return Suite(name=doc.suite, description=doc.description, devices=doc.devices, op_modes=tuple(doc.op_modes),
                 cell_limit=doc.cell_limit, phases=Phases(purge=doc.phases.purge, provision=doc.phases.provision),
                 cells=(), retry=doc.retry, source=source, source_text=text, kind=doc.kind, app=doc.params(),
                 repeat=doc.repeat, repeat_order=doc.repeat_order)


def steps_of(suite: Suite) -> int:
    """The steps ``suite`` plans to (any kind): what ``suite validate`` and ``cell_limit`` count."""
    if suite.app is not None:
        return count_app_steps(suite.kind, suite.app, len(suite.op_modes), suite.phases.purge,
                               suite.phases.provision, suite.repeat)
    return count_steps(list(suite.cells), suite.phases, suite.network, suite.repeat)


def mixed(w: Workload) -> bool:
    """A workload that both reads and writes (a mixed mode with a read share other than 0 or 100)."""
    return w.rw in MIXED and w.rwmixread not in (0, 100)


def fio_options_used(suite: Suite) -> list[str]:
    """The suite keys that need a newer fio kind on the agent (labcontract.fioextra): the extended options its
    workloads set, and ``load_curve`` (its points are rate-limited with ``rate_iops``, per direction when mixed)."""
    used = sorted({k for w in suite.workloads for k in EXTENDED if w.__dict__.get(k) is not None})
    return used + (["load_curve"] if any(c.load_curve for c in suite.cells) else [])


def fio_kind_version(suite: Suite) -> int:
    """The least version of the agent's fio kind that runs every step ``suite`` plans or a load curve adds: a curve's
    points set ``rate_iops`` (a mixed workload's per direction, ``R,W``)."""
    need = needed_fio_version(w.__dict__ for w in suite.workloads)
    for c in suite.cells:
        if c.load_curve:
            need = max(need, FIO_RATE_PAIR_VERSION if mixed(c.workload) else FIO_KIND_VERSION)
    return need


def measured_points(suite: Suite) -> int:
    """Measured cells of a storage suite; an application suite's points (ladder x OP modes)."""
    if suite.app is not None:
        return len(ladder(suite.app)) * len(suite.op_modes)
    return len(suite.cells)


def measured_seconds(suite: Suite) -> int:
    """Seconds of measurement (and ramp / warm-up) the suite asks for, without purges, preconditioning or an
    application's prepare."""
    if suite.app is not None:
        warmup = 0 if isinstance(suite.app, ExternalParams) else suite.app.warmup
        return measured_points(suite) * (suite.app.time + warmup) * suite.repeat
    return sum(c.workload.expected_seconds * (1 + len(c.load_curve)) for c in suite.cells) * suite.repeat


def _valid_part(data: dict[str, Any], exc: ValidationError) -> tuple[SuiteDocument | None, list[int]]:
    """The document without its invalid profiles, so that expansion (and the cell limit) can still be
    judged and reported together with the other problems. None when more than profiles is wrong."""
    bad: set[int] = set()
    for err in exc.errors():
        loc = err["loc"]
        if len(loc) >= 2 and loc[0] == "profiles" and isinstance(loc[1], int):
            bad.add(loc[1])
        else:
            return None, []
    profiles = data.get("profiles") or []
    kept = [i for i in range(len(profiles)) if i not in bad]
    try:
        return SuiteDocument.model_validate({**data, "profiles": [profiles[i] for i in kept]}), kept
    except ValidationError:
        return None, []


def _renumber(p: Problem, kept: list[int]) -> Problem:
    """Map ``profiles[k]`` of the reduced document back to the file's index."""
    m = re.match(r"^profiles\[(\d+)\]", p.location)
    if not m or not kept:
        return p
    return Problem(f"profiles[{kept[int(m.group(1))]}]" + p.location[m.end():], p.message)


def builtin_suites() -> dict[str, Path]:
    return {p.stem: p for p in sorted(BUILTIN_DIR.glob("*.yaml"))}


def is_bare_name(ref: str | Path) -> bool:
    """Whether ``ref`` is spelled like a suite *name*: a string with no path separator and no ``.yaml`` /
    ``.yml`` suffix (``demo``, not ``./demo``, ``suites/demo`` or ``demo.yaml``)."""
    return (isinstance(ref, str) and ref not in ("", ".", "..") and "/" not in ref and os.sep not in ref
            and not ref.endswith((".yaml", ".yml")))


def load_suite(ref: str | Path) -> Suite:
    """A suite file, or the name of a built-in suite (``labctl suite list``).

    A bare name (:func:`is_bare_name`) that a built-in suite carries is that built-in suite, whatever the
    current directory holds: a folder or file called ``demo`` next to the user must not turn ``labctl demo``
    into "cannot read: Is a directory". A file of such a name is reached as a path (``./demo``). A bare name
    that is not built in is read as a file when one exists; anything else is a path.
    """
    p = Path(ref)
    if is_bare_name(ref):
        known = builtin_suites()
        if ref in known:
            p = known[str(ref)]
        elif not p.exists():
            raise SuiteError(str(ref), [Problem("", f"no such file, and no built-in suite {ref!r} "
                                                    f"(built-in: {', '.join(known)})")])
    source = str(ref) if p == Path(ref) else str(p)      # as the user wrote it: ./demo, not demo
    if p.is_dir():
        raise SuiteError(source, [Problem("", "is a directory, not a suite file")])
    try:
        text = p.read_text()
    except OSError as e:
        raise SuiteError(source, [Problem("", f"cannot read: {e.strerror or e}")]) from e
    return parse_suite(text, str(p))


def with_overrides(suite: Suite, *, runtime: int | None = None, scale: float | None = None,
                   repeat: int | None = None) -> Suite:
    """The suite with shorter (or longer) durations: ``runtime`` sets every measured cell's
    runtime; ``scale`` multiplies every duration (runtime, ramp, precondition round), at least 1 s.
    Used by the demo, the tests and the benchmarks to run the built-in suites in seconds. ``repeat``
    (a submission's ``--repeat``) replaces the suite's own."""
    if repeat is not None:
        suite = suite.model_copy(update={"repeat": repeat})
    if runtime is None and scale is None:
        return suite
    if suite.app is not None:
        return suite.model_copy(update={"app": with_app_overrides(suite.app, runtime, scale)})

    def scaled(seconds: int, minimum: int = 1) -> int:
        return seconds if scale is None else max(minimum, round(seconds * scale))

    cells = []
    for c in suite.cells:
        w = c.workload
        cells.append(c.model_copy(update={"workload": w.model_copy(update={
            "runtime": runtime if runtime is not None else scaled(w.runtime),
            "ramp_time": 0 if runtime is not None else scaled(w.ramp_time, 0)})}))
    phases = suite.phases
    if phases.precondition is not None and scale is not None:
        phases = phases.model_copy(update={"precondition": phases.precondition.model_copy(
            update={"round": scaled(phases.precondition.round)})})
    if phases.rounds is not None and scale is not None:
        phases = phases.model_copy(update={"rounds": phases.rounds.model_copy(
            update={"wipc_limit": scaled(phases.rounds.wipc_limit)})})
    return suite.model_copy(update={"cells": tuple(cells), "phases": phases})


def capacity_problems(suite: Suite, size_bytes: int, device: str) -> list[Problem]:
    """What of ``suite`` does not fit on a device of ``size_bytes`` (the smallest a submission names): a block
    size or an absolute footprint larger than the device, a block size larger than the footprint on it. One problem
    per profile and option."""
    problems: dict[tuple[str, str], Problem] = {}
    if size_bytes <= 0:
        return []
    if suite.app is not None:
        small = [m for m in suite.op_modes
                 if size_bytes * (100 - (int(m[3:]) if m.startswith("hp:") else 0)) // 100 < MIN_FS_BYTES]
        return [Problem("op_modes", f"{device} ({size_bytes} bytes) leaves less than {format_size(MIN_FS_BYTES)} "
                                    f"to the database's filesystem in OP mode(s) {', '.join(small)}")] if small else []
    for c in suite.cells:
        w = c.workload
        where = f"profile {c.profile}"
        if w.largest_bs > size_bytes and (c.profile, "bs") not in problems:     # a bssplit's largest size too
            problems[(c.profile, "bs")] = Problem(f"{where}.bs", f"block size {format_size(w.largest_bs)} is larger "
                                                                 f"than {device} ({size_bytes} bytes)")
        if (w.footprint and not w.footprint.endswith("%") and int(w.footprint) > size_bytes
                and (c.profile, "footprint") not in problems):
            problems[(c.profile, "footprint")] = Problem(
                f"{where}.footprint", f"footprint {format_size(int(w.footprint))} is larger than {device} "
                                      f"({size_bytes} bytes)")
        if (w.offset and not w.offset.endswith("%") and int(w.offset) >= size_bytes
                and (c.profile, "offset") not in problems):
            problems[(c.profile, "offset")] = Problem(f"{where}.offset", f"offset {format_size(int(w.offset))} is not "
                                                                         f"inside {device} ({size_bytes} bytes)")
        # fio refuses a job whose size is below its block size ("size smaller than bs"): known before the run
        area = (int(w.footprint) if w.footprint and not w.footprint.endswith("%")
                else size_bytes * float(w.footprint[:-1]) / 100 if w.footprint else None)
        if area is not None and w.largest_bs > area and not any(k[0] == c.profile for k in problems):
            problems[(c.profile, "bs")] = Problem(
                f"{where}.bs", f"block size {format_size(w.largest_bs)} is larger than the footprint "
                               f"{format_size(int(area))} ({w.footprint} of {device}): fio would refuse the job")
    return list(problems.values())


def repeat_problems(suite: Suite, repeat: int | None) -> list[Problem]:
    """A ``--repeat`` that is out of bounds or takes the suite's steps past its ``cell_limit``."""
    if repeat is None:
        return []
    if not 1 <= repeat <= MAX_REPEAT:
        return [Problem("--repeat", f"{repeat} is not a repeat count (1-{MAX_REPEAT})")]
    if suite.phases.rounds is not None and repeat > 1:
        return [Problem("--repeat", f"suite {suite.name} reports each cell over its steady-state window's rounds "
                                    "(phases.rounds): they are its repeats")]
    steps = steps_of(suite.model_copy(update={"repeat": repeat}))
    if steps > suite.cell_limit:
        return [Problem("--repeat", f"{repeat} repeats make {steps} steps, over the suite's cell_limit of "
                                    f"{suite.cell_limit}")]
    return []


def override_problems(suite: Suite, runtime: int | None, scale: float | None) -> list[Problem]:
    """Durations a ``--runtime`` / ``--scale`` override would take past the suite's bounds."""
    if runtime is None and scale is None:
        return []
    if suite.app is not None:
        return override_app_problems(suite.app, runtime, scale)
    where = "--scale" if runtime is None else "--runtime"
    scaled = with_overrides(suite, runtime=runtime, scale=scale)
    worst = max((c.workload.runtime for c in scaled.cells), default=0)
    ramp = max((c.workload.ramp_time for c in scaled.cells), default=0)
    pc = scaled.phases.precondition
    problems = []
    if worst > MAX_RUNTIME_S or (pc is not None and pc.round > MAX_RUNTIME_S):
        problems.append(Problem(where, f"makes a runtime of {max(worst, pc.round if pc else 0)} s, over the "
                                       f"ceiling of {MAX_RUNTIME_S} s"))
    if ramp > MAX_RAMP_S:
        problems.append(Problem(where, f"makes a ramp time of {ramp} s, over the ceiling of {MAX_RAMP_S} s"))
    return problems
