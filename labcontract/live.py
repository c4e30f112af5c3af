"""Live status of a running step, as an agent sees it each second.

The agent's exporter turns it into Prometheus series; the agent also writes it to Redis
(``lab:live:<host>``, a few seconds' TTL) for ``labctl watch``. Neither is the results store.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

#: A live application figure: finite, non-negative, bounded (a garbage value never reaches an exporter).
AppFigure = Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)]


class DirectionLive(BaseModel):
    model_config = ConfigDict(frozen=True)

    ios_total: int = 0                 # cumulative since the step started
    bytes_total: int = 0
    iops: float | None = None          # over the last interval
    lat_mean_ns: float | None = None   # over the last interval
    lat_max_ns: float | None = None
    lat_p99_ns: float | None = None


class DeviceLive(BaseModel):
    model_config = ConfigDict(frozen=True)

    device: str                        # the DUT path
    threads: int
    iodepth: int
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
    device: str = ""                   # the step's (first) DUT, as its start message names it (set by the agent)


class LiveStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str
    attempt_id: str
    run_id: str
    step_id: str
    step_name: str
    suite: str
    phase: Literal["purge", "precondition", "measure", "net", "app"]
    round: int = 0
    started_at: float
    elapsed_s: float
    expected_s: float
    devices: tuple[DeviceLive, ...] = ()
    updated_at: float
    app: AppLive | None = None         # an application step's last second (None: none yet, or not an app step)
