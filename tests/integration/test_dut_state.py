"""playbooks/dut_state.yml for real, through ansible-runner, against loop devices this test creates.

blkdiscard purge and the footprint OP mode run for real; the NVMe/ATA/SCSI paths run in check
mode against fake tools that print captured outputs (tests/fixtures/dut). Every refusal leaves
the backing file byte-for-byte intact."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.ansible_helpers import (
    can_use_loop_devices,
    fake_tools,
    local_inventory,
    loop_device,
    mkfs_ext4,
    mounted,
    read_json,
    run_playbook,
    sha256,
)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not can_use_loop_devices(), reason="needs root and loop devices")]

PURGE, OP = "Purge DUTs", "Set the OP mode"


@pytest.fixture
def loops(tmp_path: Path) -> Iterator[Any]:
    """``loops(n)`` -> n loop devices with their backing files, all detached at the end."""
    with ExitStack() as stack:
        def make(n: int, size_mib: int = 8) -> list[tuple[str, Path]]:
            out = []
            for _ in range(n):
                backing = tmp_path / f"dut{len(list(tmp_path.glob('dut*.img')))}.img"
                out.append((stack.enter_context(loop_device(backing, size_mib)), backing))
            return out
        yield make


def loop_dut(name: str, dev: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "loop", "path": dev, "allow": ["purge", "op_mode"], **extra}


def test_blkdiscard_purge_and_footprint_op_then_idempotent(tmp_path: Path, loops: Any) -> None:
    [(dev, _backing)] = loops(1)
    inv = local_inventory(tmp_path / "inv", [loop_dut("loopdut", dev)])
    state_dir = tmp_path / "state"
    extravars = {"lab_state_dir": str(state_dir), "dut_op_mode": "hp:20", "dut_once_token": "r-test-1"}

    first = run_playbook("dut_state.yml", inv, tmp_path / "run1", extravars)
    assert first.status == "successful", first.events[-3:]
    [purge] = first.item_results(PURGE)
    assert purge["changed"] and purge["method"] == "blkdiscard"
    assert purge["commands"] == [f"blkdiscard {dev}"]
    with open(dev, "rb") as fh:   # the random first MiB reads back as zeros
        assert fh.read(1 << 20) == bytes(1 << 20)
    [op] = first.item_results(OP)
    assert op["method"] == "footprint" and op["capacity_after"] == 8 << 20
    assert op["footprint_bytes"] == (8 << 20) * 80 // 100 // (1 << 20) * (1 << 20)
    state = read_json(state_dir / "loopdut.json")
    assert state["footprint_bytes"] == op["footprint_bytes"] and state["op_mode"] == "hp:20"
    assert state["purge"]["token"] == "r-test-1"

    second = run_playbook("dut_state.yml", inv, tmp_path / "run2", extravars)
    assert second.status == "successful"
    assert second.changed() == 0, second.stats
    assert second.item_results(PURGE)[0]["already_purged"] is True

    back = run_playbook("dut_state.yml", inv, tmp_path / "run3", {**extravars, "dut_op_mode": "stock"})
    assert back.changed() == 1 and back.item_results(OP)[0]["footprint_bytes"] == 8 << 20


def test_interlock_refuses_undeclared_mounted_and_signed_devices(tmp_path: Path, loops: Any) -> None:
    (undeclared, b0), (mnt_dev, b1), (signed, b2) = loops(3)
    mkfs_ext4(mnt_dev)
    mkfs_ext4(signed)
    # wipe_ok on the mounted one: it lifts the signature reason, never "mounted".
    inv = local_inventory(tmp_path / "inv", [loop_dut("mnt", mnt_dev, wipe_ok=True), loop_dut("signed", signed)])
    with mounted(mnt_dev, tmp_path / "mnt"):
        before = {p: sha256(p) for p in (b0, b1, b2)}
        run = run_playbook("dut_state.yml", inv, tmp_path / "run",
                           {"lab_state_dir": str(tmp_path / "state"), "dut_select": [undeclared, "mnt", "signed"],
                            "dut_op_mode": "hp:10"})
        after = {p: sha256(p) for p in (b0, b1, b2)}
    assert run.status == "failed" and before == after
    res = {r["device"]: r for r in run.item_results(PURGE)}
    assert res[undeclared]["reason_codes"] == ["not_declared"]
    assert res[mnt_dev]["reason_codes"] == ["mounted"]
    assert str(tmp_path / "mnt") in res[mnt_dev]["msg"]
    assert res[signed]["reason_codes"] == ["signature"]
    assert "ext4" in res[signed]["msg"]
    for dev, r in res.items():
        assert r["msg"].startswith(f"refusing purge on {dev}: ")
    assert run.failures() == 1
    assert run.item_results(OP) == []   # the play stopped: nothing after the refused purge
    assert not (tmp_path / "state").exists()


def test_wipe_ok_lets_an_ext4_signature_through_and_a_file_dut_is_hole_punched(tmp_path: Path, loops: Any) -> None:
    [(dev, _backing)] = loops(1)
    mkfs_ext4(dev)
    file_dut = tmp_path / "filedut.img"
    file_dut.write_bytes(os.urandom(1 << 20) + bytes(1 << 20))
    inv = local_inventory(tmp_path / "inv", [
        loop_dut("scratch", dev, wipe_ok=True),
        {"name": "file0", "kind": "file", "path": str(file_dut), "allow": ["purge"]}])
    run = run_playbook("dut_state.yml", inv, tmp_path / "run", {"lab_state_dir": str(tmp_path / "state")})
    assert run.status == "successful", run.item_results(PURGE)
    scratch, file0 = run.item_results(PURGE)
    assert scratch["method"] == "blkdiscard" and file0["method"] == "punch_hole"
    with open(dev, "rb") as fh:
        assert fh.read(1 << 20) == bytes(1 << 20)   # superblock gone
    assert file_dut.read_bytes() == bytes(2 << 20)   # zeroed, same size


FAKES = {
    "nvme": {"id-ctrl*": "nvme_id_ctrl.json", "id-ns*": "nvme_id_ns.json", "smart-log*": "nvme_smart_log.json"},
    "hdparm": {"-I*": "hdparm_I.txt", "-N*": "hdparm_N.txt"},
    "sg_readcap": {"--long*": "sg_readcap_long.txt"},
    "sg_format": {},
    "blkdiscard": {},
}


def test_nvme_ata_scsi_paths_in_check_mode(tmp_path: Path, loops: Any) -> None:
    (nvme, b0), (ata, b1), (scsi, b2) = loops(3, size_mib=2)
    log = tmp_path / "calls.log"
    env = fake_tools(tmp_path / "bin", log, FAKES)
    inv = local_inventory(tmp_path / "inv", [
        loop_dut("nvme0", nvme, interface="nvme", nvme_controller="/dev/nvme0", nsid=1, serial="S4YPNE0N800123"),
        loop_dut("sata0", ata, interface="ata", serial="S45NNE0M312345"),
        loop_dut("sas0", scsi, interface="scsi", wwn="0x5000cca0bc123456"),
    ])
    before = [sha256(b) for b in (b0, b1, b2)]
    run = run_playbook("dut_state.yml", inv, tmp_path / "run",
                       {"lab_state_dir": str(tmp_path / "state"), "dut_op_mode": "hp:20", "lab_dut_environment": env},
                       check=True)
    assert run.status == "successful", run.events[-3:]
    purge = {r["item"]: r for r in run.item_results(PURGE)}
    op = {r["item"]: r for r in run.item_results(OP)}

    assert purge["nvme0"]["method"] == "nvme_format"
    assert purge["nvme0"]["commands"] == ["nvme format /dev/nvme0 --namespace-id=1 --lbaf=0 --ses=1 --force"]
    assert purge["sata0"]["method"] == "ata_secure_erase"
    assert purge["sata0"]["commands"] == [
        f"hdparm --user-master u --security-set-pass storagelab {ata}",
        f"hdparm --user-master u --security-erase-enhanced storagelab {ata}"]
    assert purge["sas0"]["method"] == "blkdiscard" and purge["sas0"]["commands"] == [f"blkdiscard {scsi}"]

    assert op["nvme0"]["method"] == "nvme_ns"
    assert op["nvme0"]["commands"] == [
        "nvme detach-ns /dev/nvme0 --namespace-id=1 --controllers=65",
        "nvme delete-ns /dev/nvme0 --namespace-id=1",
        "nvme create-ns /dev/nvme0 --nsze=6001181222 --ncap=6001181222 --flbas=0",
        "nvme attach-ns /dev/nvme0 --namespace-id=1 --controllers=65",
        "nvme ns-rescan /dev/nvme0"]
    assert op["nvme0"]["capacity_before"] == 3840755982336
    assert op["nvme0"]["capacity_after"] == 6001181222 * 512
    assert op["sata0"]["method"] == "ata_hpa"
    assert op["sata0"]["commands"] == [f"hdparm --yes-i-know-what-i-am-doing -N p1500308006 {ata}"]
    assert op["sas0"]["method"] == "scsi_resize"
    assert op["sas0"]["commands"] == [f"sg_format --resize --count=1250259494 {scsi}"]
    for r in [*purge.values(), *op.values()]:
        assert r["changed"] and r["check_mode"]

    calls = log.read_text().splitlines()   # only read-only commands reached the (fake) tools
    assert calls and all(c.split()[1] in ("id-ctrl", "id-ns", "-I", "-N", "--long") for c in calls), calls
    assert [sha256(b) for b in (b0, b1, b2)] == before
    assert not (tmp_path / "state").exists()


def test_facts_playbook_writes_provenance_json(tmp_path: Path, loops: Any) -> None:
    (nvme, _b0), (plain, _b1) = loops(2, size_mib=2)
    env = fake_tools(tmp_path / "bin", tmp_path / "calls.log", FAKES)
    inv = local_inventory(tmp_path / "inv", [
        loop_dut("nvme0", nvme, interface="nvme", nvme_controller="/dev/nvme0", nsid=1),
        loop_dut("loop1", plain)])
    out = tmp_path / "facts"
    run = run_playbook("facts.yml", inv, tmp_path / "run",
                       {"facts_dir": str(out), "facts_phase": "before", "lab_dut_environment": env})
    assert run.status == "successful", run.events[-3:]
    doc = read_json(out / "localhost.before.json")
    assert doc["host"] == "localhost" and doc["phase"] == "before" and doc["kernel"]
    duts = {d["name"]: d for d in doc["duts"]}
    assert duts["nvme0"]["model"] == "SAMSUNG MZWLJ3T8HBLS-00007"
    assert duts["nvme0"]["firmware"] == "EPK9GB5Q"
    assert duts["nvme0"]["health"]["percent_used"] == 3
    assert duts["nvme0"]["health"]["temperature_c"] == 36
    assert duts["loop1"]["capacity_bytes"] == 2 << 20 and duts["loop1"]["driver"]["name"] == "loop"


def test_a_dut_declared_without_allow_is_neither_purged_nor_resized(tmp_path: Path, loops: Any) -> None:
    """docs/provisioning.md: ``allow`` defaults to nothing. The real module refuses, in check mode and for
    real, and the loop DUT's bytes do not change."""
    [(dev, backing)] = loops(1)
    inv = local_inventory(tmp_path / "inv", [{"name": "bare", "kind": "loop", "path": dev, "wipe_ok": False}])
    before = sha256(backing)
    state = {"lab_state_dir": str(tmp_path / "state")}
    for i, check in enumerate((True, False)):
        run = run_playbook("dut_state.yml", inv, tmp_path / f"purge{i}", {**state, "dut_op_mode": "hp:20"},
                           check=check)
        assert run.status == "failed"
        [purge] = run.item_results(PURGE)
        assert purge["reason_codes"] == ["operation_not_allowed"], purge
        assert purge["msg"] == f"refusing purge on {dev}: DUT bare does not allow purge (allow: nothing)"
        assert run.item_results(OP) == []
    op_only = run_playbook("dut_state.yml", inv, tmp_path / "op", {**state, "dut_purge": False, "dut_op_mode": "hp:20"})
    [op] = op_only.item_results(OP)
    assert op_only.status == "failed" and op["reason_codes"] == ["operation_not_allowed"], op
    assert sha256(backing) == before and not (tmp_path / "state").exists()
