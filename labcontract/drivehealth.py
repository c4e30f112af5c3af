"""A drive's health read before and after each step: ``nvme smart-log`` (NVMe) or ``smartctl`` (SATA / SAS).

What reviews print beside the figures and what a lab engineer checks after a night of writes: the temperature,
the data written (NVMe counts units of 1,000 512-byte sectors), media and integrity errors, the critical warning
bits, the time spent over the warning and critical composite temperatures and the thermal throttle transitions.
The agent reads it around every fio step on its declared DUTs (``agents.drivehealth``) and sends it as the
attempt's ``drive-health.json``; the controller keeps it with the step's result (``provenance["drive_health"]``)
and the reports show it (``orchestrator.provenance``).

Everything here is read from a device's own output or from the wire: typed and bounded
(:class:`HealthSnapshot`), never trusted (:func:`parse_drive_health` refuses what does not fit).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labcontract.bounds import Epoch, FactId, FactPath, FactText
from labcontract.errors import ProtocolError

ARTIFACT = "drive-health.json"
MAX_DEVICES = 64                   # readings of one moment (a step's DUTs)
ARTIFACT_MAX_BYTES = 256 << 10     # the artifact as JSON
_M = TypeVar("_M", bound=BaseModel)
NVME_DATA_UNIT = 512_000           # bytes of one NVMe "data unit" (1,000 units of 512 bytes)

Counter = Annotated[int, Field(ge=0, le=1 << 64)]
Small = Annotated[int, Field(ge=0, le=255)]
Celsius = Annotated[int, Field(ge=-273, le=300)]


class HealthSnapshot(BaseModel):
    """One device's health at one moment; a field the device (or its tool) does not report is None."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["nvme smart-log", "smartctl"]
    temperature_c: Celsius | None = None
    critical_warning: Small | None = None          # NVMe bits: spare, temperature, reliability, read-only, backup
    percent_used: Small | None = None
    available_spare: Small | None = None
    data_units_read: Counter | None = None
    data_units_written: Counter | None = None
    host_read_commands: Counter | None = None
    host_write_commands: Counter | None = None
    media_errors: Counter | None = None
    error_log_entries: Counter | None = None
    unsafe_shutdowns: Counter | None = None
    power_on_hours: Counter | None = None
    warning_temp_minutes: Counter | None = None    # time over the warning composite temperature
    critical_temp_minutes: Counter | None = None
    throttle_transitions: Counter | None = None    # thermal management transitions (TMT1 + TMT2)
    throttle_seconds: Counter | None = None        # time in thermal management (TMT1 + TMT2)
    healthy: bool | None = None                    # smartctl's overall verdict


class HealthReading(BaseModel):
    """A declared DUT's health at one moment, or why it could not be read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: FactId                   # the declared DUT's name
    path: FactPath
    at: Epoch
    snapshot: HealthSnapshot | None = None
    error: FactText | None = None


class DriveHealth(BaseModel):
    """The readings around one attempt: before its process started and after it ended."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    before: Annotated[tuple[HealthReading, ...], Field(max_length=MAX_DEVICES)] = ()
    after: Annotated[tuple[HealthReading, ...], Field(max_length=MAX_DEVICES)] = ()


def parse_artifact(model: type[_M], raw: bytes, source: str, max_bytes: int = ARTIFACT_MAX_BYTES) -> _M:
    """An attempt's JSON artifact as ``model`` (ProtocolError naming ``source`` when it is over ``max_bytes`` or does
    not fit): drive-health.json here, host-power.json (labcontract.power)."""
    if len(raw) > max_bytes:
        raise ProtocolError(f"{source}: {len(raw)} bytes, over {max_bytes}")
    try:
        return model.model_validate_json(raw)
    except ValidationError as e:
        raise ProtocolError(f"{source}: {e.error_count()} problem(s): {e.errors()[0]['msg']}") from e


def parse_drive_health(raw: bytes, source: str = ARTIFACT) -> DriveHealth:
    """An attempt's ``drive-health.json`` (ProtocolError naming ``source`` when it is too big or does not fit)."""
    return parse_artifact(DriveHealth, raw, source)


# --------------------------------------------------------------------------- the tools' output


def _int(value: Any) -> int | None:
    """A counter as nvme-cli / smartctl print it: an int, a float, or a decimal string (nvme-cli prints 128-bit
    counters as strings on some versions); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        digits = value.replace(",", "").strip()
        return int(digits) if digits.isdigit() else None
    if isinstance(value, Mapping):           # nvme-cli 2.x prints some fields as {"value": n, ...}
        return _int(value.get("value"))
    return None


def _sum(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _kelvin(value: Any) -> int | None:
    """NVMe reports Kelvin (nvme-cli's JSON passes it through); a value under 200 is taken as Celsius already."""
    k = _int(value)
    if k is None or k == 0:
        return None
    return k - 273 if k >= 200 else k


def nvme_smart_snapshot(text: str) -> HealthSnapshot:
    """``nvme smart-log DEV -o json`` -> a snapshot (ValueError when it is not its JSON)."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("nvme smart-log printed no JSON object")
    return HealthSnapshot(
        source="nvme smart-log", temperature_c=_kelvin(data.get("temperature")),
        critical_warning=_int(data.get("critical_warning")), percent_used=_int(data.get("percent_used")),
        available_spare=_int(data.get("avail_spare")),
        data_units_read=_int(data.get("data_units_read")), data_units_written=_int(data.get("data_units_written")),
        host_read_commands=_int(data.get("host_read_commands")),
        host_write_commands=_int(data.get("host_write_commands")),
        media_errors=_int(data.get("media_errors")), error_log_entries=_int(data.get("num_err_log_entries")),
        unsafe_shutdowns=_int(data.get("unsafe_shutdowns")), power_on_hours=_int(data.get("power_on_hours")),
        warning_temp_minutes=_int(data.get("warning_temp_time")),
        critical_temp_minutes=_int(data.get("critical_comp_time")),
        throttle_transitions=_sum(_int(data.get("thm_temp1_trans_count")), _int(data.get("thm_temp2_trans_count"))),
        throttle_seconds=_sum(_int(data.get("thm_temp1_total_time")), _int(data.get("thm_temp2_total_time"))))


def smartctl_snapshot(text: str) -> HealthSnapshot:
    """``smartctl -H -A -j DEV`` -> a snapshot (ValueError when it is not its JSON)."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("smartctl printed no JSON object")
    status = data.get("smart_status")
    temp = data.get("temperature")
    hours = data.get("power_on_time")
    return HealthSnapshot(
        source="smartctl",
        temperature_c=_int(temp.get("current")) if isinstance(temp, dict) else None,
        healthy=status.get("passed") if isinstance(status, dict) and isinstance(status.get("passed"), bool) else None,
        power_on_hours=_int(hours.get("hours")) if isinstance(hours, dict) else None)


# --------------------------------------------------------------------------- what the reports say


def bytes_written(before: HealthSnapshot, after: HealthSnapshot) -> int | None:
    """Bytes the device says were written between the two snapshots (NVMe data units), None when unknown."""
    if before.data_units_written is None or after.data_units_written is None:
        return None
    return max(0, after.data_units_written - before.data_units_written) * NVME_DATA_UNIT


def grew(field: str, before: HealthSnapshot, after: HealthSnapshot) -> int | None:
    """How much a counter grew between the two snapshots (None when either does not report it)."""
    a, b = getattr(before, field), getattr(after, field)
    return None if a is None or b is None else b - a
