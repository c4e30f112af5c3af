"""The message protocol between controller and agents, version :data:`PROTOCOL_VERSION`.

Controller -> agent: Celery tasks on the host's queue ``agent.<host>``. They only *start*,
*cancel* or ask for a *report* of a step attempt; each returns within milliseconds, so no
broker message is held for the length of a fio run.

Agent -> controller: events appended to the Redis stream :data:`EVENTS_STREAM`, read by the
controller through a consumer group and acknowledged only after the store has committed
them. Every event is idempotent on the controller side (keyed by attempt id and state).

CLI -> controller: commands on :data:`COMMANDS_STREAM`, answered on a reply list.

Every message carries ``v``; a receiver rejects a major version it does not speak.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from labcontract.errors import ProtocolError
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.suite import Workload

PROTOCOL_VERSION = 4   # 2: StartStep carries an action and a device list (device groups, purge)
                       # 3: heartbeats carry health checks; an attempt can end in "timeout"; Release
                       # 4: action "net" (network steps started together on several hosts); Submit initiators

TASK_START = "lab.agent.start_step"
TASK_CANCEL = "lab.agent.cancel_step"
TASK_REPORT = "lab.agent.report_step"

EVENTS_STREAM = "lab:events"
EVENTS_GROUP = "controller"
COMMANDS_STREAM = "lab:commands"
REPLY_PREFIX = "lab:reply:"


def agent_queue(host: str) -> str:
    return f"agent.{host}"


def now() -> float:
    return time.time()


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: int = PROTOCOL_VERSION


# --- controller -> agent ----------------------------------------------------------------

class NetStart(BaseModel):
    """What a network step measures on one host. ``paths`` are names the host declares (agent
    ``--net-path``); the agent resolves them to its interfaces and peer addresses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["target", "initiator"]
    paths: tuple[str, ...]
    mtu: int
    tool: Literal["fio", "iscsi"] = "fio"
    start_at: float              # epoch seconds: every host of the step starts its tools then
    seconds: int                 # the target's counting window (the initiators': their workload's)
    iqn: str | None = None
    lun: int = 1
    iscsi_port: int = 3260
    nbd_port: int = 10809


class StartStep(Message):
    run_id: str
    step_id: str
    attempt_id: str
    host: str
    action: Literal["fio", "purge", "net"] = "fio"
    devices: tuple[str, ...]     # declared DUT paths on the host (several: a device group); none for "net"
    job_name: str
    # the step's phase (telemetry); provision / dut_state / facts steps run on the controller, never here
    kind: Literal["purge", "precondition", "measure", "provision", "dut_state", "facts", "net"] = "measure"
    round: int = 0                                                   # precondition round
    suite: str = ""
    workload: Workload | None = None      # required for actions "fio" and "net"
    net: NetStart | None = None           # required for action "net"
    status_interval_s: int | None = None  # fio --status-interval: per-second series and live telemetry
    timeout_s: int               # the agent stops the process past this
    dispatched_at: float


class CancelStep(Message):
    attempt_id: str
    reason: str


class ReportStep(Message):
    attempt_id: str


# --- agent -> controller ----------------------------------------------------------------

class Artifact(BaseModel):
    """A file carried inside an event, gzip+base64, with the sha256 of its plain content."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str                    # "fio.json", "job.fio", "fio.stderr"
    sha256: str
    size: int
    content_gz_b64: str

    @classmethod
    def of(cls, name: str, data: bytes) -> Artifact:
        return cls(name=name, sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                   content_gz_b64=base64.b64encode(gzip.compress(data, 6)).decode())

    def content(self) -> bytes:
        data = gzip.decompress(base64.b64decode(self.content_gz_b64))
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise ProtocolError(f"artifact {self.name}: sha256 does not match its content")
        return data


class Event(Message):
    host: str
    sent_at: float = Field(default_factory=now)


class HealthCheck(BaseModel):
    """One health check an agent ran: ``target`` is the host name (agent self-test) or a DUT path."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: Literal["agent", "present", "serial", "smart"]
    target: str
    ok: bool
    detail: str = ""
    observed: str | None = None            # e.g. the serial read back (the controller compares it)


class Register(Event):
    type: Literal["register"] = "register"
    agent_version: str
    facts: HostFacts
    duts: tuple[DeclaredDut, ...]
    running: tuple[str, ...] = ()          # attempt ids it holds (running or unreported)
    health: tuple[HealthCheck, ...] = ()


class Heartbeat(Event):
    type: Literal["heartbeat"] = "heartbeat"
    running: tuple[str, ...] = ()
    health: tuple[HealthCheck, ...] = ()   # empty: no checks ran with this beat


class StepStarted(Event):
    type: Literal["step_started"] = "step_started"
    attempt_id: str
    pid: int
    fio_started_at: float
    job_sha256: str
    adopted: bool = False                  # re-adopted after an agent restart


class StepEnded(Event):
    """fio has exited (or never could start). ``outcome`` is the agent's view; the controller
    decides the step's final state after parsing the output."""

    type: Literal["step_ended"] = "step_ended"
    attempt_id: str
    outcome: Literal["exited", "refused", "cancelled", "timeout", "error"]
    reason: str = ""
    exit_code: int | None = None
    fio_started_at: float | None = None
    fio_ended_at: float | None = None
    artifacts: tuple[Artifact, ...] = ()


class StepUnknown(Event):
    """Answer to a report request for an attempt the agent has no record of."""

    type: Literal["step_unknown"] = "step_unknown"
    attempt_id: str


AnyEvent = Annotated[
    Register | Heartbeat | StepStarted | StepEnded | StepUnknown, Field(discriminator="type")
]
_EVENT = TypeAdapter(AnyEvent)


def check_version(data: dict[str, Any]) -> None:
    v = data.get("v")
    if v != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {v!r} is not spoken here (this side speaks "
                            f"{PROTOCOL_VERSION})", got_version=v)


def decode_event(raw: str | bytes) -> Register | Heartbeat | StepStarted | StepEnded | StepUnknown:
    try:
        data = TypeAdapter(dict[str, Any]).validate_json(raw)
        check_version(data)
        return _EVENT.validate_python(data)
    except ValidationError as e:
        raise ProtocolError(f"malformed event: {e.errors()[0]['msg']} at {e.errors()[0]['loc']}") from e


def decode(model: type[Message], data: dict[str, Any]) -> Any:
    """Validate a task payload of the given message type, version first."""
    check_version(data)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ProtocolError(f"malformed {model.__name__}: {e.errors()[0]['msg']} "
                            f"at {e.errors()[0]['loc']}") from e


# --- CLI -> controller --------------------------------------------------------------------

class Submit(Message):
    type: Literal["submit"] = "submit"
    run_id: str
    suite_source: str              # file name, for error messages
    suite_text: str
    host: str                      # a network suite: the target
    devices: tuple[str, ...]       # one, or the members of a device group; none for a network suite
    initiators: tuple[str, ...] = ()   # a network suite: its initiator hosts (else the suite's own)
    runtime_override: int | None = None
    scale: float | None = None
    live: bool = True              # per-second snapshots (live telemetry, series) for every fio step
    priority: int = 0              # higher first
    not_before: float | None = None   # epoch seconds
    expires_at: float | None = None   # epoch seconds: expire if not started by then
    reply_to: str


class Cancel(Message):
    type: Literal["cancel"] = "cancel"
    run_id: str
    reason: str = "cancelled by user"
    reply_to: str


class Pause(Message):
    type: Literal["pause"] = "pause"
    run_id: str
    reply_to: str


class Resume(Message):
    type: Literal["resume"] = "resume"
    run_id: str
    reply_to: str


class ScheduleAdd(Message):
    """Repeat ``submit`` (its run id, reply and times are filled in at each firing) on a cron expression."""

    type: Literal["schedule_add"] = "schedule_add"
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    cron: str
    submit: Submit
    expires_after_s: int | None = None
    reply_to: str


class ScheduleRemove(Message):
    type: Literal["schedule_rm"] = "schedule_rm"
    name: str
    reply_to: str


class Release(Message):
    """Return a quarantined host (``device`` None) or one of its DUTs to scheduling."""

    type: Literal["release"] = "release"
    host: str
    device: str | None = None
    reply_to: str


AnyCommand = Annotated[Submit | Cancel | Pause | Resume | ScheduleAdd | ScheduleRemove | Release,
                       Field(discriminator="type")]
COMMAND = TypeAdapter(AnyCommand)


class Reply(Message):
    ok: bool
    run_id: str | None = None
    errors: tuple[str, ...] = ()
