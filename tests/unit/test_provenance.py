"""orchestrator.provenance.describe on in-memory runs: what a review's test-platform paragraph lists."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from labcontract.suite import op_footprint
from orchestrator.provenance import DEVICE_COLUMNS, UNKNOWN, describe, text
from orchestrator.queries import RunDetail
from orchestrator.store.models import Artifact, Attempt, PreconditionRecord, Result, Run, Step

SUITE = "suite: t\ndefaults: {runtime: 60s}\nprofiles:\n  - {name: 4k, rw: randread, bs: 4k}\n"
NVME = {"name": "nvme0n1", "path": "/dev/nvme0n1", "kind": "block", "size_bytes": 1_600_321_314_816,
        "model": "INTEL SSDPF21Q016TB", "serial": "PHAL1234", "firmware": "L0310200", "by_id": None,
        "driver": "nvme", "transport": "pcie", "controller": "0000:3b:00.0", "logical_block_size": 512,
        "physical_block_size": 4096}
HOST = {"hostname": "rd630", "cpu_model": "Intel(R) Xeon(R) CPU E5-2620 0 @ 2.00GHz", "cpu_cores": 12,
        "cpu_threads": 24, "cpu_sockets": 2, "memory_bytes": 16 * 2**30, "kernel": "6.1.0-26-amd64",
        "os": "Debian GNU/Linux 12 (bookworm)", "fio_version": "fio-3.33", "sys_vendor": "LENOVO",
        "product_name": "ThinkServer RD630", "product_version": None, "board_vendor": "LENOVO",
        "board_name": None, "bios_vendor": "American Megatrends Inc.", "bios_version": "A2KT41AUS",
        "bios_date": "03/18/2013",
        "storage_controllers": [{"slot": "0000:3b:00.0", "class_name": "NVM Express", "vendor_id": "0x8086",
                                 "device_id": "0x4140", "driver": "nvme", "name": "Intel Corporation Optane"},
                                {"slot": "0000:02:00.0", "class_name": "SAS", "vendor_id": "0x1000",
                                 "device_id": "0x0087", "driver": "mpt3sas", "name": None}]}


def _run(**kw: Any) -> Run:
    base: dict[str, Any] = dict(
        id="r1", suite_name="t", suite_source="t.yaml", suite_text=SUITE, suite_sha256="ab" * 32, host="rd630",
        device="/dev/nvme0n1", devices=["/dev/nvme0n1"], runtime_override=None, scale=None, live=True,
        state="SUCCEEDED", reason="", submitted_at=1_700_000_000.0, started_at=1_700_000_010.0,
        ended_at=1_700_000_100.0, topology=None)
    return Run(**(base | kw))


def _step(i: int, *, kind: str = "measure", op_mode: str = "stock", note: str = "", footprint: str | None = None,
          state: str = "SUCCEEDED", **kw: Any) -> Step:
    workload = None if kind in ("purge", "dut_state", "facts") else {
        "name": "4k", "rw": "randread", "bs": 4096, "numjobs": 16, "iodepth": 16, "runtime": 60, "footprint": footprint}
    return Step(id=f"r1-s{i:03d}", run_id="r1", seq=i, round=kw.pop("round", 0), kind=kind,
                name=kw.pop("name", f"s{i}"),
                cell={"op_mode": op_mode, "profile": "4k", **kw.pop("cell", {})}, note=note, workload=workload,
                job_text="", host="", state=state, reason="")


def _result(step: Step, prov: dict[str, Any]) -> Result:
    return Result(step_id=step.id, run_id="r1", iops=1.0, fio_version="fio-3.33", provenance=prov)


def _detail(run: Run, steps: list[Step], provs: dict[str, dict[str, Any]],
            pcs: list[PreconditionRecord] | None = None) -> RunDetail:
    return RunDetail(run=run, steps=steps, results={sid: _result(next(s for s in steps if s.id == sid), p)
                                                    for sid, p in provs.items()}, preconditions=pcs or [])


def _rows(p: Any, title: str) -> dict[str, str]:
    return dict(next(rows for t, rows in p.sections if t == title))


def _all_values(p: Any) -> list[str]:
    return [v for _t, rows in p.sections for _k, v in rows] + [v for d in p.devices for v in d.values()] + \
        [p.device_label, p.os, *p.op_modes]


def test_stock_run_lists_the_platform_and_the_device_with_its_driver() -> None:
    st = _step(0)
    p = describe(_detail(_run(), [st], {st.id: {"host": HOST, "agent_version": "0.13.0", "devices": [NVME]}}))
    plat = _rows(p, "Platform")
    assert plat["server"] == "LENOVO ThinkServer RD630" and plat["board"] == "LENOVO"
    assert plat["BIOS"] == "American Megatrends Inc. A2KT41AUS (03/18/2013)"
    assert plat["sockets x cores (threads)"] == "2 x 6 cores (24 threads)" and plat["memory"] == "16.0 GiB"
    assert (plat["OS"], plat["kernel"], plat["fio"], plat["agent version"]) == (
        "Debian GNU/Linux 12 (bookworm)", "6.1.0-26-amd64", "fio-3.33", "0.13.0")
    assert plat["storage controllers"] == ("0000:3b:00.0 Intel Corporation Optane [8086:4140] driver nvme; "
                                           "0000:02:00.0 SAS [1000:0087] driver mpt3sas")
    assert p.devices == [{"name": "nvme0n1", "path": "/dev/nvme0n1", "model": "INTEL SSDPF21Q016TB",
                          "serial": "PHAL1234", "firmware": "L0310200", "capacity": "1,600.3 GB",
                          "sector": "512 B (physical 4,096 B)",
                          "driver": "nvme (pcie, 0000:3b:00.0 Intel Corporation Optane)"}]
    assert p.device_label == "INTEL SSDPF21Q016TB 1,600.3 GB" and p.os == "Debian GNU/Linux 12 (bookworm)"
    state = _rows(p, "Device state")
    assert state["OP mode stock"] == "stock: the device's full advertised capacity, no OP applied"
    assert state["purge"] == "none" and state["preconditioning"] == "none"
    run = _rows(p, "Run")
    assert run["suite sha256"] == "ab" * 32 and run["runtime override"] == "none" and run["scale"] == "none"
    assert run["started"] == "2023-11-14 22:13:30 UTC" and "warning" not in run and p.warnings == []
    assert p.partial is False


def test_hp_emulated_says_the_mode_and_the_footprint() -> None:
    _fp, note = op_footprint("hp:20", None)
    pre = _step(0, kind="purge", op_mode="hp:20")
    pc = _step(1, kind="precondition", op_mode="hp:20", note=note, footprint="80%", round=1)
    st = _step(2, op_mode="hp:20", note=note, footprint="80%")
    rec = PreconditionRecord(run_id="r1", seq=1, name="precondition.4k", criteria={}, rounds=[{}, {}, {}],
                             steady=True, reached_round=3, verdict="steady at round 3")
    p = describe(_detail(_run(), [pre, pc, st], {st.id: {"host": HOST, "devices": [NVME], "op_note": note}}, [rec]))
    assert p.op_modes == ["hp:20"]
    state = _rows(p, "Device state")
    assert state["OP mode hp:20"] == f"emulated: fio footprint size=80% ({note})"
    assert state["purge"].startswith("agent discard (blkdiscard for block devices")
    assert state["preconditioning precondition.4k"] == (
        "randread 4k at 16T/16Q, 60 s rounds; 3 round(s), steady: steady at round 3")


def test_hp_on_device_names_the_method_capacities_and_purge() -> None:
    dut = _step(0, kind="dut_state", op_mode="hp:20", name="dut-state.hp20",
                note="purge /dev/nvme0n1: nvme_format; set /dev/nvme0n1: nvme_ns (hp:20, capacity 1280257051852)")
    op_note = ("hp:20 applied on the device by nvme_ns (/dev/nvme0n1: capacity 1600321314816 -> 1280257051852 "
               "bytes); no footprint emulation: fio runs on the whole device")
    st = _step(1, op_mode="hp:20", note=op_note)
    facts = {"phase": "before", "duts": [{"name": "nvme0", "path": "/dev/nvme0n1", "interface": "nvme",
                                          "model": "INTEL SSDPF21Q016TB", "firmware": "L0310200",
                                          "driver": {"name": "nvme", "version": None},
                                          "capacity_bytes": 1_600_321_314_816, "health": {"healthy": True}}]}
    after = _step(2, kind="facts", name="facts.after", cell={"phase": "after"})
    after.attempts = [Attempt(id="a", number=1, state="SUCCEEDED",
                              artifacts=[Artifact(name="facts.json", path="x/facts.json", sha256="", size=1)])]
    prov = {"host": HOST, "devices": [NVME], "op_note": op_note, "provisioning": [dut.note], "dut_facts": facts}
    detail = _detail(_run(), [dut, st, after], {st.id: prov})
    state = _rows(describe(detail), "Device state")
    assert state["OP mode hp:20"] == f"on-device: {op_note}"
    assert state["provisioned: dut-state.hp20"] == f"SUCCEEDED: {dut.note}"
    assert state["purge"] == "purge /dev/nvme0n1: nvme_format [SUCCEEDED]"
    assert state["DUT facts (before): nvme0"] == ("/dev/nvme0n1 nvme, model INTEL SSDPF21Q016TB, firmware L0310200, "
                                                "driver nvme, capacity 1,600.3 GB, health healthy=True")
    assert state["DUT facts (after)"] == "SUCCEEDED (facts.json not read)"
    read = {"x/facts.json": b'{"duts": [{"name": "nvme0", "firmware": "L0310201"}]}'}
    state = _rows(describe(detail, read.__getitem__), "Device state")
    assert "firmware L0310201" in state["DUT facts (after): nvme0"] and "DUT facts (after)" not in state


def test_device_group_names_every_device_and_the_purge_script() -> None:
    loops = [{"name": f"dut{i}", "path": f"/dev/loop{i}", "kind": "block", "size_bytes": 134_217_728, "model": None,
              "driver": "loop"} for i in (3, 4)]
    purge = _step(0, kind="purge")
    purge.attempts = [Attempt(id="a", number=1, state="SUCCEEDED",
                              artifacts=[Artifact(name="purge.sh", path="p/purge.sh", sha256="", size=1)])]
    st = _step(1)
    run = _run(device="/dev/loop3", devices=["/dev/loop3", "/dev/loop4"])
    script = b"set -eu\nblkdiscard --force /dev/loop3\nblkdiscard --force /dev/loop4\n"
    read = {"p/purge.sh": script}.__getitem__
    p = describe(_detail(run, [purge, st], {st.id: {"host": HOST, "devices": loops}}), read)
    assert p.device_label == "2 x loop 0.1 GB"
    assert [(d["name"], d["path"], d["driver"], d["model"]) for d in p.devices] == [
        ("dut3", "/dev/loop3", "loop", UNKNOWN), ("dut4", "/dev/loop4", "loop", UNKNOWN)]
    assert _rows(p, "Device state")["purge"] == \
        "blkdiscard --force /dev/loop3; blkdiscard --force /dev/loop4 [SUCCEEDED]"


def test_missing_facts_are_unknown_never_none() -> None:
    st = _step(0, state="PENDING")
    run = _run(state="RUNNING", started_at=None, ended_at=None, suite_source="")
    p = describe(_detail(run, [st], {}))
    assert p.partial is True and p.os == UNKNOWN and p.device_label == UNKNOWN
    assert list(p.devices[0]) == list(DEVICE_COLUMNS)
    assert p.devices[0] == {c: "/dev/nvme0n1" if c == "path" else UNKNOWN for c in DEVICE_COLUMNS}
    plat = _rows(p, "Platform")
    assert set(plat.values()) == {UNKNOWN, f"{UNKNOWN} socket(s), {UNKNOWN} cores ({UNKNOWN} threads)"}
    assert _rows(p, "Run")["ended"] == UNKNOWN
    # an old result: facts with None everywhere, a device entry with only its path
    old = _step(0)
    p = describe(_detail(_run(), [old], {old.id: {"host": dict.fromkeys(HOST), "devices": [{"path": "/dev/sdb"}],
                                                   "agent_version": None}}))
    values = _all_values(p)
    assert "None" not in " ".join(values) and "" not in values
    assert text(None) == text("") == text([]) == UNKNOWN and text(0) == "0"


def test_overrides_are_shown_and_shortening_ones_warned() -> None:
    st = _step(0)
    p = describe(_detail(_run(runtime_override=2, scale=0.5, live=False), [st], {st.id: {"host": HOST}}))
    run = _rows(p, "Run")
    assert (run["runtime override"], run["scale"], run["live telemetry"]) == ("2 s per cell", "x0.5", "off")
    assert p.warnings == [
        "runtime overridden to 2 s per cell (suite says 60 s): not the published methodology",
        "durations scaled by 0.5 (runtimes, ramps, precondition rounds; suite says 60 s): not the published "
        "methodology"]
    assert [v for k, v in next(rows for t, rows in p.sections if t == "Run") if k == "warning"] == p.warnings
    longer = describe(_detail(_run(runtime_override=120), [st], {st.id: {"host": HOST}}))
    assert longer.warnings == [] and _rows(longer, "Run")["runtime override"] == "120 s per cell"


def test_network_run_lists_each_hosts_platform_tool_paths_and_mtus() -> None:
    topo = {"target": "tgt", "initiators": ["ini"], "paths": ["p0", "p1"], "tool": "fio"}
    steps = []
    for i, (host, role) in enumerate([("tgt", "target"), ("ini", "initiator")]):
        s = _step(0, kind="net", cell={"mtu": 9000, "paths": "multi", "role": role})
        s.id, s.host = f"r1-s000-h{i}", host
        steps.append(s)
    ini_host = HOST | {"hostname": "ini", "os": "Rocky Linux 9.4"}
    detail = _detail(_run(topology=topo, device="net", devices=[]), steps,
                     {steps[1].id: {"host": ini_host, "agent_version": "0.13.0", "role": "initiator"}})
    p = describe(detail)
    net = _rows(p, "Network")
    assert (net["target"], net["initiators"], net["tool"], net["paths"], net["MTUs"], net["path modes"]) == (
        "tgt", "ini", "fio", "p0, p1", "9000", "multi")
    assert _rows(p, "Platform: initiator ini")["server"] == "LENOVO ThinkServer RD630"
    assert _rows(p, "Platform: target tgt")["host"] == "tgt" and _rows(p, "Platform: target tgt")["OS"] == UNKNOWN
    assert p.os == "Rocky Linux 9.4" and "host" not in _rows(p, "Run")
    assert "None" not in " ".join(_all_values(p))


# --------------------------------------------------------------------------- terminal and Markdown reports


def _terminal(detail: RunDetail) -> str:
    from rich.console import Console

    from orchestrator.report import print_run

    out = io.StringIO()
    print_run(Console(file=out, width=200), detail)
    return out.getvalue()


def test_reports_of_a_run_with_missing_facts_never_say_none(tmp_path: Path) -> None:
    from orchestrator.report import write_markdown

    st = _step(0, op_mode="hp:20", note=op_footprint("hp:20", None)[1], footprint="80%")
    pending = _step(1, state="PENDING")
    rec = PreconditionRecord(run_id="r1", seq=5, name="precondition.x", criteria={}, rounds=[], steady=None,
                             reached_round=None, verdict="")
    old = {"host": dict.fromkeys(HOST), "devices": [{"path": "/dev/sdb"}, {"path": "/dev/sdc"}], "agent_version": None}
    detail = _detail(_run(state="RUNNING", ended_at=None, runtime_override=2, devices=["/dev/sdb", "/dev/sdc"]),
                     [st, pending], {st.id: old}, [rec])
    detail.results[st.id].read_iops = detail.results[st.id].write_iops = 0.0
    detail.results[st.id].bw_bytes = 0.0
    shown = _terminal(detail)
    md = write_markdown(detail, tmp_path, tmp_path / "artifacts").read_text()
    for out in (shown, md):
        assert "None" not in out, out
        assert "hp:20" in out and "emulated: fio footprint size=80%" in out
        assert "/dev/sdb" in out and "/dev/sdc" in out                     # every device of the group
        assert "runtime overridden to 2 s per cell (suite says 60 s): not the published methodology" in out
        assert "the run has not ended" in out and "unknown" in out
    assert "| runtime override | 2 s per cell |" in md and "# Run r1: suite `t` (hp:20, stock) on 2 x unknown" in md


def test_reports_name_server_controllers_and_driver(tmp_path: Path) -> None:
    from orchestrator.report import write_markdown

    st = _step(0)
    detail = _detail(_run(), [st], {st.id: {"host": HOST, "agent_version": "0.13.0", "devices": [NVME]}})
    detail.results[st.id].read_iops = detail.results[st.id].write_iops = detail.results[st.id].bw_bytes = 0.0
    md = write_markdown(detail, tmp_path, tmp_path).read_text()
    shown = " ".join(_terminal(detail).split())      # the terminal wraps long lines
    for out in (shown, md):
        assert "LENOVO ThinkServer RD630" in out and "0000:02:00.0 SAS [1000:0087] driver mpt3sas" in out
        assert "nvme (pcie, 0000:3b:00.0 Intel Corporation Optane)" in out and "PHAL1234" in out
    assert ("| nvme0n1 | /dev/nvme0n1 | INTEL SSDPF21Q016TB | PHAL1234 | L0310200 | 1,600.3 GB | "
            "512 B (physical 4,096 B) |") in md
