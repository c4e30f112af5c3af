"""Watts beside the figures: a step's host power (labcontract.power), IOPS per watt and MB/s per watt, and its
drives' temperature and thermal throttling around it (labcontract.drivehealth), as every report shows them.

A step whose host has no BMC declared, or whose BMC failed, reads "not measured" (with the reason when there is
one): a per-watt figure is never made up.
"""

from __future__ import annotations

from typing import Any

from labcontract.drivehealth import DriveHealth, grew
from labcontract.power import HostPower, describe, per_watt
from orchestrator.queries import RunDetail
from orchestrator.store.models import Result, Step

COLUMNS = ("step", "host power", "IOPS/W", "MB/s/W", "drive °C before → after", "throttle", "drive °C during")
NOT_MEASURED = "not measured"
POWER_METRICS = frozenset({"watts", "iops_per_w", "mb_s_per_w"})     # orchestrator.cellmetrics' power figures


def result_power(res: Result | None) -> HostPower | None:
    """The host power kept with a result (None: not sent, or unreadable)."""
    # (a light row of the history queries carries no provenance: no power)
    raw = (getattr(res, "provenance", None) or {}).get("power")
    if not isinstance(raw, dict):
        return None
    try:
        return HostPower.model_validate(raw)
    except ValueError:
        return None


def efficiency(res: Result | None) -> dict[str, float | None]:
    """``watts``, ``iops_per_w`` and ``mbs_per_w`` of a result (None each when power was not measured)."""
    power = result_power(res)
    if power is None:
        return {"watts": None, "peak_w": None, "iops_per_w": None, "mbs_per_w": None}
    iops = getattr(res, "iops", None)
    bw = getattr(res, "bw_bytes", None)
    mbs = bw / 1e6 if bw is not None else None
    return {"watts": power.avg_w if power is not None and power.measured else None,
            "peak_w": power.peak_w if power is not None and power.measured else None,
            "iops_per_w": per_watt(iops, power), "mbs_per_w": per_watt(mbs, power)}


def _health(res: Result | None) -> DriveHealth | None:
    raw = (res.provenance or {}).get("drive_health") if res is not None else None
    if not isinstance(raw, dict):
        return None
    try:
        return DriveHealth.model_validate(raw)
    except ValueError:
        return None


def drive_cells(res: Result | None) -> tuple[str, str]:
    """Per DUT its temperature before → after the step (``dut0 41 → 44``) and the thermal throttle transitions
    counted during it (``+0``); "-" when the drive was not read."""
    health = _health(res)
    if health is None:
        return "-", "-"
    after = {r.name: r for r in health.after}
    temps, throttles = [], []
    for b in health.before:
        a = after.get(b.name)
        if b.snapshot is None or a is None or a.snapshot is None:
            temps.append(f"{b.name} not read")
            continue
        t0, t1 = b.snapshot.temperature_c, a.snapshot.temperature_c
        temps.append(f"{b.name} {'-' if t0 is None else t0} → {'-' if t1 is None else t1}")
        g = grew("throttle_transitions", b.snapshot, a.snapshot)
        if g is not None:
            throttles.append(f"{b.name} +{g}" if len(health.before) > 1 else f"+{g}")
    return ", ".join(temps) or "-", ", ".join(throttles) or "-"


def _fmt(v: float | None, fmt: str) -> str:
    return NOT_MEASURED if v is None else fmt.format(v)


def row(step: Step, res: Result | None) -> list[str]:
    """A measured step's row of :data:`COLUMNS`."""
    eff = efficiency(res)
    temp, throttle = drive_cells(res)
    return [step.name, describe(result_power(res)), _fmt(eff["iops_per_w"], "{:,.1f}"),
            _fmt(eff["mbs_per_w"], "{:,.3f}"), temp, throttle, during(res)]


def drive_temps(res: Result | None) -> dict[str, dict[str, Any]]:
    """The result's per-second drive temperatures (labcontract.drivetemp.summary), per DUT; {} when none was read."""
    found = ((res.provenance or {}) if res is not None else {}).get("drive_temp")
    return {str(k): v for k, v in found.items() if isinstance(v, dict)} if isinstance(found, dict) else {}


def during(res: Result | None) -> str:
    """``nvme0 41-47 °C (avg 44.2, 60 readings)`` per DUT read every second during the step; ``-`` when none."""
    out = []
    for name, d in drive_temps(res).items():
        if d.get("samples"):
            out.append(f"{name} {d.get('min_c'):g}-{d.get('max_c'):g} °C (avg {d.get('avg_c'):g}, "
                       f"{d.get('samples')} readings)")
        else:
            out.append(f"{name} not read ({d.get('error') or 'no sensor'})")
    return ", ".join(out) or "-"


def rows(detail: RunDetail) -> list[list[str]]:
    """A row per measured fio step that has a result."""
    return [row(st, detail.results[st.id]) for st in detail.steps
            if st.kind == "measure" and st.id in detail.results and detail.results[st.id].kind == "fio"]


def figures(res: Result | None) -> dict[str, Any]:
    """What the HTML report and the API give of a result's power (JSON-ready)."""
    power = result_power(res)
    eff = efficiency(res)
    return {**eff, "power": describe(power), "measured": eff["watts"] is not None}
