"""Live status of a running step, as an agent sees it each second.

The agent's exporter turns it into Prometheus series; the agent also writes it to Redis
(``lab:live:<host>``, a few seconds' TTL) for ``labctl watch``. Neither is the results store.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from labcontract.bounds import MAX_EPOCH, ByteCount, Count, Epoch, Figure, Seconds
from labcontract.stepkinds import AgentStepKindName

#: A live application figure: finite, non-negative, bounded (a garbage value never reaches an exporter).
AppFigure = Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)]


class DirectionLive(BaseModel):
    model_config = ConfigDict(frozen=True)

    ios_total: ByteCount = 0           # cumulative since the step started
    bytes_total: ByteCount = 0
    iops: Figure | None = None         # over the last interval
    lat_mean_ns: Figure | None = None  # over the last interval
    lat_max_ns: Figure | None = None
    lat_p99_ns: Figure | None = None


class DeviceLive(BaseModel):
    model_config = ConfigDict(frozen=True)

    device: Annotated[str, Field(max_length=512)]   # the DUT path
    threads: Count
    iodepth: Count
    read: DirectionLive = DirectionLive()
    write: DirectionLive = DirectionLive()


class AppLive(BaseModel):
    """One second of a running application step (``live.json`` in its attempt directory, rewritten each
    second by the step process): its point (threads / clients) and that second's figures."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    t: Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False)]    # epoch seconds of the figures
    point: Annotated[int, Field(ge=0, le=1 << 20)] | None = None
    tps: AppFigure | None = None
    qps: AppFigure | None = None
    lat_avg_ms: AppFigure | None = None
    lat_p95_ms: AppFigure | None = None
    lat_p99_ms: AppFigure | None = None
    errors_per_s: AppFigure | None = None
    device: Annotated[str, Field(max_length=512)] = ""   # the step's (first) DUT as its start message names it


Id = Annotated[str, Field(max_length=256)]


class LiveStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: Annotated[str, Field(max_length=64)]
    attempt_id: Id
    run_id: Id
    step_id: Id
    step_name: Id
    suite: Id
    phase: AgentStepKindName
    round: Annotated[int, Field(ge=-100_000, le=100_000)] = 0
    started_at: Epoch
    elapsed_s: Annotated[float, Field(ge=-MAX_EPOCH, le=MAX_EPOCH, allow_inf_nan=False)]   # wall clock: any step
    expected_s: Seconds
    devices: Annotated[tuple[DeviceLive, ...], Field(max_length=256)] = ()
    updated_at: Epoch
    app: AppLive | None = None         # an application step's last second (None: none yet, or not an app step)
