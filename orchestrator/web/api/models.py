"""The answers and bodies of the API (pydantic), so /openapi.json documents every route's shape.

Bodies are closed (``extra="forbid"``) and bounded: every string has a length, every number a range, every
list a size, as the controller's own command models (labcontract.protocol) bound them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from labcontract.limits import MAX_PRIORITY
from labcontract.protocol import MAX_ROUNDS_CAP, TokenName
from labcontract.suite import MAX_REPEAT, MAX_RUNTIME_S, MAX_SUITE_BYTES
from orchestrator.canary import DEFAULT_CRON

Value = str | int | float | bool | None
Epoch = Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False)]
HostName = Annotated[str, Field(pattern=r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})?$")]
StartHost = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
DeviceRef = Annotated[str, Field(pattern=r"^[A-Za-z0-9/_.:+@,=-]{1,512}$")]
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"       # no control character


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WatchFrameOut(BaseModel):
    """One frame of ``labctl watch``: the run's state, its steps' table drawn for the caller's terminal, and the
    line a pipe gets."""

    state: str
    table: str
    line: str


class WhoAmI(BaseModel):
    name: str
    role: str


class RunSummary(BaseModel):
    id: str
    suite: str
    host: str
    devices: list[str]
    state: str
    reason: str
    priority: int
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    steps_done: int
    steps_total: int
    submitted_by: str
    max_rounds: int | None = None
    rerun_count: int = 0
    set_aside: str = ""        # a duty of the controller that failed on this run (its notification, its history)
    lab: str = Field("", description="the lab that measured it, for a run imported from another lab (labctl "
                                     "import); empty for this lab's runs")


class RunPage(BaseModel):
    runs: list[RunSummary]
    next: str | None = Field(description="pass as ``before`` for the next (older) page; null on the last")


class AttemptOut(BaseModel):
    id: str
    number: int
    state: str
    host: str
    started_at: float | None
    ended_at: float | None
    rc: int | None


class StepOut(BaseModel):
    id: str
    seq: int
    round: int
    kind: str
    name: str
    cell: dict[str, Any]
    state: str
    reason: str
    host: str
    ended_at: float | None
    progress: float = Field(0.0, description="0..1: where it is, or where it stopped (0: it never ran)")
    attempts: list[AttemptOut]


class RunOut(RunSummary):
    steps: list[StepOut]
    provenance: dict[str, Any]
    suite_source: str
    suite_sha256: str
    topology: dict[str, Any] | None


class ArtifactOut(BaseModel):
    id: int
    step_id: str
    step: str = ""          # the step's name
    attempt_id: str
    name: str
    size: int
    sha256: str


class SeriesOut(BaseModel):
    step: str
    name: str
    series: dict[str, Any]


class HealthOut(BaseModel):
    check: str
    fails: int
    detail: str
    at: float | None


class DeviceOut(BaseModel):
    name: str
    path: str
    model: str | None
    firmware: str | None
    serial: str | None
    size_bytes: int
    quarantined: bool
    reason: str
    health: list[HealthOut]


class HostOut(BaseModel):
    name: str
    state: Literal["up", "down", "quarantined", "incompatible"]
    last_seen: float | None
    quarantined: bool
    reason: str
    agent_version: str | None
    health: list[HealthOut]
    devices: list[DeviceOut]


class QueueEntry(BaseModel):
    run_id: str
    suite: str
    priority: int
    target: str
    state: str
    steps_done: int
    steps_total: int
    status: str
    submitted_by: str


class ScheduleOut(BaseModel):
    name: str
    cron: str
    suite: str
    host: str
    devices: list[str]
    priority: int
    expires_after_s: int | None
    next_fire_at: float
    last_fired_at: float | None
    last_run_id: str | None
    last_error: str
    created_at: float
    disabled_reason: str = ""      # why the controller disabled it ("": it fires); it never fires again until re-added


class CanaryOut(BaseModel):
    """A canary schedule and its DUT's last verdict, as ``labctl canary list`` shows them."""

    name: str
    cron: str
    quarantine: bool = Field(description="the DUT is quarantined at its canary's first drift")
    next_fire_at: float | None
    disabled_reason: str = Field(description="why the controller disabled the schedule (\"\": it fires)")
    last_run_id: str | None
    verdict: str = Field(description="ok / DRIFT [xN] with the judgement's detail, QUARANTINED with the reason, "
                                     "or - (never judged)")
    last_error: str


class NotifySinkOut(BaseModel):
    """A notification sink the controller delivers the end of each run to, redacted as the store keeps it (never a
    webhook's URL: it often holds its token), with its delivery state (``labctl notifications``)."""

    key: str = Field(description="file:<path>, webhook:<12 hex digits of the URL's SHA-256>, chat:<...>")
    kind: Literal["file", "webhook", "chat"]
    target: str = Field(description="a file's path; a webhook's scheme://host/…")
    origin: str = Field(description="where it is configured: lab file (its [notify]) or option (--notify-*)")
    active: bool = Field(description="in the running controller's configuration")
    state: Literal["ok", "failing", "waiting", "inactive"]
    delivered: int = Field(description="runs it took")
    pending: int = Field(description="runs handed to it and not taken yet")
    last_success_at: float | None
    last_failure_at: float | None
    last_error: str = Field(description="the reason of its last failure")
    updated_at: float


class CanaryDut(BaseModel):
    host: str
    device: str = Field(description="the DUT's declared name")
    path: str
    name: str = Field(description="the name of its canary schedule: canary.<host>.<device>")


class SuiteOut(BaseModel):
    name: str
    description: str = ""


class TokenOut(BaseModel):
    name: str
    role: str
    created_at: float
    created_by: str
    expires_at: float | None
    revoked_at: float | None


class NewToken(BaseModel):
    name: str
    role: str
    token: str = Field(description="shown this once: only its SHA-256 is stored")
    expires_at: float | None


class SubmitBody(Closed):
    """A suite (a built-in name, or a suite's YAML text) on a host's DUTs (or a network suite's target and
    initiators), as ``labctl submit`` takes it."""

    suite: Annotated[str, Field(max_length=128)] | None = None
    suite_yaml: Annotated[str, Field(max_length=MAX_SUITE_BYTES)] | None = None
    host: HostName = ""
    devices: Annotated[list[DeviceRef], Field(max_length=256)] = []
    initiators: Annotated[list[StartHost], Field(max_length=256)] = []
    runtime: Annotated[int, Field(ge=1, le=MAX_RUNTIME_S)] | None = None
    scale: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] | None = None
    priority: Annotated[int, Field(ge=-1_000_000, le=1_000_000)] = 0
    not_before: Epoch | None = None
    expires_at: Epoch | None = None
    max_rounds: Annotated[int, Field(ge=1, le=MAX_ROUNDS_CAP)] | None = None
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT, strict=True)] | None = None
    live: bool = True


class Submitted(BaseModel):
    run_id: str


class CancelBody(Closed):
    reason: Annotated[str, Field(min_length=1, max_length=4096)] = "cancelled by user"


class EmptyBody(Closed):
    pass


class ReleaseBody(Closed):
    device: Annotated[str, Field(max_length=512)] | None = None


class ScheduleBody(Closed):
    name: TokenName
    cron: Annotated[str, Field(min_length=1, max_length=256)]
    suite: Annotated[str, Field(max_length=128)] | None = None
    suite_yaml: Annotated[str, Field(max_length=MAX_SUITE_BYTES)] | None = None
    host: HostName = ""
    devices: Annotated[list[DeviceRef], Field(max_length=256)] = []
    runtime: Annotated[int, Field(ge=1, le=MAX_RUNTIME_S)] | None = None
    scale: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] | None = None
    priority: Annotated[int, Field(ge=-1_000_000, le=1_000_000)] = 0
    live: bool = True
    expires_after_s: Annotated[int, Field(ge=0, le=10 * 365 * 86400)] | None = None


class CanaryBody(Closed):
    """``labctl canary add HOST DEVICE [--cron] [--quarantine] [--priority]``."""

    host: Annotated[str, Field(min_length=1, max_length=256, pattern=PRINTABLE)]
    device: Annotated[str, Field(min_length=1, max_length=512, pattern=PRINTABLE)]
    cron: Annotated[str, Field(min_length=1, max_length=256, pattern=PRINTABLE)] = DEFAULT_CRON
    quarantine: Annotated[bool, Field(strict=True)] = False
    priority: Annotated[int, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY, strict=True)] = 0


class TokenBody(Closed):
    name: TokenName
    role: Literal["viewer", "engineer", "admin"]
    expires_in_s: Annotated[int, Field(ge=60, le=10 * 365 * 86400)] | None = None


class CommandDone(BaseModel):
    ok: bool
    run_id: str | None = None
    name: str | None = None
    message: str = ""
