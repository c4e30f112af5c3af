"""The declared DUTs' temperature every second of a storage step, as the agent sends it (``drive-temp.json``) and
the reports draw it beside the per-second IOPS.

The agent reads each DUT's hwmon sensor (``temp1_input`` of the drive's hwmon device in sysfs: the kernel's
``nvme`` driver registers one per controller from the SMART / Health log, ``drivetemp`` one per SATA drive) once a
second while the step's process runs, in a thread of its own (agents.drivetemp). A DUT without a sensor (a loop
device, a drive whose driver registers none) is named with the reason; a host none of whose DUTs has one sends no
artifact, and its steps keep the drive health readings before and after (labcontract.drivehealth).

Untrusted as everything from the wire: a bounded number of DUTs and readings, finite temperatures from -60 to
200 °C, times within the step (:func:`parse_drive_temp`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from labcontract.bounds import MAX_SECONDS, FactId, FactText
from labcontract.drivehealth import parse_artifact

ARTIFACT = "drive-temp.json"
ARTIFACT_MAX_BYTES = 16 << 20     # 64 DUTs x 7,200 readings of about 12 bytes each, with room
MAX_DEVICES = 64
MAX_SERIES = 7_200                 # readings kept per DUT: every second for two hours; a longer step is thinned (every
                                   # other reading dropped, the interval doubled) so that it keeps its whole length
MIN_C, MAX_C = -60.0, 200.0        # beyond any drive's sensor range: a reading outside is the sensor's error
MAX_POINTS = 360                   # what the result row keeps of a series (each point the mean of its span)

Celsius = Annotated[float, Field(ge=MIN_C, le=MAX_C, allow_inf_nan=False)]
Offset = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)]


class DriveSeries(BaseModel):
    """One DUT's readings: seconds since the step's process started, and °C."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: FactId
    sensor: FactText                                             # the hwmon file read
    t: Annotated[tuple[Offset, ...], Field(max_length=MAX_SERIES)] = ()
    c: Annotated[tuple[Celsius, ...], Field(max_length=MAX_SERIES)] = ()
    failures: Annotated[int, Field(ge=0, le=MAX_SERIES * 64)] = 0
    error: FactText | None = None                                # the last failed reading's reason

    @model_validator(mode="after")
    def _paired(self) -> DriveSeries:
        if len(self.t) != len(self.c):
            raise ValueError(f"{self.name}: {len(self.t)} times for {len(self.c)} readings")
        return self


class Unmeasured(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: FactId
    reason: FactText


class DriveTemps(BaseModel):
    """An attempt's ``drive-temp.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_s: Annotated[float, Field(gt=0, le=60, allow_inf_nan=False)] = 1.0
    duts: Annotated[tuple[DriveSeries, ...], Field(max_length=MAX_DEVICES)] = ()
    not_measured: Annotated[tuple[Unmeasured, ...], Field(max_length=MAX_DEVICES)] = ()


def parse_drive_temp(raw: bytes, source: str = ARTIFACT) -> DriveTemps:
    """An attempt's ``drive-temp.json`` (ProtocolError naming ``source`` when it is too big or does not fit)."""
    return parse_artifact(DriveTemps, raw, source, ARTIFACT_MAX_BYTES)


def summary(temps: DriveTemps) -> dict[str, dict[str, object]]:
    """What a result keeps (``provenance["drive_temp"]``): per DUT the lowest, highest and mean °C, the readings, and
    the series in at most :data:`MAX_POINTS` points (each the mean of its span); a DUT without a sensor its reason."""
    out: dict[str, dict[str, object]] = {}
    for d in temps.duts:
        if not d.c:
            out[d.name] = {"samples": 0, "error": d.error or "no reading"}
            continue
        per = -(-len(d.c) // MAX_POINTS)
        ts = [round(sum(d.t[i:i + per]) / len(d.t[i:i + per]), 3) for i in range(0, len(d.t), per)]
        cs = [round(sum(d.c[i:i + per]) / len(d.c[i:i + per]), 2) for i in range(0, len(d.c), per)]
        out[d.name] = {"samples": len(d.c), "min_c": min(d.c), "max_c": max(d.c),
                       "avg_c": round(sum(d.c) / len(d.c), 2), "failures": d.failures, "t": ts, "c": cs}
    for u in temps.not_measured:
        out.setdefault(u.name, {"samples": 0, "error": u.reason})
    return out
