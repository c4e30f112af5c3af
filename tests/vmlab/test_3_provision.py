"""Provisioning for real on an emulated NVMe controller: ``playbooks/dut_state.yml`` (the interlock first, on the
host) purges a declared namespace with Format NVM and Secure Erase Setting 1, which the controller does, and the
data written before is gone; OP by namespace management, which QEMU's controller advertises (OACS bit 3) and does
not implement, is refused with the device's own answer and changes nothing; an undeclared path is refused by the
interlock before any command reaches the device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.labs.vmlab.lab import nvme_by_id
from tests.vmlab.conftest import Deployed, play, play_result

pytestmark = [pytest.mark.vm, pytest.mark.timeout(1800)]

MIB4 = 4 << 20


def digest(dep: Deployed, path: str) -> str:
    out = dep.lab["nvme1"].ssh(f"head -c {MIB4} {path} | sha256sum").stdout
    return out.split()[0]


ZEROS = __import__("hashlib").sha256(bytes(MIB4)).hexdigest()


def test_format_nvm_with_secure_erase_purges_a_declared_namespace(deployed: Deployed, tmp_path: Path) -> None:
    dep, vm = deployed, deployed.lab["nvme1"]
    path = nvme_by_id(vm.spec.nvme_serial, 1)
    vm.ssh(f"dd if=/dev/urandom of={path} bs=1M count=4 oflag=direct status=none")
    assert digest(dep, path) != ZEROS
    ctrl = json.loads(vm.ssh("nvme id-ctrl /dev/nvme0 -o json").stdout)
    assert ctrl["oacs"] & 0x2 and ctrl["sn"].strip() == vm.spec.nvme_serial      # Format NVM offered
    play(dep.lab, dep.inventory, "dut_state.yml", "-e", "dut_hosts=nvme1", "-e", "dut_select=nvme0",
         "-e", "dut_purge_method=nvme_format", "-e", f"dut_report_dir={tmp_path}")
    report = json.loads((tmp_path / "nvme1.dut_state.json").read_text())
    (purge,) = report["purge"]
    assert purge["method"] == "nvme_format" and purge["changed"], purge
    assert purge["capacity_after"] == purge["capacity_before"] == 1 << 30
    assert digest(dep, path) == ZEROS                          # what was written is gone


def test_op_by_namespace_management_is_refused_before_any_command(deployed: Deployed) -> None:
    """QEMU's controller sets OACS bit 3 (namespace management) but reports TNVMCAP 0 and refuses Namespace
    Management delete: the module refuses before it detaches anything (it once detached namespace 2 and failed at
    delete-ns, leaving the DUT without its namespace; a failed step now puts the namespace back as well)."""
    dep, vm = deployed, deployed.lab["nvme1"]
    before = vm.ssh("nvme list -o json").stdout
    res = play_result(dep.lab, dep.inventory, "dut_state.yml", "-e", "dut_hosts=nvme1", "-e", "dut_select=nvme1",
                      "-e", "dut_purge=false", "-e", "dut_op_mode=hp:20", "-e", "dut_op_method=nvme_ns")
    assert res.returncode != 0, res.stdout[-3000:]
    assert "cannot set op_mode with nvme_ns: the controller reports no total NVM capacity (TNVMCAP 0)" in res.stdout
    assert json.loads(vm.ssh("nvme list -o json").stdout) == json.loads(before)     # both namespaces as they were


def test_an_undeclared_device_is_refused_by_the_interlock(deployed: Deployed) -> None:
    """The host's own root disk, named by path: refused on the host before any command reaches it."""
    dep, vm = deployed, deployed.lab["nvme1"]
    vm.ssh("head -c 4096 /dev/urandom > /root/marker && sync")
    before = vm.ssh("sha256sum /root/marker").stdout
    res = play_result(dep.lab, dep.inventory, "dut_state.yml", "-e", "dut_hosts=nvme1", "-e", "dut_select=/dev/vda",
                      "-e", "dut_purge_method=blkdiscard")
    assert res.returncode != 0 and "not a declared DUT" in res.stdout, res.stdout[-3000:]
    assert "backs the root filesystem" in res.stdout
    vm.ssh("echo 3 > /proc/sys/vm/drop_caches")
    assert vm.ssh("sha256sum /root/marker").stdout == before                     # the root disk as it was
