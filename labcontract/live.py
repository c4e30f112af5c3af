"""Live status of a running step, as an agent sees it each second.

The agent's exporter turns it into Prometheus series; the agent also writes it to Redis
(``lab:live:<host>``, a few seconds' TTL) for ``labctl watch``. Neither is the results store.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


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


class LiveStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str
    attempt_id: str
    run_id: str
    step_id: str
    step_name: str
    suite: str
    phase: Literal["purge", "precondition", "measure"]
    round: int = 0
    started_at: float
    elapsed_s: float
    expected_s: float
    devices: tuple[DeviceLive, ...] = ()
    updated_at: float
