"""The network tests' hosts on the kernel's own stack: a target VM exports its virtio-scsi disk through LIO on two
data paths (``playbooks/iscsi_target.yml``), an initiator VM logs in on both with open-iscsi and joins them with
dm-multipath (``playbooks/iscsi_initiator.yml``), both at MTU 9000 on the data paths. fio runs on the multipath
device; one path's cable is pulled mid-run (the tap of the initiator's NIC on path ``a`` set down in the lab's
namespace): multipathd fails the path, I/O goes on over the other with no error, and the path comes back once the
cable is back. The userspace stack of tests/system (tgtd, libiscsi, nbd) never had a kernel's multipath."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.labs.lab import wait_for
from orchestrator.labs.vmlab.image import Image
from orchestrator.labs.vmlab.lab import VmLab, network_spec
from orchestrator.labs.vmlab.vm import Vm
from tests.vmlab.conftest import TIMES, play

pytestmark = [pytest.mark.vm, pytest.mark.timeout(2400)]

IQN = "iqn.2026-11.lab.storage:vmlab-target"
MTU = 9000


@pytest.fixture(scope="module")
def netlab(image: Image, vmlab: VmLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VmLab]:
    """Two network hosts on a lab of their own (the session's VMs are not needed by this module)."""
    lab = VmLab(tmp_path_factory.mktemp("netlab"), image,
                [network_spec(2, "target", scsi_bytes=512 << 20), network_spec(3, "initiator")],
                accel=vmlab.accel, accel_why=vmlab.accel_why)
    started = time.monotonic()
    try:
        lab.start()
        TIMES["boot_netlab_s"] = time.monotonic() - started
        yield lab
    finally:
        lab.cleanup()


def ifaces(vm: Vm) -> dict[str, str]:
    """The guest's interface name of each of its NICs' addresses (the kernel names them, not the lab)."""
    doc = json.loads(vm.ssh("ip -j addr show").stdout)
    return {f"{a['local']}/{a['prefixlen']}": link["ifname"] for link in doc for a in link.get("addr_info", [])}


def nics(vm: Vm, peer: Vm) -> list[dict[str, Any]]:
    names = ifaces(vm)
    return [{"name": nic.segment, "iface": names[nic.address], "address": nic.address, "mtu": MTU,
             "peer": other.address.split("/")[0]}
            for nic, other in zip(vm.spec.nics[1:], peer.spec.nics[1:], strict=True)]


def paths(vm: Vm) -> list[tuple[str, str]]:
    """multipathd's paths: (device, dm state) per path."""
    out = vm.ssh("multipathd show paths raw format '%d %t'", check=False).stdout
    return [(p[0], p[1]) for p in (line.split() for line in out.splitlines()) if len(p) == 2]


def test_dm_multipath_over_two_iscsi_paths_survives_a_pulled_cable(netlab: VmLab, tmp_path: Path) -> None:
    target, initiator = netlab["target"], netlab["initiator"]
    lun = f"/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_{target.spec.scsi_serial}"
    host_vars = {"target": {"nics": nics(target, initiator), "iscsi": {"iqn": IQN, "luns": [{"name": "lun0",
                                                                                               "path": lun}]}},
                 "initiator": {"nics": nics(initiator, target), "iscsi": {"iqn": IQN}}}
    inventory = netlab.inventory(tmp_path / "hosts.yml", {"targets": ["target"], "initiators": ["initiator"]},
                                 host_vars)
    started = time.monotonic()
    play(netlab, inventory, "iscsi_target.yml")
    play(netlab, inventory, "iscsi_initiator.yml")
    TIMES["iscsi_plays_s"] = time.monotonic() - started
    for vm in (target, initiator):        # the data paths at MTU 9000, end to end (no fragmentation allowed)
        for nic in nics(vm, initiator if vm is target else target):
            vm.ssh(f"ip link show {nic['iface']} | grep -q 'mtu {MTU}' && ping -c 1 -W 5 -M do -s 8972 {nic['peer']}")

    def both_active() -> list[tuple[str, str]] | None:
        found = paths(initiator)
        return found if len(found) == 2 and all(state == "active" for _, state in found) else None
    two = wait_for(both_active, 120, "dm-multipath to have both paths active", interval=1)
    assert two is not None
    maps = initiator.ssh("multipath -l -v1").stdout.split()
    assert len(maps) == 1, maps
    device = f"/dev/mapper/{maps[0]}"
    initiator.ssh(f"nohup fio --name=mp --filename={device} --rw=randrw --bs=4k --iodepth=8 --ioengine=libaio "
                  "--direct=1 --time_based --runtime=40 --size=256m --output-format=json --output=/root/fio.json "
                  "</dev/null >/root/fio.log 2>&1 & echo $! > /root/fio.pid")
    initiator.ssh("kill -0 $(cat /root/fio.pid)")             # fio runs
    tap_a = initiator.spec.tap(1)
    pulled = time.monotonic()
    netlab.net.set_link(tap_a, up=False)                      # the cable of path a

    def one_failed() -> bool:
        states = sorted(state for _, state in paths(initiator))
        return states == ["active", "failed"]
    wait_for(one_failed, 120, "multipathd to fail the pulled path", interval=1)
    TIMES["multipath_failover_s"] = time.monotonic() - pulled
    netlab.net.set_link(tap_a, up=True)
    wait_for(lambda: both_active() is not None, 180, "the path to come back", interval=1)

    def fio_done() -> bool:
        return initiator.ssh("kill -0 $(cat /root/fio.pid)", check=False).returncode != 0
    wait_for(fio_done, 300, "fio to end", interval=2)
    job = json.loads(initiator.ssh("cat /root/fio.json").stdout)["jobs"][0]
    assert job["error"] == 0, job
    assert job["read"]["total_ios"] > 0 and job["write"]["total_ios"] > 0
