"""The fio workload of a step once its OP mode has been applied to the devices.

A suite's ``hp:<P>`` OP mode is planned as an emulation: the planner (``labcontract.suite.op_footprint``)
shrinks every cell's footprint to (100-P)% of the device. With ``phases.provision`` a ``dut_state`` step
(``playbooks/dut_state.yml``, module ``lab_dut``) applies the mode before the mode's fio steps, either on the
device (NVMe namespace resize ``nvme_ns``, ATA HPA ``ata_hpa``, SCSI ``scsi_resize``: the device itself is
then (100-P)% of its capacity) or with the ``footprint`` method (nothing changes on the device; the
emulation is what makes the mode).

When the mode was applied on the device, keeping the emulating footprint would measure (100-P)% of the
already reduced capacity. :func:`effective_workload` gives the workload fio must run instead: the cell's
own footprint, un-emulated (none: the whole device; a percentage: of the new capacity; an absolute size:
as the suite said), and the note saying how the mode was applied, which becomes the result's provenance
(``op_note``). The planned workload stays in the store; this is computed each time a step is started, so
precondition rounds appended later and re-sent starts get the same answer.

Pure: no store, no I/O. :func:`step_workload` collects the inputs from a run's rows (the caller passes how
to read an artifact).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import yaml
from pydantic import ValidationError

from labcontract.suite import SuiteDocument, Workload, WorkloadOptions, op_footprint
from labcontract.units import format_size
from orchestrator.states import StepState
from orchestrator.store.models import Run, Step

DEVICE_METHODS = frozenset({"nvme_ns", "ata_hpa", "scsi_resize"})   # OP applied by the device itself
OP_TASK = "Set the OP mode"                                          # the dut_state.yml task that sets it
DUT_STATE_ARTIFACT = "dut_state.json"
# provisioning.outcome_of's note: "...; set /dev/loop3: footprint (hp:20, capacity 53687091)"
_NOTE_OP = re.compile(r"(?:^|; )set (?P<device>.+?): (?P<method>[a-z_]+) \((?P<mode>stock|hp:\d+), "
                      r"capacity (?P<capacity>\d+|None)\)")


@dataclass(frozen=True)
class AppliedOp:
    """How ``lab_dut`` set one device's OP mode (one item of the ``Set the OP mode`` task)."""

    device: str
    op_mode: str
    method: str
    capacity_before: int | None = None
    capacity_after: int | None = None

    @property
    def on_device(self) -> bool:
        return self.method in DEVICE_METHODS

    def describe(self) -> str:
        if self.capacity_before is not None and self.capacity_after is not None \
                and self.capacity_before != self.capacity_after:
            return f"{self.device}: capacity {self.capacity_before} -> {self.capacity_after} bytes"
        if self.capacity_after is not None:
            return f"{self.device}: capacity {self.capacity_after} bytes"
        return self.device


class OpWorkload(NamedTuple):
    """What a step's start carries: the workload fio runs (None: the step has none) and the step's note."""

    workload: Workload | None
    note: str


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def applied_ops(results: Iterable[Mapping[str, Any]]) -> list[AppliedOp]:
    """The OP items of a ``dut_state.json`` artifact (``provisioning._dut_results``); purge items and
    failed items (they have a ``msg``) are left out."""
    out = []
    for r in results:
        if not isinstance(r, Mapping) or r.get("task") != OP_TASK or r.get("msg") or not r.get("op_mode") \
                or not r.get("method"):
            continue
        device = r.get("device")
        path = device.get("path") if isinstance(device, Mapping) else device
        out.append(AppliedOp(device=str(path or "?"), op_mode=str(r["op_mode"]), method=str(r["method"]),
                             capacity_before=_int(r.get("capacity_before")),
                             capacity_after=_int(r.get("capacity_after"))))
    return out


def applied_ops_from_note(note: str) -> list[AppliedOp]:
    """The same, read back from a ``dut_state`` step's note (when its artifact cannot be read)."""
    return [AppliedOp(device=m["device"], op_mode=m["mode"], method=m["method"],
                      capacity_after=None if m["capacity"] == "None" else int(m["capacity"]))
            for m in _NOTE_OP.finditer(note)]


def _normalised(value: object) -> str | None:
    return WorkloadOptions.model_validate({"footprint": value}).footprint


def suite_footprints(suite_text: str, cell: Mapping[str, Any]) -> list[str | None] | None:
    """The footprints the suite gives the cell's profile before any OP mode: the cell's own swept value
    (a measured cell names it), else every value the profile sweeps (a precondition step names only its
    profile), else the profile's or the defaults' fixed value (None: the whole device). None when the
    suite text or the profile cannot be read."""
    try:
        doc = SuiteDocument.model_validate(yaml.safe_load(suite_text))
        profile = next((p for p in doc.profiles if p.name == cell.get("profile")), None)
        if profile is None:
            return None
        if cell.get("footprint") is not None:
            return [_normalised(cell["footprint"])]
        if "footprint" in profile.sweep:
            return [_normalised(v) for v in profile.sweep["footprint"]]
    except (yaml.YAMLError, ValidationError, TypeError, AttributeError):
        return None
    return [profile.footprint if profile.footprint is not None else doc.defaults.footprint]


def _inverted(op_mode: str, emulated: str | None) -> str | None:
    """Undo ``op_footprint`` arithmetically (when the suite cannot tell): an absolute footprint was kept;
    a percentage was scaled by (100-P)/100, and (100-P)% itself stood for the whole device."""
    if emulated is None or op_mode == "stock" or not emulated.endswith("%"):
        return emulated
    usable = 100 - int(op_mode.split(":")[1])
    pct = float(emulated[:-1]) * 100 / usable
    return None if pct >= 100 - 1e-6 else f"{pct:.6g}%"


def planned_footprint(suite_text: str, cell: Mapping[str, Any], emulated: str | None) -> str | None:
    """The footprint of ``cell`` as the suite gave it, before its OP mode was emulated: the suite's value
    whose emulation is ``emulated`` (the step's stored footprint)."""
    op_mode = str(cell.get("op_mode") or "stock")
    if op_mode == "stock":
        return emulated
    for candidate in suite_footprints(suite_text, cell) or []:
        if op_footprint(op_mode, candidate)[0] == emulated:
            return candidate
    return _inverted(op_mode, emulated)


def _footprint_words(footprint: str | None) -> str:
    if footprint is None:
        return "fio runs on the whole device"
    if footprint.endswith("%"):
        return f"fio runs on {footprint} of the device"
    return f"fio keeps the absolute footprint {format_size(int(footprint))}"


def effective_workload(workload: Mapping[str, Any] | None, cell: Mapping[str, Any], note: str, suite_text: str,
                       applied: Sequence[AppliedOp]) -> OpWorkload:
    """The workload fio runs for a step, and the step's note.

    ``workload``, ``cell``, ``note``: the step's stored (planned) workload, cell and note; ``suite_text``:
    the run's suite; ``applied``: how the last successful ``dut_state`` step before this one set the OP
    mode on each of the run's devices (empty: the suite does not provision).

    - No OP applied on a device (no dut_state step, or the ``footprint`` method): the planned workload
      and note, unchanged; the footprint emulates the mode.
    - ``hp:<P>`` applied on every device (``nvme_ns``, ``ata_hpa``, ``scsi_resize``): the footprint is the
      suite's own (the device is already (100-P)% of its capacity) and the note names the method.
    - Applied on some devices of a group only: the devices share one job, so the emulation stays and
      the note says that the device-level ones are measured on less than the mode's capacity
      (``provisioning`` fails such a dut_state step, so this is only met in older runs).
    - ``stock`` applied on the device: the workload is unchanged (stock is never emulated); the note
      names the method.
    """
    if workload is None:
        return OpWorkload(None, note)
    planned = Workload.model_validate(dict(workload))
    op_mode = str(cell.get("op_mode") or "stock")
    ops = [a for a in applied if a.op_mode == op_mode]
    on_device = [a for a in ops if a.on_device]
    if not on_device:
        return OpWorkload(planned, note)
    methods = ", ".join(dict.fromkeys(a.method for a in on_device))
    where = "; ".join(a.describe() for a in on_device)
    if op_mode == "stock":
        return OpWorkload(planned, f"stock set on the device by {methods} ({where})")
    if len(on_device) < len(ops):
        footprint_only = ", ".join(a.device for a in ops if not a.on_device)
        warning = (f"{op_mode} applied on the device by {methods} ({where}) but by the footprint method on "
                   f"{footprint_only}: a device group shares one fio job, so the footprint limit stays and "
                   f"the resized devices are measured on less than {op_mode} leaves")
        return OpWorkload(planned, note if warning in note else f"{note}; {warning}" if note else warning)
    footprint = planned_footprint(suite_text, cell, planned.footprint)
    real = planned.model_copy(update={"footprint": footprint})
    return OpWorkload(real, f"{op_mode} applied on the device by {methods} ({where}); no footprint emulation: "
                            f"{_footprint_words(footprint)}")


def last_dut_state(run: Run, step: Step) -> Step | None:
    """The last successful ``dut_state`` step of ``step``'s OP mode before it (the one that set the mode
    it runs in), or None."""
    op_mode = step.cell.get("op_mode")
    done = [st for st in run.steps if st.kind == "dut_state" and st.state == StepState.SUCCEEDED
            and st.cell.get("op_mode") == op_mode and (st.seq, st.round) < (step.seq, step.round)]
    return max(done, key=lambda st: (st.seq, st.round), default=None)


def recorded_ops(dut_state: Step, read_artifact: Callable[[str], bytes]) -> list[AppliedOp]:
    """What a ``dut_state`` step recorded: its ``dut_state.json`` artifact, else its note."""
    for att in reversed(dut_state.attempts):
        if att.state != StepState.SUCCEEDED:
            continue
        art = next((a for a in att.artifacts if a.name == DUT_STATE_ARTIFACT), None)
        if art is None:
            break
        try:
            results = json.loads(read_artifact(art.path))
        except (OSError, ValueError):
            break
        if isinstance(results, list):
            return applied_ops(results)
        break
    return applied_ops_from_note(dut_state.note)


def step_workload(run: Run, step: Step, read_artifact: Callable[[str], bytes]) -> OpWorkload:
    """:func:`effective_workload` for a step of a run, from the store's rows; ``read_artifact`` reads an
    artifact by its path relative to the artifact root (``ArtifactStore.read``)."""
    before = last_dut_state(run, step) if step.workload is not None else None
    applied = recorded_ops(before, read_artifact) if before is not None else []
    return effective_workload(step.workload, step.cell, step.note, run.suite_text, applied)
