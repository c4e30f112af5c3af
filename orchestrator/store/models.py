"""Tables of the results store.

    Host 1─* Device
    Run 1─* Step 1─* Attempt 1─0..1 Result
                      Attempt 1─* Artifact
    Run 1─* NetGroup            (a network cell: the steps of its hosts, started together)

A Run is one submission of a suite against a host and device; its Steps are what the
suite expands to (the plan); each Step has one or more Attempts (a dispatch to an agent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from orchestrator.store.fingerprint import fingerprint


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention={
        "ix": "ix_%(column_0_label)s", "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s", "pk": "pk_%(table_name)s"})
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Host(Base):
    __tablename__ = "hosts"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    agent_version: Mapped[str | None] = mapped_column(String(32))
    protocol_version: Mapped[int | None] = mapped_column(Integer)
    facts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    registered_at: Mapped[float | None] = mapped_column(Float)
    last_seen: Mapped[float | None] = mapped_column(Float)
    # health: "check target" -> {"fails": consecutive failures, "detail": last detail, "at": time}
    health: Mapped[dict[str, Any]] = mapped_column(default=dict)
    quarantined_at: Mapped[float | None] = mapped_column(Float)     # out of scheduling until released
    quarantine_reason: Mapped[str] = mapped_column(Text, default="")
    # agent wall clock minus controller wall clock at the last registration (seconds); shown, never fatal
    clock_skew_s: Mapped[float | None] = mapped_column(Float)
    # why the agent cannot be used (e.g. it speaks another protocol version); "" when compatible
    incompatible: Mapped[str] = mapped_column(Text, default="")
    # schema 0016: the step kinds its agent announced, action -> version (HostFacts.step_kinds); None: it announced
    # none (an older agent: the scheduler does not judge the host by its kinds)
    step_kinds: Mapped[dict[str, int] | None] = mapped_column(JSON)
    devices: Mapped[list[Device]] = relationship(back_populates="host_row", cascade="all, delete-orphan",
                                                 order_by="Device.name")


class Device(Base):
    """A declared DUT of a host (what the agent allows runs on)."""

    __tablename__ = "devices"
    __table_args__ = (UniqueConstraint("host", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(ForeignKey("hosts.name"))
    name: Mapped[str] = mapped_column(String(128))
    path: Mapped[str] = mapped_column(String(512))
    kind: Mapped[str] = mapped_column(String(16))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    model: Mapped[str | None] = mapped_column(String(128))
    serial: Mapped[str | None] = mapped_column(String(128))
    firmware: Mapped[str | None] = mapped_column(String(64))
    by_id: Mapped[str | None] = mapped_column(String(512))
    declared: Mapped[bool] = mapped_column(Boolean, default=True)
    quarantined_at: Mapped[float | None] = mapped_column(Float)
    quarantine_reason: Mapped[str] = mapped_column(Text, default="")
    wipe_ok: Mapped[bool] = mapped_column(Boolean, default=False)
    observed: Mapped[dict[str, Any] | None] = mapped_column()    # the interlock's view at the last registration
    host_row: Mapped[Host] = relationship(back_populates="devices")


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_state", "state"),
                      Index("ix_runs_submitted_at_id", "submitted_at", "id"))    # the web's keyset pages

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    suite_name: Mapped[str] = mapped_column(String(128))
    suite_source: Mapped[str] = mapped_column(String(512))
    suite_text: Mapped[str] = mapped_column(Text)
    suite_sha256: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(128))
    device: Mapped[str] = mapped_column(String(512))              # the first device (display)
    devices: Mapped[list[Any]] = mapped_column(default=list)     # every device path, in group order
    runtime_override: Mapped[int | None] = mapped_column(Integer)
    scale: Mapped[float | None] = mapped_column(Float)
    live: Mapped[bool] = mapped_column(Boolean, default=True)    # per-second fio snapshots for every step
    not_before: Mapped[float | None] = mapped_column(Float)      # may not start before (epoch seconds)
    expires_at: Mapped[float | None] = mapped_column(Float)      # a run not started by then expires
    notified_at: Mapped[float | None] = mapped_column(Float)     # end notification delivered (to every sink)
    # schema 0015: the keys of the sinks that took it so far (orchestrator.controller.notify); None: none yet
    notified_sinks: Mapped[list[str] | None] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    # a network run: {"target", "initiators", "paths", "tool", ...}; None for a run on a host's DUTs
    topology: Mapped[dict[str, Any] | None] = mapped_column()
    # schema 0011: who submitted it ("labctl", "token:<name>" from the web service, "schedule:<name>")
    submitted_by: Mapped[str] = mapped_column(String(64), default="")
    max_rounds: Mapped[int | None] = mapped_column(Integer)       # caps the suite's precondition rounds
    rerun_count: Mapped[int] = mapped_column(Integer, default=0)  # times its failed steps were run again
    rerun_at: Mapped[float | None] = mapped_column(Float)         # the last rerun (retries count attempts since)
    # schema 0013: a duty of the controller that failed on this run (its notification, its history), with the
    # reason; the controller set the run aside for that duty and went on (orchestrator.controller.boundary)
    set_aside: Mapped[str] = mapped_column(Text, default="")
    # schema 0018: the lab that measured it, for a run imported from another lab (labctl import); "": this lab's
    lab: Mapped[str] = mapped_column(String(64), default="")
    steps: Mapped[list[Step]] = relationship(back_populates="run", order_by="[Step.seq, Step.round]",
                                             cascade="all, delete-orphan")


def _step_fingerprint(context: Any) -> str:
    """The insert default of ``steps.fingerprint``: computed from the row's kind and job text."""
    row = context.get_current_parameters()
    return fingerprint(str(row.get("kind") or "measure"), str(row.get("job_text") or ""))


class Step(Base):
    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("run_id", "seq", "round", "host", name="uq_steps_run_id_seq_round_host"),
                      Index("ix_steps_state", "state"),
                      Index("ix_steps_run_id_state", "run_id", "state"))   # (and ix_steps_run_id_op_mode: 0011)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    seq: Mapped[int] = mapped_column(Integer)
    round: Mapped[int] = mapped_column(Integer, default=0)       # precondition round (0: not a round)
    kind: Mapped[str] = mapped_column(String(16), default="measure")   # purge | precondition | measure
    name: Mapped[str] = mapped_column(String(160))
    cell: Mapped[dict[str, Any]] = mapped_column(default=dict)  # op_mode, profile, swept values
    note: Mapped[str] = mapped_column(Text, default="")
    workload: Mapped[dict[str, Any] | None] = mapped_column()
    job_text: Mapped[str] = mapped_column(Text)          # as rendered for the run's device
    # schema 0014: what the step ran, without the device's path (orchestrator.store.fingerprint): a history series
    # keeps to one fingerprint per cell
    fingerprint: Mapped[str] = mapped_column(String(16), default=_step_fingerprint, server_default="")
    host: Mapped[str] = mapped_column(String(128), default="")   # a network step's host ("": the run's)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    ended_at: Mapped[float | None] = mapped_column(Float)
    run: Mapped[Run] = relationship(back_populates="steps")
    attempts: Mapped[list[Attempt]] = relationship(back_populates="step", order_by="Attempt.number",
                                                   cascade="all, delete-orphan")


class Attempt(Base):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("step_id", "number"), Index("ix_attempts_state", "state"))

    id: Mapped[str] = mapped_column(String(72), primary_key=True)
    step_id: Mapped[str] = mapped_column(ForeignKey("steps.id"))
    number: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(128))
    device: Mapped[str] = mapped_column(String(512))
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    timeout_s: Mapped[int] = mapped_column(Integer)
    dispatch_count: Mapped[int] = mapped_column(Integer, default=0)
    dispatched_at: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)       # controller saw it start
    fio_started_at: Mapped[float | None] = mapped_column(Float)   # agent launched fio
    fio_ended_at: Mapped[float | None] = mapped_column(Float)     # fio's exit code was written
    ended_at: Mapped[float | None] = mapped_column(Float)         # result committed
    pid: Mapped[int | None] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    lost_at: Mapped[float | None] = mapped_column(Float)          # when its host was declared silent
    stop_cause: Mapped[str | None] = mapped_column(String(16))   # the controller asked it to stop: timeout | orphan
    step: Mapped[Step] = relationship(back_populates="attempts")
    result: Mapped[Result | None] = relationship(back_populates="attempt", uselist=False)
    artifacts: Mapped[list[Artifact]] = relationship(back_populates="attempt", order_by="Artifact.name")


def _fio_default(column: str | None, fio: Any, other: Any) -> Callable[[Any], Any]:
    """An insert default: for a fio row (also one written in schema 0009's shape, without ``kind``) the value
    of ``column`` (else ``fio``); for a row of another kind ``other``."""
    def default(context: Any) -> Any:
        row = context.get_current_parameters()
        if row.get("kind", "fio") != "fio":
            return other
        value = row.get(column) if column is not None else None
        return fio if value is None else value
    return default


class Result(Base):
    """The measured figures of one successful attempt, with provenance."""

    __tablename__ = "results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    attempt_id: Mapped[str] = mapped_column(ForeignKey("attempts.id"), unique=True)
    step_id: Mapped[str] = mapped_column(ForeignKey("steps.id"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    # kind-neutral (schema 0010): what measured, and its headline rate in its own unit
    # (a row written without them, the shape of schema 0009, is a fio result: see the defaults)
    kind: Mapped[str] = mapped_column(String(16), default="fio")   # fio | net | sysbench | pgbench | external
    tool: Mapped[str] = mapped_column(String(32), default="fio")   # fio, iscsi, sysbench, pgbench, an external's
    tool_version: Mapped[str] = mapped_column(String(128), default=_fio_default("fio_version", "", ""))  # "": unknown
    # the kind's headline rate: fio IOPS, net Gbps, sysbench / pgbench TPS, an external workload's own
    throughput: Mapped[float | None] = mapped_column(Float, default=_fio_default("iops", None, None))
    throughput_unit: Mapped[str] = mapped_column(String(16), default=_fio_default(None, "IOPS", ""))
    # fio's figures (a network result keeps its IOPS and bytes; an application result has none: NULL)
    read_iops: Mapped[float | None] = mapped_column(Float)
    write_iops: Mapped[float | None] = mapped_column(Float)
    iops: Mapped[float | None] = mapped_column(Float)
    read_bw_bytes: Mapped[float | None] = mapped_column(Float)
    write_bw_bytes: Mapped[float | None] = mapped_column(Float)
    bw_bytes: Mapped[float | None] = mapped_column(Float)
    lat_mean_ns: Mapped[float | None] = mapped_column(Float)      # kind-neutral
    lat_max_ns: Mapped[float | None] = mapped_column(Float)
    lat_stddev_ns: Mapped[float | None] = mapped_column(Float)
    lat_p99_ns: Mapped[float | None] = mapped_column(Float)       # kind-neutral
    runtime_ms: Mapped[int] = mapped_column(Integer)              # kind-neutral
    fio_version: Mapped[str | None] = mapped_column(String(32))   # fio results only (NULL for other kinds)
    metrics: Mapped[dict[str, Any]] = mapped_column()      # the kind's own: StepMetrics, net totals, AppResult
    per_device: Mapped[dict[str, Any] | None] = mapped_column()   # device path -> StepMetrics (groups)
    series: Mapped[dict[str, Any] | None] = mapped_column()       # per-second columns (precondition)
    per_path: Mapped[dict[str, Any] | None] = mapped_column()     # network step: path -> Gbps, IOPS, MTU...
    # fio json+ total-latency bins merged over the step's jobs (labcontract.fioresult.latency_bins):
    # {"read": [[ns, count], ...], "write": [...], "per_device": {path: {"read", "write"}}} (groups only),
    # "clat": {"read", "write"} (completion latency's bins; absent in results stored before it was kept);
    # None for network steps and results stored before schema 0009
    lat_hist: Mapped[dict[str, Any] | None] = mapped_column()
    provenance: Mapped[dict[str, Any]] = mapped_column()   # host facts + DUT at the time
    created_at: Mapped[float] = mapped_column(Float)
    attempt: Mapped[Attempt] = relationship(back_populates="result")


class Artifact(Base):
    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("attempt_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    attempt_id: Mapped[str] = mapped_column(ForeignKey("attempts.id"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    path: Mapped[str] = mapped_column(String(512))   # relative to the artifact root
    attempt: Mapped[Attempt] = relationship(back_populates="artifacts")


class PreconditionRecord(Base):
    """The steady-state record of one precondition group: every round's four metrics and the verdict."""

    __tablename__ = "preconditions"
    __table_args__ = (UniqueConstraint("run_id", "seq", name="uq_preconditions_run_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)                  # the plan position of its steps
    name: Mapped[str] = mapped_column(String(160))
    criteria: Mapped[dict[str, Any]] = mapped_column()         # window, limits, track, max_rounds
    rounds: Mapped[list[Any]] = mapped_column(default=list)    # per round: iops, lat_mean_ns, lat_max_ns, ...
    steady: Mapped[bool | None] = mapped_column(Boolean)       # None while running
    reached_round: Mapped[int | None] = mapped_column(Integer)
    verdict: Mapped[str] = mapped_column(Text, default="")
    ended_at: Mapped[float | None] = mapped_column(Float)


class NetGroup(Base):
    """A network cell: the steps of its target and initiators, started together. Totals cover only the
    window where every host measured (from the latest start to the earliest end)."""

    __tablename__ = "net_groups"
    __table_args__ = (UniqueConstraint("run_id", "seq", name="uq_net_groups_run_id_seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    seq: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(160))
    cell: Mapped[dict[str, Any]] = mapped_column()             # profile, mtu, paths (single | multi), tool
    hosts: Mapped[list[Any]] = mapped_column()                 # target first, then the initiators
    starts: Mapped[dict[str, Any]] = mapped_column()           # host -> epoch seconds its tools started
    skew_ms: Mapped[float | None] = mapped_column(Float)       # latest start - earliest start
    window_start: Mapped[float | None] = mapped_column(Float)
    window_end: Mapped[float | None] = mapped_column(Float)
    total: Mapped[dict[str, Any]] = mapped_column()            # over the window: initiator Gbps / IOPS, target Gbps
    per_path: Mapped[dict[str, Any]] = mapped_column()         # "host.path" -> Gbps, IOPS, MTU over the window
    per_host: Mapped[dict[str, Any]] = mapped_column()         # host -> role, Gbps, IOPS over the window
    failures: Mapped[list[Any]] = mapped_column()              # path failures, as the hosts recorded them
    complete: Mapped[bool] = mapped_column(Boolean)            # every host's step succeeded
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)


class Schedule(Base):
    """A recurring submission (e.g. a nightly regression): a cron expression and the submission it repeats."""

    __tablename__ = "schedules"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    cron: Mapped[str] = mapped_column(String(128))
    submit: Mapped[dict[str, Any]] = mapped_column()          # Submit fields without run id / times
    expires_after_s: Mapped[int | None] = mapped_column(Integer)
    next_fire_at: Mapped[float] = mapped_column(Float)
    last_fired_at: Mapped[float | None] = mapped_column(Float)
    last_run_id: Mapped[str | None] = mapped_column(String(32))
    last_error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    # schema 0013: why the controller disabled it ("": enabled); a disabled schedule never fires again until it is
    # removed and added anew (orchestrator.controller.boundary)
    disabled_reason: Mapped[str] = mapped_column(Text, default="")


class ApiToken(Base):
    """An API token of the web service: only its SHA-256 is stored (tokens are 256-bit random: no slow hash is
    needed). Written by the controller only (TokenCreate / TokenRevoke from the web service's stream)."""

    __tablename__ = "api_tokens"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))                 # viewer | engineer | admin
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(64), default="")
    expires_at: Mapped[float | None] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)


class ControllerLease(Base):
    """Exactly one controller writes the store: the holder of this row's lease. ``token`` grows by one at
    every take-over (the fencing token); a controller whose token is no longer the row's writes nothing."""

    __tablename__ = "controller_lease"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    token: Mapped[int] = mapped_column(BigInteger)
    acquired_at: Mapped[float] = mapped_column(Float)
    renewed_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    # schema 0019: the holder's heartbeat timeout, for readers to call a host down as it does (NULL: the default's).
    # Deferred: the lease is taken before the holder migrates, so taking it never reads or writes this column.
    heartbeat_timeout_s: Mapped[float | None] = mapped_column(Float, nullable=True, deferred=True)


class RegressionAck(Base):
    """A regression someone acknowledged (``labctl regressions ack``): not flagged again. ``regression_id`` is
    orchestrator.stats.history's stable id (its series and the run of the change). Written by the controller."""

    __tablename__ = "regression_acks"

    regression_id: Mapped[str] = mapped_column(String(12), primary_key=True)
    acknowledged_at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64), default="")
    reason: Mapped[str] = mapped_column(Text, default="")


class NotifySink(Base):
    """A notification sink the controller delivers (or delivered) the ends of runs to, and how that goes (schema
    0017, orchestrator.controller.sinkstate). Never a webhook's URL (it often holds its token): its scheme and host
    (``target``) and the key with 12 hex digits of its SHA-256. Written by the controller."""

    __tablename__ = "notify_sinks"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)   # 16 hex digits of the key's SHA-256
    key: Mapped[str] = mapped_column(Text)            # as in runs.notified_sinks: file:<path>, webhook:<hash>
    kind: Mapped[str] = mapped_column(String(16))     # file | webhook | chat
    target: Mapped[str] = mapped_column(Text)         # a file's path; a webhook's scheme://host/…
    origin: Mapped[str] = mapped_column(String(32))   # lab file | option
    active: Mapped[bool] = mapped_column(Boolean)     # in the running controller's configuration
    delivered: Mapped[int] = mapped_column(Integer, default=0)     # runs it took (since it was first configured)
    pending: Mapped[int] = mapped_column(Integer, default=0)       # runs handed to it and not taken yet
    last_success_at: Mapped[float | None] = mapped_column(Float)
    last_failure_at: Mapped[float | None] = mapped_column(Float)
    last_error: Mapped[str] = mapped_column(Text, default="")      # the reason of the last failure
    failing: Mapped[bool] = mapped_column(Boolean, default=False)  # its last attempt failed
    updated_at: Mapped[float] = mapped_column(Float)


def find_device(host: Host, device: str) -> Device | None:
    """A declared DUT of ``host`` by name, path or by-id link."""
    for d in host.devices:
        if device in (d.name, d.path, d.by_id) and d.declared:
            return d
    return None
