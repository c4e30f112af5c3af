"""OP modes applied on the device (orchestrator/runs/opmode.py): the workload fio runs after a dut_state step
set the mode, and the note that becomes the result's provenance; the dut_state outcome that refuses a group
whose devices were set by different methods (orchestrator/runs/provisioning.py)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from labcontract.fiojob import render_job
from labcontract.suite import Workload, parse_suite
from orchestrator.runs.opmode import (
    AppliedOp,
    applied_ops,
    applied_ops_from_note,
    effective_workload,
    last_dut_state,
    planned_footprint,
    step_workload,
    suite_footprints,
)
from orchestrator.runs.planner import PlannedStep, plan
from orchestrator.runs.provisioning import _Job, mixed_op_methods, outcome_of
from orchestrator.store.models import Artifact, Attempt, Run, Step

SUITE = """\
suite: op-twice
op_modes: [stock, "hp:20"]
defaults: {runtime: 1s}
phases: {purge: true, provision: true, precondition: {round: 1s, max_rounds: 2}}
profiles:
  - {name: whole, rw: randread, bs: 4k}
  - {name: pct, rw: randread, bs: 4k, footprint: 20%, ladder: {numjobs: [1, 2]}}
  - {name: abs, rw: randwrite, bs: 4k, footprint: 1g}
  - {name: swept, rw: read, bs: 128k, sweep: {footprint: [50%, 100%]}}
"""
DEFAULTED = """\
suite: defaulted
op_modes: ["hp:30"]
defaults: {runtime: 1s, footprint: 50%}
profiles:
  - {name: a, rw: randread, bs: 4k}
"""
DEV = "/dev/disk/by-id/nvme-VENDOR_MODEL_S1"
NVME = AppliedOp(DEV, "hp:20", "nvme_ns", 3840755982336, 3072604782592)
EMULATION = "hp:20 emulated by a footprint limit (80% of capacity usable); no device OP applied"


def planned(suite_text: str = SUITE) -> list[PlannedStep]:
    return plan(parse_suite(suite_text, "s.yaml"), [DEV])


def step_named(steps: list[PlannedStep], name: str) -> PlannedStep:
    return next(p for p in steps if p.name == name)


def effective(p: PlannedStep, applied: list[AppliedOp], suite_text: str = SUITE) -> tuple[Workload | None, str]:
    wl = p.workload.model_dump(mode="json") if p.workload else None
    return effective_workload(wl, p.cell, p.note, suite_text, applied)


# --- the workload ----------------------------------------------------------------------------------------


def test_without_a_device_level_method_the_emulation_stays() -> None:
    steps = planned()
    hp = step_named(steps, "hp20.pct.t1")
    for applied in ([], [AppliedOp(DEV, "hp:20", "footprint", 10 << 30, 10 << 30)]):
        workload, note = effective(hp, applied)
        assert workload == hp.workload and workload is not None and workload.footprint == "16%"
        assert note == hp.note == EMULATION


@pytest.mark.parametrize(("name", "footprint", "words"), [
    ("hp20.whole", None, "fio runs on the whole device"),
    ("precondition.hp20.whole.round1", None, "fio runs on the whole device"),
    ("hp20.pct.t2", "20%", "fio runs on 20% of the device"),
    ("precondition.hp20.pct.round1", "20%", "fio runs on 20% of the device"),
    ("hp20.abs", "1073741824", "fio keeps the absolute footprint 1g"),
    ("hp20.swept.footprint-50%", "50%", "fio runs on 50% of the device"),
    ("precondition.hp20.swept.footprint-50%.round1", "50%", "fio runs on 50% of the device"),
    ("hp20.swept.footprint-100%", "100%", "fio runs on 100% of the device"),
    ("precondition.hp20.swept.footprint-100%.round1", "100%", "fio runs on 100% of the device"),
])
def test_a_device_level_method_gives_back_the_suites_own_footprint(name: str, footprint: str | None,
                                                                    words: str) -> None:
    p = step_named(planned(), name)
    workload, note = effective(p, [NVME])
    assert workload is not None and p.workload is not None
    assert workload.footprint == footprint
    assert workload == p.workload.model_copy(update={"footprint": footprint})     # nothing else changes
    assert note == (f"hp:20 applied on the device by nvme_ns ({DEV}: capacity 3840755982336 -> 3072604782592 "
                    f"bytes); no footprint emulation: {words}")


def test_every_hp_step_then_runs_what_its_stock_twin_runs() -> None:
    steps = planned()
    stock = {p.name.replace("stock", "MODE", 1): p for p in steps if p.cell.get("op_mode") == "stock" and p.workload}
    hp = [p for p in steps if p.cell.get("op_mode") == "hp:20" and p.workload]
    assert len(hp) == len(stock) == 11
    for p in hp:
        twin = stock[p.name.replace("hp20", "MODE", 1)]
        workload, _note = effective(p, [NVME])
        assert workload is not None and twin.workload is not None
        assert workload.footprint == twin.workload.footprint, p.name
        assert render_job(workload, [DEV]) == render_job(twin.workload.model_copy(update={"name": p.name}), [DEV])


def test_the_whole_device_job_has_no_size_line() -> None:
    p = step_named(planned(), "hp20.whole")
    assert p.workload is not None and "size=80%" in p.job_text
    workload, _note = effective(p, [NVME])
    assert workload is not None and "size=" not in render_job(workload, [DEV])


def test_a_footprint_from_the_defaults_is_recovered() -> None:
    p = planned(DEFAULTED)[0]
    assert p.workload is not None and p.workload.footprint == "35%"
    workload, note = effective(p, [AppliedOp(DEV, "hp:30", "ata_hpa", 1000, 700)], DEFAULTED)
    assert workload is not None and workload.footprint == "50%"
    assert note.startswith("hp:30 applied on the device by ata_hpa (") and "1000 -> 700 bytes" in note


def test_every_device_of_a_group_resized() -> None:
    p = step_named(planned(), "hp20.whole")
    applied = [AppliedOp("/dev/sdb", "hp:20", "scsi_resize", 800, 640), AppliedOp("/dev/sdc", "hp:20", "scsi_resize",
                                                                                 800, 640)]
    workload, note = effective(p, applied)
    assert workload is not None and workload.footprint is None
    assert "by scsi_resize (/dev/sdb: capacity 800 -> 640 bytes; /dev/sdc: capacity 800 -> 640 bytes)" in note


def test_a_group_set_by_different_methods_keeps_the_emulation_and_says_so() -> None:
    p = step_named(planned(), "hp20.pct.t1")
    applied = [NVME, AppliedOp("/dev/nvme1n1", "hp:20", "footprint", 100, 100)]
    workload, note = effective(p, applied)
    assert workload == p.workload
    assert note.startswith(EMULATION + "; hp:20 applied on the device by nvme_ns (")
    assert "but by the footprint method on /dev/nvme1n1" in note
    again = effective_workload(p.workload.model_dump(mode="json") if p.workload else None, p.cell, note, SUITE,
                               applied)
    assert again.note == note                  # a later round copies the note: not repeated


def test_stock_is_never_emulated_but_its_method_is_noted() -> None:
    p = step_named(planned(), "stock.pct.t1")
    workload, note = effective(p, [AppliedOp(DEV, "stock", "nvme_ns", 3072604782592, 3840755982336)])
    assert workload == p.workload and workload is not None and workload.footprint == "20%"
    assert note == f"stock set on the device by nvme_ns ({DEV}: capacity 3072604782592 -> 3840755982336 bytes)"
    assert effective(p, [AppliedOp(DEV, "stock", "footprint", 5, 5)]) == (p.workload, "")


def test_records_of_another_op_mode_are_ignored() -> None:
    p = step_named(planned(), "hp20.whole")
    assert effective(p, [AppliedOp(DEV, "hp:10", "nvme_ns", 10, 9)]) == (p.workload, EMULATION)


def test_a_step_without_workload_passes_through() -> None:
    p = step_named(planned(), "dut-state.hp20.whole")
    assert effective(p, [NVME]) == (None, "")


def test_an_unchanged_device_names_its_capacity_once() -> None:
    p = step_named(planned(), "hp20.whole")
    _workload, note = effective(p, [AppliedOp(DEV, "hp:20", "nvme_ns", 3072604782592, 3072604782592)])
    assert f"({DEV}: capacity 3072604782592 bytes)" in note


# --- recovering the footprint ----------------------------------------------------------------------------


def test_suite_footprints_per_cell() -> None:
    assert suite_footprints(SUITE, {"profile": "whole"}) == [None]
    assert suite_footprints(SUITE, {"profile": "pct", "numjobs": 1}) == ["20%"]
    assert suite_footprints(SUITE, {"profile": "abs"}) == ["1073741824"]
    assert suite_footprints(SUITE, {"profile": "swept"}) == ["50%", "100%"]
    assert suite_footprints(SUITE, {"profile": "swept", "footprint": "100%"}) == ["100%"]
    assert suite_footprints(SUITE, {"profile": "nope"}) is None
    assert suite_footprints("not: [valid", {"profile": "whole"}) is None
    assert suite_footprints("suite: x\n", {"profile": "whole"}) is None


@pytest.mark.parametrize(("op_mode", "emulated", "original"), [
    ("hp:20", "80%", None), ("hp:20", "16%", "20%"), ("hp:20", "1073741824", "1073741824"),
    ("hp:7", "31%", "33.3333%"), ("hp:90", "10%", None), ("hp:50", "0.5%", "1%"), ("stock", "20%", "20%"),
    ("stock", None, None),
])
def test_without_a_readable_suite_the_emulation_is_inverted(op_mode: str, emulated: str, original: str | None) -> None:
    assert planned_footprint("", {"op_mode": op_mode, "profile": "x"}, emulated) == original


def test_the_suite_tells_100_percent_from_the_whole_device() -> None:
    # both emulate to 80% under hp:20; only the suite knows which one the cell asked for
    cell = {"op_mode": "hp:20", "profile": "swept"}
    assert planned_footprint(SUITE, cell, "80%") == "100%"
    assert planned_footprint(SUITE, {"op_mode": "hp:20", "profile": "whole"}, "80%") is None
    assert planned_footprint("", cell, "80%") is None


# --- what the dut_state step recorded --------------------------------------------------------------------


def op_item(path: str, method: str, mode: str = "hp:20", before: int = 1000, after: int = 800) -> dict[str, Any]:
    return {"changed": True, "method": method, "op_mode": mode, "device": {"path": path, "real_path": path},
            "capacity_before": before, "capacity_after": after, "footprint_bytes": after, "commands": []}


def purge_item(path: str) -> dict[str, Any]:
    return {"changed": True, "method": "blkdiscard", "device": {"path": path, "real_path": path},
            "capacity_before": 1000, "capacity_after": 1000, "commands": ["blkdiscard /dev/x"]}


class FakeRunner:
    """What ansible-runner leaves after a dut_state.yml run: status, rc, stats and the item events."""

    def __init__(self, items: list[tuple[str, dict[str, Any], bool]], status: str = "successful") -> None:
        self.status, self.rc, self.stats = status, 0 if status == "successful" else 2, {"changed": {"h": 2}}
        self.events = [{"event": "runner_item_on_failed" if failed else "runner_item_on_ok",
                        "event_data": {"task": task, "res": res}} for task, res, failed in items]


def dut_state_outcome(tmp_path: Path, items: list[tuple[str, dict[str, Any], bool]]) -> Any:
    (tmp_path / "out").mkdir(exist_ok=True)
    return outcome_of(_Job("r1", "dut-state.hp20", "h", "dut_state", tmp_path, threading.Thread(), FakeRunner(items)))


def test_the_artifact_and_the_note_tell_the_same(tmp_path: Path) -> None:
    out = dut_state_outcome(tmp_path, [("Purge DUTs", purge_item("/dev/a"), False),
                                       ("Set the OP mode", op_item("/dev/a", "nvme_ns"), False),
                                       ("Set the OP mode", op_item("/dev/b:1", "nvme_ns", before=5, after=4), False)])
    assert out.ok, out.reason
    from_artifact = applied_ops(json.loads(out.artifacts["dut_state.json"]))
    assert from_artifact == [AppliedOp("/dev/a", "hp:20", "nvme_ns", 1000, 800),
                             AppliedOp("/dev/b:1", "hp:20", "nvme_ns", 5, 4)]
    assert applied_ops_from_note(out.note) == [AppliedOp("/dev/a", "hp:20", "nvme_ns", None, 800),
                                               AppliedOp("/dev/b:1", "hp:20", "nvme_ns", None, 4)]


def test_failed_and_purge_items_are_not_applied_ops() -> None:
    failed = {**op_item("/dev/a", "nvme_ns"), "msg": "refusing op_mode on /dev/a: mounted"}
    assert applied_ops([purge_item("/dev/a"), {"task": "Set the OP mode", **failed}, "junk"]) == []  # type: ignore[list-item]
    assert applied_ops([{"task": "Set the OP mode", **op_item("/dev/a", "nvme_ns"), "capacity_after": None}]) == [
        AppliedOp("/dev/a", "hp:20", "nvme_ns", 1000, None)]
    assert applied_ops_from_note("purge /dev/a: blkdiscard; set /dev/a: footprint (hp:20, capacity None)") == [
        AppliedOp("/dev/a", "hp:20", "footprint", None, None)]


def test_a_group_resized_on_some_devices_only_fails_its_dut_state_step(tmp_path: Path) -> None:
    out = dut_state_outcome(tmp_path, [("Set the OP mode", op_item("/dev/a", "nvme_ns"), False),
                                       ("Set the OP mode", op_item("/dev/b", "footprint"), False)])
    assert not out.ok
    assert out.reason.startswith("hp:20 was set on some devices of the group only (/dev/a: nvme_ns; /dev/b: "
                                 "footprint)")
    assert "same op_methods" in out.reason
    assert mixed_op_methods([{"task": "Set the OP mode", **op_item("/dev/a", "nvme_ns", mode="stock")},
                             {"task": "Set the OP mode", **op_item("/dev/b", "footprint", mode="stock")}]) == []
    assert mixed_op_methods([{"task": "Set the OP mode", **op_item("/dev/a", "footprint")}] * 2) == []


# --- from the store's rows (what the controller has when it builds a StartStep) ----------------------------


def make_run(suite_text: str = SUITE) -> Run:
    run = Run(id="r1", suite_name="op-twice", suite_source="s.yaml", suite_text=suite_text, suite_sha256="x",
              host="h", device=DEV, devices=[DEV], state="RUNNING", submitted_at=0.0)
    for p in planned(suite_text):
        run.steps.append(Step(id=f"r1-s{p.seq:03d}", seq=p.seq, round=1 if p.kind == "precondition" else 0,
                              kind=p.kind, name=p.name, cell=dict(p.cell), note=p.note,
                              workload=p.workload.model_dump(mode="json") if p.workload else None,
                              job_text=p.job_text, state="PENDING"))
    return run


def finish(step: Step, artifacts: dict[str, bytes], store: dict[str, bytes], note: str = "") -> None:
    att = Attempt(id=f"{step.id}-a1", number=1, host="h", device=DEV, state="SUCCEEDED", timeout_s=60)
    for name, data in artifacts.items():
        path = f"{step.id}/{name}"
        store[path] = data
        att.artifacts.append(Artifact(name=name, sha256="x", size=len(data), path=path))
    step.attempts.append(att)
    step.state, step.note = "SUCCEEDED", note


def by_name(run: Run, name: str) -> Step:
    return next(st for st in run.steps if st.name == name)


def test_step_workload_reads_the_last_dut_state_of_the_op_mode() -> None:
    run, store = make_run(), dict[str, bytes]()
    # stock set by the footprint method; hp:20 of the whole profile by nvme_ns
    finish(by_name(run, "dut-state.stock.whole"),
           {"dut_state.json": json.dumps([{"task": "Set the OP mode", **op_item(DEV, "footprint", "stock")}]).encode()},
           store)
    finish(by_name(run, "dut-state.hp20.whole"),
           {"dut_state.json": json.dumps([{"task": "Set the OP mode", **op_item(DEV, "nvme_ns")}]).encode()}, store)
    measure = by_name(run, "hp20.whole")
    assert last_dut_state(run, measure) is by_name(run, "dut-state.hp20.whole")
    workload, note = step_workload(run, measure, store.__getitem__)
    assert workload is not None and workload.footprint is None and "by nvme_ns" in note
    # the stock steps: their own dut_state, footprint method, unchanged
    stock = by_name(run, "stock.pct.t1")
    assert step_workload(run, stock, store.__getitem__) == (Workload.model_validate(stock.workload), "")
    # a later hp:20 group whose dut_state has not run yet: the last one of hp:20 before it applies
    pct = by_name(run, "hp20.pct.t1")
    assert last_dut_state(run, pct) is by_name(run, "dut-state.hp20.whole")
    assert step_workload(run, pct, store.__getitem__).workload.footprint == "20%"  # type: ignore[union-attr]
    # it ran with the footprint method: back to the emulation
    finish(by_name(run, "dut-state.hp20.pct"),
           {"dut_state.json": json.dumps([{"task": "Set the OP mode", **op_item(DEV, "footprint")}]).encode()}, store)
    assert step_workload(run, pct, store.__getitem__) == (Workload.model_validate(pct.workload), EMULATION)
    # a step before any dut_state of its mode, and one without workload
    assert last_dut_state(run, by_name(run, "dut-state.hp20.whole")) is None
    assert step_workload(run, by_name(run, "facts.after"), store.__getitem__) == (None, "")


def test_an_unreadable_artifact_falls_back_to_the_note() -> None:
    run, store = make_run(), dict[str, bytes]()
    dut_state = by_name(run, "dut-state.hp20.whole")
    finish(dut_state, {"dut_state.json": b"{not json"}, store,
           note=f"purge {DEV}: nvme_format; set {DEV}: nvme_ns (hp:20, capacity 3072604782592)")
    workload, note = step_workload(run, by_name(run, "precondition.hp20.whole.round1"), store.__getitem__)
    assert workload is not None and workload.footprint is None
    assert note == (f"hp:20 applied on the device by nvme_ns ({DEV}: capacity 3072604782592 bytes); no footprint "
                    "emulation: fio runs on the whole device")

    def gone(path: str) -> bytes:
        raise FileNotFoundError(path)

    assert step_workload(run, by_name(run, "hp20.whole"), gone).workload.footprint is None  # type: ignore[union-attr]


def test_a_failed_dut_state_is_not_what_set_the_mode() -> None:
    run, store = make_run(), dict[str, bytes]()
    dut_state = by_name(run, "dut-state.hp20.whole")
    finish(dut_state, {"dut_state.json": json.dumps([{"task": "Set the OP mode", **op_item(DEV, "nvme_ns")}]).encode()},
           store)
    dut_state.state = "FAILED"
    measure = by_name(run, "hp20.whole")
    assert step_workload(run, measure, store.__getitem__) == (Workload.model_validate(measure.workload), EMULATION)
