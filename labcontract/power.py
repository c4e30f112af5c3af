"""A host's power during a step, read from its BMC (Redfish), as the agent sends it and the reports show it.

The agent of a host whose BMC is declared in its configuration (``labctl agent --bmc FILE``, agents.power) reads
the chassis' power once a second while a storage step's process runs and sends what it read as the attempt's
``host-power.json``: the average, lowest and highest watts, how many readings it got of how many seconds the step
lasted, the per-second series, and why readings failed. The controller keeps it with the step's result
(``provenance["power"]``) and the reports put IOPS per watt and MB/s per watt beside the step's figures
(orchestrator.power). A host without a BMC sends none: its power reads "not measured".

Everything here comes from a BMC and then from the wire: typed and bounded (finite watts of at least 0 and at
most :data:`MAX_WATTS`, a bounded series), refused as a whole when it does not fit (:func:`parse_host_power`).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from labcontract.bounds import MAX_COUNT, MAX_SECONDS, Epoch, FactText
from labcontract.drivehealth import parse_artifact

ARTIFACT = "host-power.json"
ARTIFACT_MAX_BYTES = 256 << 10
MAX_WATTS = 100_000.0              # no server draws 100 kW: a reading over it is the BMC's error, refused
MAX_SERIES = 7_200                 # per-second readings kept (two hours); longer steps keep the summary only
MIN_COVERAGE = 0.5                 # under half the step's seconds read: the figure says so beside it

Watts = Annotated[float, Field(ge=0.0, le=MAX_WATTS, allow_inf_nan=False)]


class BmcFields(BaseModel):
    """What declares a host's BMC, but its secrets: the agent's ``--bmc`` file adds ``password_file`` and
    ``ca_file`` (agents.power.BmcConfig), the inventory's ``lab_agent_bmc`` ``password`` and ``ca_src``
    (labcontract.inventory_models.InventoryBmc, which playbooks/roles/lab_agent writes into that file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: Annotated[str, Field(max_length=512)]
    user: Annotated[str, Field(min_length=1, max_length=128)]
    verify_tls: bool = True
    chassis: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")] | None = None
    timeout_s: Annotated[float, Field(gt=0, le=30, allow_inf_nan=False)] = 2.0
    interval_s: Annotated[float, Field(ge=0.2, le=60, allow_inf_nan=False)] = 1.0

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError("must be an https:// (or http://) URL naming the BMC")
        if parts.username or parts.password:
            raise ValueError("must not hold credentials (user, password_file)")
        if parts.query or parts.fragment:
            raise ValueError("must name the service only (no query or fragment)")
        return v.rstrip("/")
Reading = Literal["Power.PowerControl", "EnvironmentMetrics.PowerWatts"]


class HostPower(BaseModel):
    """What the BMC said of the host's power while one step's process ran (``samples`` == 0: not measured, and
    ``error`` says why)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["redfish"] = "redfish"
    endpoint: FactText                       # the BMC's URL and chassis, never its credentials
    reading: Reading | None = None           # which Redfish property was read
    interval_s: Annotated[float, Field(gt=0, le=60, allow_inf_nan=False)] = 1.0
    started_at: Epoch | None = None
    ended_at: Epoch | None = None
    seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)] = 0.0   # the process ran this long
    samples: Annotated[int, Field(ge=0, le=MAX_COUNT * 64)] = 0     # readings that succeeded
    failures: Annotated[int, Field(ge=0, le=MAX_COUNT * 64)] = 0    # readings that failed (error: the last reason)
    avg_w: Watts | None = None
    min_w: Watts | None = None
    peak_w: Watts | None = None
    series: Annotated[tuple[Watts, ...], Field(max_length=MAX_SERIES)] = ()
    error: FactText | None = None

    @property
    def measured(self) -> bool:
        return self.samples > 0 and self.avg_w is not None

    @property
    def coverage(self) -> float:
        """The share of the step's seconds that have a reading (0..1)."""
        expected = max(1, math.floor(self.seconds / self.interval_s + 1e-9)) if self.seconds > 0 else 1
        return min(1.0, self.samples / expected)


def summarise(endpoint: str, reading: Reading | None, interval_s: float, started_at: float, ended_at: float,
              samples: list[float], failures: int, error: str | None) -> HostPower:
    """A step's power from its readings (finite watts within bounds; anything else was counted as a failure)."""
    keep = [w for w in samples if math.isfinite(w) and 0.0 <= w <= MAX_WATTS]
    failures += len(samples) - len(keep)
    seconds = max(0.0, ended_at - started_at)
    if not keep:
        return HostPower(endpoint=endpoint, reading=reading, interval_s=interval_s, started_at=started_at,
                         ended_at=ended_at, seconds=seconds, failures=failures,
                         error=error or "no reading during the step")
    return HostPower(endpoint=endpoint, reading=reading, interval_s=interval_s, started_at=started_at,
                     ended_at=ended_at, seconds=seconds, samples=len(keep), failures=failures,
                     avg_w=sum(keep) / len(keep), min_w=min(keep), peak_w=max(keep),
                     series=tuple(keep[:MAX_SERIES]), error=error)


def not_measured(endpoint: str, why: str) -> HostPower:
    return HostPower(endpoint=endpoint, error=why)


def parse_host_power(raw: bytes, source: str = ARTIFACT) -> HostPower:
    """An attempt's ``host-power.json`` (ProtocolError naming ``source`` when it is too big or does not fit)."""
    return parse_artifact(HostPower, raw, source, ARTIFACT_MAX_BYTES)


def describe(power: HostPower | None) -> str:
    """``344 W avg, 489 W peak (60 of 61 s read)`` or ``not measured (why)``: what a report prints."""
    if power is None:
        return "not measured"
    if not power.measured or power.avg_w is None or power.peak_w is None:
        return f"not measured ({power.error or 'no reading'})"
    expected = max(power.samples, round(power.seconds / power.interval_s))
    text = f"{power.avg_w:,.0f} W avg, {power.peak_w:,.0f} W peak ({power.samples} of {expected} s read"
    if power.coverage < MIN_COVERAGE:
        text += ", under half the step"
    return text + ")"


def per_watt(value: float | None, power: HostPower | None) -> float | None:
    """``value`` (IOPS, MB/s) per average watt; None when power was not measured."""
    if value is None or power is None or not power.measured or not power.avg_w:
        return None
    return value / power.avg_w
