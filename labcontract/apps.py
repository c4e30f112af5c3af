"""Application workloads on the DUT: what a suite asks for, what a start message carries, and what the
step process (or an external command) writes back. Shared by the controller and the agent.

Three kinds:

- ``sysbench``: sysbench OLTP against a MariaDB server the agent starts itself, datadir on a filesystem
  made on the DUT (destructive: the interlock decides, as for a purge).
- ``pgbench``: pgbench against a PostgreSQL server the agent starts itself, PGDATA on the DUT.
- ``external``: a workload the host's administrator declared in the agent's configuration (command,
  parameter schema, timeout). A suite names it and passes typed parameters; it never carries a command.

A run of an application suite is, per OP mode: ``prepare`` (make the filesystem, initialise and load the
database, stop the server, unmount) and then one ``run`` step per point of the ladder (mount, start the
server on the prepared data, warm up, measure, stop, unmount). Each step leaves the server stopped and the
DUT unmounted, also on failure, cancel, timeout and agent restart.

The result contract (``app.json`` in the attempt directory) is :class:`AppResult`: named figures, optional
per-second series; bounded and typed like every other input from the wire.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

AppKind = Literal["sysbench", "pgbench", "external"]
APP_KINDS: tuple[str, ...] = ("sysbench", "pgbench", "external")
AppPhase = Literal["prepare", "run"]
Filesystem = Literal["ext4", "xfs"]

MAX_LADDER = 32                 # points in a thread / client ladder
MAX_THREADS = 1024              # sysbench threads / pgbench clients of one point
MAX_POINT_S = 86400             # one point's measured time
MAX_WARMUP_S = 3600
MAX_SERIES_POINTS = 100_000     # per-second values of one series (a day and more)
MAX_METRICS = 64
APP_RESULT_MAX_BYTES = 16 << 20  # app.json, as read from the attempt directory
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")          # a metric / parameter / series name
WORKLOAD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # an external workload's declared name

Name = Annotated[str, Field(pattern=NAME_RE.pattern)]
# a figure: finite and of a magnitude no metric reaches (1e15 ms of latency overflows nothing downstream)
Finite = Annotated[float, Field(allow_inf_nan=False, ge=-1e15, le=1e15)]
Threads = Annotated[int, Field(ge=1, le=MAX_THREADS)]
Ladder = Annotated[tuple[Annotated[int, Field(ge=1, le=MAX_THREADS, strict=True)], ...],
                   Field(min_length=1, max_length=MAX_LADDER, strict=False)]   # a YAML list; items strict ints
PointSeconds = Annotated[int, Field(ge=1, le=MAX_POINT_S)]
WarmupSeconds = Annotated[int, Field(ge=0, le=MAX_WARMUP_S)]
MAX_PARAM_CHARS = 256           # a string parameter of an external workload
ParamValue = (Annotated[str, Field(max_length=MAX_PARAM_CHARS)] | Annotated[int, Field(ge=-(1 << 63), le=(1 << 63) - 1)]
              | Annotated[float, Field(ge=-1e300, le=1e300, allow_inf_nan=False)] | bool)


def _unique(ladder: tuple[int, ...], what: str) -> tuple[int, ...]:
    if len(set(ladder)) != len(ladder):
        raise ValueError(f"{what} repeats a value: {list(ladder)}")
    return ladder


class SysbenchParams(BaseModel):
    """sysbench OLTP on MariaDB. ``threads`` is the ladder (a suite) or the one point (a start message)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    test: Literal["oltp_read_write", "oltp_read_only", "oltp_write_only", "oltp_point_select"] = "oltp_read_write"
    tables: Annotated[int, Field(ge=1, le=1024)] = 8
    table_size: Annotated[int, Field(ge=1, le=1_000_000_000)] = 100_000
    threads: Ladder = (2, 4, 8, 16, 32)
    time: PointSeconds = 60
    warmup: WarmupSeconds = 0
    buffer_pool_mb: Annotated[int, Field(ge=8, le=4 << 20)] = 128
    flush_method: Literal["O_DIRECT", "O_DIRECT_NO_FSYNC", "fsync", "O_DSYNC"] = "O_DIRECT"
    flush_log_at_trx_commit: Literal[0, 1, 2] = 1
    log_file_mb: Annotated[int, Field(ge=4, le=512 << 10)] = 96
    filesystem: Filesystem = "ext4"

    @model_validator(mode="after")
    def _ladder(self) -> SysbenchParams:
        _unique(self.threads, "threads")
        return self


class PgbenchParams(BaseModel):
    """pgbench on PostgreSQL. ``clients`` is the ladder (a suite) or the one point (a start message)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    builtin: Literal["tpcb-like", "simple-update", "select-only"] = "tpcb-like"
    scale: Annotated[int, Field(ge=1, le=100_000)] = 10
    clients: Ladder = (2, 4, 8, 16, 32)
    time: PointSeconds = 60
    warmup: WarmupSeconds = 0
    shared_buffers_mb: Annotated[int, Field(ge=1, le=4 << 20)] = 128
    synchronous_commit: Literal["on", "off"] = "on"
    filesystem: Filesystem = "ext4"

    @model_validator(mode="after")
    def _ladder(self) -> PgbenchParams:
        _unique(self.clients, "clients")
        return self


class ExternalParams(BaseModel):
    """A declared external workload by name, with typed parameters (checked on the agent against the
    declaration's schema). ``params`` values are scalars, never a command line."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    workload: Annotated[str, Field(pattern=WORKLOAD_RE.pattern)]
    params: Annotated[dict[Name, ParamValue], Field(max_length=64)] = {}
    time: PointSeconds = 60        # the point's expected length (the step's timeout adds the declared one)


class AppStart(BaseModel):
    """The application part of a start message (action ``app``). ``point`` is the thread / client count of
    a ``run`` step (0 for ``prepare``); the params carry the suite's values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: AppKind
    phase: AppPhase
    point: Annotated[int, Field(ge=0, le=MAX_THREADS)] = 0
    # the OP mode's emulated footprint: the filesystem covers only the first fs_size_bytes of the DUT
    # (None: the whole device). Device-level OP (provisioning) leaves this None.
    fs_size_bytes: Annotated[int, Field(ge=64 << 20, le=1 << 60)] | None = None
    sysbench: SysbenchParams | None = None
    pgbench: PgbenchParams | None = None
    external: ExternalParams | None = None

    @model_validator(mode="after")
    def _consistent(self) -> AppStart:
        given = [k for k in APP_KINDS if getattr(self, k) is not None]
        if given != [self.kind]:
            raise ValueError(f"an app start of kind {self.kind} carries exactly its own params (got {given})")
        if self.kind != "external" and self.phase == "run" and self.point < 1:
            raise ValueError("a run step names its point (threads / clients >= 1)")
        return self


class AppResult(BaseModel):
    """What an application step writes to ``app.json``: the tool, its figures, optional per-second series.

    Conventional metric names (reports and exports know them; others are kept and shown as given):
    ``tps``, ``qps``, ``lat_avg_ms``, ``lat_p95_ms``, ``lat_p99_ms``, ``lat_max_ms``, ``errors``,
    ``reconnects``, ``transactions``. Series: ``tps`` (per second), others by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,31}$")]
    tool_version: Annotated[str, Field(max_length=128)] = "unknown"
    server_version: Annotated[str, Field(max_length=128)] = ""
    metrics: Annotated[dict[Name, Finite], Field(max_length=MAX_METRICS)]
    series: Annotated[dict[Name, Annotated[list[Finite], Field(max_length=MAX_SERIES_POINTS)]],
                      Field(max_length=8)] = {}
    seconds: Annotated[float, Field(ge=0, le=30 * 86400, allow_inf_nan=False)] = 0.0
    notes: Annotated[dict[Name, Annotated[str, Field(max_length=1024)]], Field(max_length=32)] = {}


MAX_APP_STEP_S = 20 * 86400     # under the protocol's step timeout ceiling with the controller's margins


def expected_seconds(app: AppStart) -> int:
    """See :func:`_expected_seconds`; at most :data:`MAX_APP_STEP_S`."""
    return min(_expected_seconds(app), MAX_APP_STEP_S)


def _expected_seconds(app: AppStart) -> int:
    """How long a step of ``app`` may take before the controller stops it: a point's warm-up and measured time
    plus the server's start and stop; a prepare by the rows it loads (conservatively 2,000 rows/s, at least
    10 minutes). An external workload's declared timeout applies on the agent besides this."""
    if app.sysbench is not None:
        p = app.sysbench
        if app.phase == "prepare":
            return 600 + p.tables * p.table_size // 2000
        return p.warmup + p.time + 300
    if app.pgbench is not None:
        q = app.pgbench
        if app.phase == "prepare":
            return 600 + q.scale * 100_000 // 2000
        return q.warmup + q.time + 300
    assert app.external is not None
    return app.external.time + 600
