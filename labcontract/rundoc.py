"""A run as one lab hands it to another: what ``labctl export --format lab`` writes and ``labctl import`` reads
(docs/reports.md "Labs that share results"), and what an ``import_run`` command carries to the controller.

Everything in it is untrusted input: every field is typed and bounded, the JSON documents a row keeps (a step's
cell, a result's metrics, series, provenance...) are checked for depth, size and finite numbers, the ids of a run's
steps and attempts must start with the run's (so that an import never names another run's rows), and no state may
be an active one (an imported run is never scheduled). The same model is judged by labctl before anything is sent
and by the controller again before anything is written.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from labcontract.bounds import Epoch
from labcontract.errors import Problem
from labcontract.stepkinds import StepKindName

FORMAT = "storagelab-lab-export"
FORMAT_VERSION = 1
MANIFEST = "lab-export.json"          # the bundle's document; its artifacts are artifacts/<sha256>
ARTIFACTS_DIR = "artifacts"
MANIFEST_MAX_BYTES = 256 << 20        # the document of a bundle (every run of it)
MAX_RUNS = 10_000                     # runs in one bundle
MAX_STEPS = 20_000                    # steps of one run (a large sweep with precondition rounds)
MAX_ATTEMPTS = 100                    # attempts of one step
MAX_ARTIFACTS = 64                    # artifacts of one attempt
JSON_MAX_DEPTH = 32
JSON_MAX_STRING = 1 << 20
JSON_MAX_ITEMS = 2_000_000            # values in one JSON document of a row (a long series)
JSON_MAX_INT = 1 << 64                # an integer of a row's JSON (fio's counters are 64-bit)
TEXT_MAX = 64 << 10                   # a reason, a note, a verdict
JOB_TEXT_MAX = 1 << 20                # a step's job text (an application step's start message)
SUITE_TEXT_MAX = 1 << 20
LAB_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

LabName = Annotated[str, Field(pattern=LAB_RE)]
RunId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")]
RowId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,71}$")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
ArtifactName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Name = Annotated[str, Field(max_length=160)]
Ident = Annotated[str, Field(max_length=128)]
Path512 = Annotated[str, Field(max_length=512)]
Text = Annotated[str, Field(max_length=TEXT_MAX)]
Count = Annotated[int, Field(ge=0, le=1 << 31)]
Int = Annotated[int, Field(ge=-(1 << 62), le=1 << 62)]
Figure = Annotated[float, Field(allow_inf_nan=False, ge=-1e300, le=1e300)]
RunStateDone = Literal["SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"]
StepStateDone = Literal["PENDING", "LOST", "SUCCEEDED", "FAILED", "CANCELLED"]   # never DISPATCHED / RUNNING


def _check_json(value: Any) -> Any:
    """A JSON document a row keeps: bounded depth, strings and size; every number finite, every integer within
    ±2^64."""
    count = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        count += 1
        if count > JSON_MAX_ITEMS:
            raise ValueError(f"more than {JSON_MAX_ITEMS} values")
        if depth > JSON_MAX_DEPTH:
            raise ValueError(f"nested deeper than {JSON_MAX_DEPTH}")
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str) or len(k) > 256:
                    raise ValueError("a key that is not a string of at most 256 characters")
                stack.append((x, depth + 1))
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, str):
            if len(v) > JSON_MAX_STRING:
                raise ValueError(f"a string longer than {JSON_MAX_STRING} characters")
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ValueError("a number that is not finite")
        elif isinstance(v, int) and not isinstance(v, bool) and not -JSON_MAX_INT <= v <= JSON_MAX_INT:
            raise ValueError("an integer beyond ±2^64")
        elif not (v is None or isinstance(v, bool | int)):
            raise ValueError(f"a value of type {type(v).__name__}")
    return value


JsonObj = Annotated[dict[str, Any], AfterValidator(_check_json)]
JsonList = Annotated[list[Any], AfterValidator(_check_json)]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArtifactRef(_Doc):
    name: ArtifactName
    sha256: Sha256
    size: Annotated[int, Field(ge=0, le=128 << 20)]    # labcontract.protocol.ARTIFACT_MAX_BYTES


class ResultDoc(_Doc):
    kind: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,15}$")] = "fio"
    tool: Annotated[str, Field(max_length=32)] = "fio"
    tool_version: Ident = ""
    throughput: Figure | None = None
    throughput_unit: Annotated[str, Field(max_length=16)] = ""
    read_iops: Figure | None = None
    write_iops: Figure | None = None
    iops: Figure | None = None
    read_bw_bytes: Figure | None = None
    write_bw_bytes: Figure | None = None
    bw_bytes: Figure | None = None
    lat_mean_ns: Figure | None = None
    lat_max_ns: Figure | None = None
    lat_stddev_ns: Figure | None = None
    lat_p99_ns: Figure | None = None
    runtime_ms: Count
    fio_version: Annotated[str, Field(max_length=32)] | None = None
    metrics: JsonObj
    per_device: JsonObj | None = None
    series: JsonObj | None = None
    per_path: JsonObj | None = None
    lat_hist: JsonObj | None = None
    provenance: JsonObj
    created_at: Epoch


class AttemptDoc(_Doc):
    id: RowId
    number: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS * 10)]
    host: Ident
    device: Path512
    state: StepStateDone
    reason: Text = ""
    timeout_s: Count
    dispatch_count: Count = 0
    dispatched_at: Epoch | None = None
    started_at: Epoch | None = None
    fio_started_at: Epoch | None = None
    fio_ended_at: Epoch | None = None
    ended_at: Epoch | None = None
    pid: Count | None = None
    exit_code: Int | None = None
    lost_at: Epoch | None = None
    stop_cause: Annotated[str, Field(max_length=16)] | None = None
    result: ResultDoc | None = None
    artifacts: Annotated[list[ArtifactRef], Field(max_length=MAX_ARTIFACTS)] = []

    @model_validator(mode="after")
    def _unique_names(self) -> AttemptDoc:
        names = [a.name for a in self.artifacts]
        if len(set(names)) != len(names):
            raise ValueError(f"attempt {self.id}: an artifact name given twice")
        return self


class StepDoc(_Doc):
    id: RowId
    seq: Count
    round: Count = 0
    kind: StepKindName
    name: Name
    cell: JsonObj
    note: Text = ""
    workload: JsonObj | None = None
    job_text: Annotated[str, Field(max_length=JOB_TEXT_MAX)]
    host: Ident = ""
    state: StepStateDone
    reason: Text = ""
    ended_at: Epoch | None = None
    attempts: Annotated[list[AttemptDoc], Field(max_length=MAX_ATTEMPTS)] = []

    @model_validator(mode="after")
    def _attempts_are_its(self) -> StepDoc:
        for a in self.attempts:
            if not a.id.startswith(self.id + "-"):
                raise ValueError(f"attempt {a.id} does not belong to step {self.id} (its id must start with it)")
        if len({a.number for a in self.attempts}) != len(self.attempts):
            raise ValueError(f"step {self.id}: an attempt number given twice")
        return self


class PreconditionDoc(_Doc):
    seq: Count
    name: Name
    criteria: JsonObj
    rounds: JsonList = []
    steady: bool | None = None
    reached_round: Count | None = None
    verdict: Text = ""
    ended_at: Epoch | None = None


class NetGroupDoc(_Doc):
    seq: Count
    name: Name
    cell: JsonObj
    hosts: JsonList
    starts: JsonObj
    skew_ms: Figure | None = None
    window_start: Epoch | None = None
    window_end: Epoch | None = None
    total: JsonObj
    per_path: JsonObj
    per_host: JsonObj
    failures: JsonList
    complete: bool
    reason: Text = ""
    created_at: Epoch


class RunDoc(_Doc):
    id: RunId
    lab: Annotated[str, Field(pattern=r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})?$")] = ""   # "": the exporting lab's
    suite_name: Ident
    suite_source: Path512
    suite_text: Annotated[str, Field(max_length=SUITE_TEXT_MAX)]
    suite_sha256: Sha256
    host: Ident
    device: Path512
    devices: Annotated[list[Path512], Field(max_length=1024)] = []
    runtime_override: Count | None = None
    scale: Figure | None = None
    state: RunStateDone
    reason: Text = ""
    priority: Int = 0
    submitted_at: Epoch
    started_at: Epoch | None = None
    ended_at: Epoch | None = None
    topology: JsonObj | None = None
    submitted_by: Annotated[str, Field(max_length=64)] = ""
    max_rounds: Count | None = None
    rerun_count: Count = 0
    live: bool = True                     # per-second fio snapshots for every step (False: imported fio output)
    steps: Annotated[list[StepDoc], Field(max_length=MAX_STEPS)]
    preconditions: Annotated[list[PreconditionDoc], Field(max_length=MAX_STEPS)] = []
    net_groups: Annotated[list[NetGroupDoc], Field(max_length=MAX_STEPS)] = []

    @model_validator(mode="after")
    def _steps_are_its(self) -> RunDoc:
        problems = [f"step {st.id} does not belong to run {self.id} (its id must start with it)"
                    for st in self.steps if not st.id.startswith(self.id + "-")]
        if len({st.id for st in self.steps}) != len(self.steps):
            problems.append("a step id given twice")
        if len({(st.seq, st.round, st.host) for st in self.steps}) != len(self.steps):
            problems.append("two steps at the same (seq, round, host)")
        for what, seqs in (("precondition", [p.seq for p in self.preconditions]),
                           ("network group", [g.seq for g in self.net_groups])):
            if len(set(seqs)) != len(seqs):
                problems.append(f"a {what} seq given twice")
        if problems:
            raise ValueError("; ".join(problems[:20]))
        return self

    def artifacts(self) -> dict[str, int]:
        """sha256 -> size of every artifact the run's attempts name."""
        return {a.sha256: a.size for st in self.steps for at in st.attempts for a in at.artifacts}


class Bundle(_Doc):
    """The document of a lab export (:data:`MANIFEST`)."""

    format: Literal["storagelab-lab-export"]
    format_version: Literal[1]
    lab: LabName | None = None
    exported_at: Epoch | None = None
    runs: Annotated[list[RunDoc], Field(max_length=MAX_RUNS)]


def problems_of(e: ValidationError, prefix: str = "") -> list[Problem]:
    """Every error of a validation, each with its key path (``runs[0].steps[3].cell``) and message."""
    out = []
    for err in e.errors():
        loc = prefix
        for part in err["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        out.append(Problem(loc, str(err["msg"])[:500]))
    return out
