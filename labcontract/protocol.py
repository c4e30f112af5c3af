"""The message protocol between controller and agents, version :data:`PROTOCOL_VERSION`.

Controller -> agent: Celery tasks on the host's queue ``agent.<host>``. They only *start*,
*cancel* or ask for a *report* of a step attempt; each returns within milliseconds, so no
broker message is held for the length of a fio run.

Agent -> controller: events appended to the host's own Redis stream (:func:`events_stream`:
``lab:events:<host>``, the only one its ACL user may write), read by the controller through a
consumer group and acknowledged (and deleted) only after the store has committed them. The
controller applies an event only for the host of its stream and the attempt current there;
every event is idempotent on the controller side (keyed by attempt id and state).

CLI -> controller: commands on :data:`COMMANDS_STREAM`, answered on a reply list. The web service's commands
arrive on :data:`WEB_COMMANDS_STREAM` (protocol 7), the only stream whose commands' ``actor`` the controller
records as given, and the only one it accepts token commands from.

Every message carries ``v``; a receiver rejects a major version it does not speak.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import re
import time
import zlib
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from labcontract import limits
from labcontract.apps import AppStart
from labcontract.bounds import Epoch
from labcontract.errors import ProtocolError
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.stepkinds import AgentActionName, StepKindName
from labcontract.suite import MAX_REPEAT, MAX_RUNTIME_S, MAX_SUITE_BYTES, Workload

PROTOCOL_VERSION = 8   # 2: StartStep carries an action and a device list (device groups, purge)
                       # 3: heartbeats carry health checks; an attempt can end in "timeout"; Release
                       # 4: action "net" (network steps started together on several hosts); Submit initiators
                       # 5: each agent appends to its own events stream (identity enforced by Redis ACLs),
                       #    dead-letter stream, strict start messages, error replies to wrong-version commands
                       # 6: action "app" (application workloads on the DUT: sysbench, pgbench, external)
                       # 7: the web service's stream (WEB_COMMANDS_STREAM), an actor on every command, Rerun,
                       #    TokenCreate / TokenRevoke, Submit.max_rounds
                       # 8: Submit.repeat (each measured cell N times), Acknowledge (a regression)

TASK_START = "lab.agent.start_step"
TASK_CANCEL = "lab.agent.cancel_step"
TASK_REPORT = "lab.agent.report_step"
LAB_TASKS = frozenset({TASK_START, TASK_CANCEL, TASK_REPORT})   # the only tasks an agent's worker runs

EVENTS_STREAM = "lab:events"          # legacy single stream (protocol <= 4); per host since 5: events_stream()
EVENTS_STREAM_PREFIX = "lab:events:"
EVENTS_GROUP = "controller"
COMMANDS_STREAM = "lab:commands"
WEB_COMMANDS_STREAM = "lab:commands:web"   # the web service's (only broker user ``web`` may XADD there)
DEADLETTER_STREAM = "lab:deadletter"  # entries refused by the controller, with the reason (never applied)
REPLY_PREFIX = "lab:reply:"
# the lab's controller says it is here: JSON {"first_at", "last_at"}, set by the lease holder every few seconds and
# never expired ("a controller of this lab registered here"); no agent's live key (lab:live:<host>) can be it: a
# host name starts with a letter or digit
CONTROLLER_PRESENCE_KEY = "lab:live:_controller"


def agent_queue(host: str) -> str:
    return f"agent.{host}"


def events_stream(host: str) -> str:
    """The stream only ``host``'s agent may append to (its Redis ACL user allows no other)."""
    return f"{EVENTS_STREAM_PREFIX}{host}"


def now() -> float:
    return time.time()


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Annotated[int, Field(ge=1, le=1 << 16)] = PROTOCOL_VERSION


# --- controller -> agent ----------------------------------------------------------------

def _safe_id(v: str) -> str:
    """An id that becomes a path component on an agent (its attempt directory): no '/', no '..'."""
    if ".." in v:
        raise ValueError(f"{v[:40]!r} is not a safe id (contains '..')")
    return v


# ids the agent turns into file names: letters, digits, '.', '_', '-'; first a letter or digit; no '..'
SafeId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"), AfterValidator(_safe_id)]
StartHost = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
DeviceRef = Annotated[str, Field(pattern=r"^[A-Za-z0-9/_.:+@,=-]{1,512}$")]   # a DUT's name, path or by-id
NetPathName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
StartFloat = Epoch      # a time a message carries: finite, within [0, 2100-01-01] (labcontract.bounds)
MAX_STEP_TIMEOUT_S = 30 * 86400   # a step's hard stop: runtime + ramp (at most 8 days) + the controller's margins


class NetStart(BaseModel):
    """What a network step measures on one host. ``paths`` are names the host declares (agent
    ``--net-path``); the agent resolves them to its interfaces and peer addresses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["target", "initiator"]
    paths: Annotated[tuple[NetPathName, ...], Field(max_length=8)]
    mtu: Literal[1500, 9000]     # the suite's allowlist (NET_MTUS): with --manage-mtu the agent sets it on the NIC
    tool: Literal["fio", "iscsi", "block"] = "fio"   # block: agents net kind version 2 and later
    start_at: StartFloat         # epoch seconds: every host of the step starts its tools then
    seconds: Annotated[int, Field(ge=0, le=MAX_STEP_TIMEOUT_S)]   # the target's window (initiators: workload's)
    iqn: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:_-]{0,222}$")] | None = None
    lun: Annotated[int, Field(ge=0, le=16383)] = 1
    iscsi_port: Annotated[int, Field(ge=1, le=65535)] = 3260
    nbd_port: Annotated[int, Field(ge=1, le=65535)] = 10809


MAX_STATUS_INTERVAL_S = 3600     # fio --status-interval of a start (1 s unless a long step's stream would outgrow
                                 # ARTIFACT_MAX_BYTES: orchestrator.kinds.fio.status_interval)


class StartStep(Message):
    run_id: SafeId
    step_id: SafeId
    attempt_id: SafeId
    host: StartHost
    action: AgentActionName = "fio"
    devices: Annotated[tuple[DeviceRef, ...], Field(max_length=256)]   # declared DUTs (several: a group); none: net
    job_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.%@-]{0,255}$")]   # the step's name
    # the step's phase (telemetry); provision / dut_state / facts steps run on the controller, never here
    kind: StepKindName = "measure"
    round: Annotated[int, Field(ge=-100_000, le=100_000)] = 0   # precondition round (< 0: a re-purge slot)
    suite: Annotated[str, Field(pattern=r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})?$")] = ""
    workload: Workload | None = None      # required for actions "fio" and "net"; as strict as a suite
    net: NetStart | None = None           # required for action "net"
    app: AppStart | None = None           # required for action "app"
    status_interval_s: Annotated[int, Field(ge=1, le=MAX_STATUS_INTERVAL_S)] | None = None   # fio --status-interval
    timeout_s: Annotated[int, Field(ge=1, le=MAX_STEP_TIMEOUT_S)]   # the agent stops the process past this
    dispatched_at: StartFloat

    @model_validator(mode="after")
    def _app_part(self) -> StartStep:
        if (self.action == "app") != (self.app is not None):
            raise ValueError('the "app" part comes with action "app", and only with it')
        return self


class CancelStep(Message):
    attempt_id: SafeId
    reason: Annotated[str, Field(max_length=4096)]


class ReportStep(Message):
    attempt_id: SafeId


# --- agent -> controller ----------------------------------------------------------------

ENTRY_MAX_BYTES = 32 << 20     # one stream entry (event or command), checked before JSON is parsed
ARTIFACT_MAX_BYTES = 128 << 20     # one artifact, decompressed (a long precondition round's fio.json stream)
ARTIFACTS_TOTAL_MAX_BYTES = 3 * ARTIFACT_MAX_BYTES   # all of one event's, decompressed (32 x 128 MiB was 4 GiB)
_CHUNK = 1 << 20
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")     # a host name as events and streams carry it
HostName = Annotated[str, Field(pattern=HOST_RE.pattern)]
EventId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")]   # attempt ids in events
Text4k = Annotated[str, Field(max_length=4096)]
Finite = Epoch          # the agent's times (its clock may be off: never trusted for deadlines)
REPLY_TO_RE = re.compile(r"^lab:reply:[A-Za-z0-9._-]{1,64}$")
# where a command's answer goes: a reply list (lab:reply:<id>), or "" / "-" for none (schedule templates)
ReplyTo = Annotated[str, Field(pattern=r"^(lab:reply:[A-Za-z0-9._-]{1,64}|-?)$")]


class Artifact(BaseModel):
    """A file carried inside an event, gzip+base64, with the sha256 and size of its plain content."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]   # "fio.json", "job.fio", ...
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    size: Annotated[int, Field(ge=0, le=ARTIFACT_MAX_BYTES)]
    content_gz_b64: Annotated[str, Field(max_length=ENTRY_MAX_BYTES)]   # the entry's own bound (checked first)

    @classmethod
    def of(cls, name: str, data: bytes) -> Artifact:
        return cls(name=name, sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                   content_gz_b64=base64.b64encode(gzip.compress(data, 6)).decode())

    def content(self, limit: int = ARTIFACT_MAX_BYTES) -> bytes:
        """The plain content, inflated in chunks: refused (ProtocolError) as soon as it would pass its declared
        size or ``limit`` (a gzip bomb never inflates), or when it is not gzip, is truncated or mismatches."""
        try:
            packed = base64.b64decode(self.content_gz_b64, validate=True)
        except (binascii.Error, ValueError) as e:
            raise ProtocolError(f"artifact {self.name}: not base64 ({e})") from e
        cap = min(self.size, limit)
        out = bytearray()
        z = zlib.decompressobj(wbits=31)              # gzip framing only
        pending = packed
        try:
            while True:
                chunk = z.decompress(pending, min(_CHUNK, cap + 1 - len(out)))
                out += chunk
                if len(out) > cap:
                    what = "its declared size" if cap == self.size else "the limit"
                    raise ProtocolError(f"artifact {self.name}: inflates past {what} of {cap} bytes "
                                        "(refused before inflating further)")
                pending = z.unconsumed_tail
                if z.eof or (not pending and not chunk):
                    break
        except zlib.error as e:
            raise ProtocolError(f"artifact {self.name}: corrupt gzip ({e})") from e
        if not z.eof:
            raise ProtocolError(f"artifact {self.name}: truncated gzip stream")
        if z.unused_data:
            raise ProtocolError(f"artifact {self.name}: data after the end of its gzip stream")
        if len(out) != self.size:
            raise ProtocolError(f"artifact {self.name}: {len(out)} bytes, declared {self.size}")
        data = bytes(out)
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise ProtocolError(f"artifact {self.name}: sha256 does not match its content")
        return data


class Event(Message):
    host: HostName                         # must name the stream it arrives on (events_stream(host))
    sent_at: Finite = Field(default_factory=now)


class HealthCheck(BaseModel):
    """One health check an agent ran: ``target`` is the host name (agent self-test) or a DUT path."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: Literal["agent", "present", "serial", "smart"]
    target: Annotated[str, Field(max_length=1024)]
    ok: bool
    detail: Text4k = ""
    observed: Annotated[str, Field(max_length=1024)] | None = None   # e.g. the serial read back (compared)


class Register(Event):
    type: Literal["register"] = "register"
    agent_version: Annotated[str, Field(max_length=32)]
    facts: HostFacts
    duts: Annotated[tuple[DeclaredDut, ...], Field(max_length=256)]
    running: Annotated[tuple[EventId, ...], Field(max_length=1024)] = ()   # attempt ids it holds
    health: Annotated[tuple[HealthCheck, ...], Field(max_length=1024)] = ()


class Heartbeat(Event):
    type: Literal["heartbeat"] = "heartbeat"
    running: Annotated[tuple[EventId, ...], Field(max_length=1024)] = ()
    health: Annotated[tuple[HealthCheck, ...], Field(max_length=1024)] = ()   # empty: no checks this beat


class StepStarted(Event):
    type: Literal["step_started"] = "step_started"
    attempt_id: EventId
    pid: Annotated[int, Field(ge=0, le=2**31)]
    fio_started_at: Finite
    job_sha256: Annotated[str, Field(max_length=128)]
    adopted: bool = False                  # re-adopted after an agent restart


class StepEnded(Event):
    """fio has exited (or never could start). ``outcome`` is the agent's view; the controller
    decides the step's final state after parsing the output."""

    type: Literal["step_ended"] = "step_ended"
    attempt_id: EventId
    outcome: Literal["exited", "refused", "cancelled", "timeout", "error"]
    reason: Text4k = ""
    exit_code: Annotated[int, Field(ge=-(2**31), le=2**31)] | None = None
    fio_started_at: Finite | None = None
    fio_ended_at: Finite | None = None
    artifacts: Annotated[tuple[Artifact, ...], Field(max_length=32)] = ()

    @model_validator(mode="after")
    def _artifacts_bounded(self) -> StepEnded:
        """Names once each, sizes (checked against the content when it is inflated) within the total: the
        controller holds and stores them all."""
        names = [a.name for a in self.artifacts]
        if len(set(names)) != len(names):
            raise ValueError("an artifact name appears twice")
        total = sum(a.size for a in self.artifacts)
        if total > ARTIFACTS_TOTAL_MAX_BYTES:
            raise ValueError(f"artifacts of {total} bytes in all, over {ARTIFACTS_TOTAL_MAX_BYTES}")
        return self


class StepUnknown(Event):
    """Answer to a report request for an attempt the agent has no record of."""

    type: Literal["step_unknown"] = "step_unknown"
    attempt_id: EventId


AnyEvent = Annotated[
    Register | Heartbeat | StepStarted | StepEnded | StepUnknown, Field(discriminator="type")
]
_EVENT = TypeAdapter(AnyEvent)




class OtherVersion(BaseModel):
    """What is read of a Register in another protocol version: who it is and what it speaks, nothing more."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["register"]
    v: Annotated[int, Field(ge=0, le=1 << 16)]
    host: HostName
    agent_version: Annotated[str, Field(max_length=32)] = "?"


def check_version(data: Any) -> None:
    """A message is a JSON object carrying ``v`` == :data:`PROTOCOL_VERSION` (ProtocolError otherwise)."""
    if not isinstance(data, dict):
        raise ProtocolError(f"not a message: a JSON {type(data).__name__}, not an object")
    v = data.get("v")
    if v != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {repr(v)[:20]} is not spoken here (this side speaks "
                            f"{PROTOCOL_VERSION})", got_version=v if isinstance(v, int) else None)


_ANY_JSON: TypeAdapter[Any] = TypeAdapter(Any)     # built once: building one costs more than most entries' parse


def parse_json(raw: str | bytes, what: str) -> Any:
    """The JSON of a stream entry, its size checked first; every failure is a ProtocolError."""
    if len(raw) > ENTRY_MAX_BYTES:
        raise ProtocolError(f"{what} of {len(raw)} bytes is larger than {ENTRY_MAX_BYTES}")
    try:
        return _ANY_JSON.validate_json(raw)
    except ValidationError as e:
        raise ProtocolError(f"{what} is not JSON: {e.errors()[0]['msg']}") from e


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    return f"{err['msg']} at {'.'.join(str(x) for x in err['loc'])}"[:400]


def _decode_entry(raw: str | bytes, what: str, adapter: TypeAdapter[Any]) -> Any:
    """A stream entry: size first, then JSON, version, fields; every failure is a ProtocolError."""
    data = parse_json(raw, what)
    check_version(data)
    try:
        return adapter.validate_python(data)
    except ValidationError as e:
        raise ProtocolError(f"malformed {what}: {_first_error(e)}") from e


def decode_event(raw: str | bytes) -> Register | Heartbeat | StepStarted | StepEnded | StepUnknown:
    event: Register | Heartbeat | StepStarted | StepEnded | StepUnknown = _decode_entry(raw, "event", _EVENT)
    return event


def other_version_register(raw: str | bytes) -> OtherVersion | None:
    """A Register of another protocol version, read leniently (host, v, agent version); None if it is not one."""
    try:
        data = parse_json(raw, "event")
        reg = OtherVersion.model_validate(data) if isinstance(data, dict) else None
    except (ProtocolError, ValidationError):
        return None
    return reg if reg is not None and reg.v != PROTOCOL_VERSION else None


def decode(model: type[Message], data: dict[str, Any]) -> Any:
    """Validate a task payload of the given message type, version first."""
    check_version(data)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ProtocolError(f"malformed {model.__name__}: {_first_error(e)}") from e


# --- CLI -> controller --------------------------------------------------------------------

# who sent a command: recorded as given only from the web service's stream (e.g. "token:<name>"); "labctl" else
Actor = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$")]
TokenName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,57}$")]   # "token:" + name fits an Actor
Role = Literal["viewer", "engineer", "admin"]
MAX_ROUNDS_CAP = 100_000       # labcontract.suite's own bound on a precondition's max_rounds


MAX_PRIORITY = limits.MAX_PRIORITY   # a run's priority is within +-this (labctl's options say so before sending)


class Submit(Message):
    type: Literal["submit"] = "submit"
    run_id: Annotated[str, Field(pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]{0,31}|-)$"),
                      AfterValidator(_safe_id)]   # "-": a schedule's template (each firing gets its own)
    suite_source: Annotated[str, Field(max_length=512)]   # file name, for error messages
    suite_text: Annotated[str, Field(max_length=MAX_SUITE_BYTES)]   # bytes checked again by the suite loader
    host: Annotated[str, Field(pattern=r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})?$")]   # a network suite: the target
    devices: Annotated[tuple[DeviceRef, ...], Field(max_length=256)]   # one, or a device group; none: network
    initiators: Annotated[tuple[StartHost, ...], Field(max_length=256)] = ()   # a network suite's initiators
    runtime_override: Annotated[int, Field(ge=1, le=MAX_RUNTIME_S)] | None = None
    scale: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] | None = None
    live: bool = True              # per-second snapshots (live telemetry, series) for every fio step
    priority: Annotated[int, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)] = 0   # higher first
    not_before: StartFloat | None = None   # epoch seconds
    expires_at: StartFloat | None = None   # epoch seconds: expire if not started by then
    max_rounds: Annotated[int, Field(ge=1, le=MAX_ROUNDS_CAP)] | None = None   # caps the suite's precondition
    # replaces the suite's repeat; strict: a true or "3" is refused, never read as a count
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT, strict=True)] | None = None
    actor: Actor | None = None
    reply_to: ReplyTo


RunRef = Annotated[str, Field(max_length=64)]     # a run id as commands name it (looked up, never a path)


class Cancel(Message):
    type: Literal["cancel"] = "cancel"
    run_id: RunRef
    reason: Annotated[str, Field(max_length=4096)] = "cancelled by user"   # stored on the run and each of its
    # steps, and sent in CancelStep (max 4096): unbounded, one command wrote MBs per step and a longer one failed
    actor: Actor | None = None
    reply_to: ReplyTo


class Pause(Message):
    type: Literal["pause"] = "pause"
    run_id: RunRef
    actor: Actor | None = None
    reply_to: ReplyTo


class Resume(Message):
    type: Literal["resume"] = "resume"
    run_id: RunRef
    actor: Actor | None = None
    reply_to: ReplyTo


class ScheduleAdd(Message):
    """Repeat ``submit`` (its run id, reply and times are filled in at each firing) on a cron expression."""

    type: Literal["schedule_add"] = "schedule_add"
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    cron: Annotated[str, Field(max_length=256)]
    submit: Submit
    expires_after_s: Annotated[int, Field(ge=0, le=10 * 365 * 86400)] | None = None
    actor: Actor | None = None
    reply_to: ReplyTo


class ScheduleRemove(Message):
    type: Literal["schedule_rm"] = "schedule_rm"
    name: Annotated[str, Field(max_length=64)]
    actor: Actor | None = None
    reply_to: ReplyTo


class Release(Message):
    """Return a quarantined host (``device`` None) or one of its DUTs to scheduling."""

    type: Literal["release"] = "release"
    host: Annotated[str, Field(max_length=64)]
    device: Annotated[str, Field(max_length=512)] | None = None
    actor: Actor | None = None
    reply_to: ReplyTo


class Rerun(Message):
    """Run again the FAILED, CANCELLED (and LOST) steps of a run that ended; its other steps keep their results."""

    type: Literal["rerun"] = "rerun"
    run_id: RunRef
    actor: Actor | None = None
    reply_to: ReplyTo


class Acknowledge(Message):
    """Acknowledge a regression of the run history (orchestrator.stats.history): it is not flagged again."""

    type: Literal["acknowledge"] = "acknowledge"
    regression_id: Annotated[str, Field(pattern=r"^[0-9a-f]{12}$")]
    reason: Annotated[str, Field(max_length=1024)] = ""
    actor: Actor | None = None
    reply_to: ReplyTo


class TokenCreate(Message):
    """An API token of the web service: only its SHA-256 travels and is stored (the token is shown once, where it
    was made). Accepted only from :data:`WEB_COMMANDS_STREAM`."""

    type: Literal["token_create"] = "token_create"
    name: TokenName
    role: Role
    token_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    expires_at: StartFloat | None = None     # epoch seconds; None: never
    actor: Actor | None = None
    reply_to: ReplyTo


class TokenRevoke(Message):
    type: Literal["token_revoke"] = "token_revoke"
    name: TokenName
    actor: Actor | None = None
    reply_to: ReplyTo


class ImportArtifact(Message):
    """An artifact of another lab's run (labctl import), for the content-addressed artifact store; sent before the
    run that names it. Its content is checked against its sha256 and size by the controller (Artifact.content)."""

    type: Literal["import_artifact"] = "import_artifact"
    artifact: Artifact
    actor: Actor | None = None
    reply_to: ReplyTo


class ImportRun(Message):
    """A run of another lab (labctl import): ``run_json`` is a labcontract.rundoc.RunDoc as JSON, validated again by
    the controller; ``lab`` is the lab it is tagged with. Importing the same run again changes nothing."""

    type: Literal["import_run"] = "import_run"
    lab: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    run_json: Annotated[str, Field(max_length=ENTRY_MAX_BYTES)]
    actor: Actor | None = None
    reply_to: ReplyTo


AnyCommandType: TypeAlias = (Submit | Cancel | Pause | Resume | ScheduleAdd | ScheduleRemove | Release | Rerun
                              | Acknowledge | TokenCreate | TokenRevoke | ImportArtifact | ImportRun)
AnyCommand = Annotated[AnyCommandType, Field(discriminator="type")]
COMMAND = TypeAdapter(AnyCommand)
TOKEN_COMMANDS = (TokenCreate, TokenRevoke)    # accepted only on WEB_COMMANDS_STREAM


def decode_command(raw: str | bytes) -> AnyCommandType:
    """A command from its stream entry (size first, then JSON, version, fields); every failure is a ProtocolError."""
    cmd: AnyCommandType = _decode_entry(raw, "command", COMMAND)
    return cmd


REPLY_ERRORS = 1024          # problems a reply lists (more are counted in the last line)
REPLY_ERROR_CHARS = 8192


def _fit_errors(v: object) -> object:
    """A reply's errors within its bounds: each cut, the list cut with a count of the rest (the controller's reply
    to a suite with thousands of problems must still be a valid reply)."""
    if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
        return v
    errors = [x if len(x) <= REPLY_ERROR_CHARS else x[:REPLY_ERROR_CHARS - 3] + "..." for x in v]
    if len(errors) > REPLY_ERRORS:
        errors = [*errors[:REPLY_ERRORS - 1], f"... and {len(errors) - REPLY_ERRORS + 1} more"]
    return tuple(errors)


class Reply(Message):
    ok: bool
    run_id: Annotated[str, Field(max_length=64)] | None = None
    errors: Annotated[tuple[Annotated[str, Field(max_length=REPLY_ERROR_CHARS)], ...],
                      Field(max_length=REPLY_ERRORS), BeforeValidator(_fit_errors)] = ()
