"""Network suites on the kernel's own stack, run by the lab itself: a lab of its own (a controller host, a target and an
initiator, each network host with a NIC on each data path a and b) deployed by ``playbooks/site.yml`` as
docs/deployment.md shows it, the agents with their paths declared from the inventory's ``nics`` and allowed to set
their MTU. ``playbooks/iscsi_target.yml`` exports the target's virtio-scsi disk through LIO on both paths,
``playbooks/iscsi_initiator.yml`` logs in on both with open-iscsi and joins them with dm-multipath.

- A suite with ``tool: block`` (fio on the initiator's kernel iSCSI disk, or on its dm-multipath map) runs every cell
  of MTU 1500 / 9000 x single / multipath: per-path Gbps at both ends (each side's NIC counters), the MTU each step
  set on its NICs, the device each initiator step read, the comparisons ``labctl run show`` prints.
- One path's cable is pulled mid-cell (the tap of the initiator's NIC on path ``a`` set down in the lab's
  namespace): multipathd fails the path, fio goes on over path b with no error, the run succeeds, and the cell
  records the failure (path a, b the survivor) with its failover window (the seconds no I/O completed), which
  ``labctl run show`` prints. The userspace stack of tests/system (tgtd, libiscsi, nbd) never had a kernel's
  multipath; these figures are a TCG guest's, no measure of any network."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.labs.lab import wait_for
from orchestrator.labs.vmlab.image import Image
from orchestrator.labs.vmlab.lab import VmLab, controller_spec, data_nics, network_spec, scsi_by_id
from orchestrator.labs.vmlab.vm import Vm
from tests.vmlab.conftest import TIMES, Deployed, deploy, play
from tests.vmlab.test_1_deploy import put_suite, registered

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3600)]

IQN = "iqn.2026-11.lab.storage:vmlab-target"
MTU = 9000
NETWORK = f"network: {{paths: [a, b], tool: block, iqn: '{IQN}', lun: 0, mtu: %s, multipath: %s}}\n"
CELLS = ("suite: vm-paths\n" + NETWORK % ("[1500, 9000]", "[single, multi]")
         + "defaults: {runtime: 12s, iodepth: 8}\nprofiles:\n  - {name: seq-64k-read, rw: read, bs: 64k}\n")
FAILOVER = ("suite: vm-failover\n" + NETWORK % ("[9000]", "[multi]")
            + "defaults: {runtime: 90s, iodepth: 8}\nprofiles:\n  - {name: rand-16k-read, rw: randread, bs: 16k}\n")


@pytest.fixture(scope="module")
def netdep(image: Image, vmlab: VmLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    """The network lab, deployed, its iSCSI target and initiator set up, every guest's clock set from this one. The
    session's lab is paused meanwhile (this module runs last): five TCG guests on two CPUs would starve each other."""
    root = tmp_path_factory.mktemp("netlab")
    vmlab.pause()
    lab = VmLab(root / "vms", image, [controller_spec(0), network_spec(2, "target", scsi_bytes=512 << 20),
                                      network_spec(3, "initiator")], accel=vmlab.accel, accel_why=vmlab.accel_why)
    started = time.monotonic()
    try:
        lab.start()
        TIMES["boot_netlab_s"] = time.monotonic() - started
        for vm in lab.vms.values():      # no time server on the lab's network: a cell starts on every host at once
            vm.sync_clock()
        target, initiator = lab["target"], lab["initiator"]
        lun = scsi_by_id(target.spec.scsi_serial)
        host_vars = {"target": {"nics": data_nics(target, initiator, MTU),
                                "iscsi": {"iqn": IQN, "luns": [{"name": "lun0", "path": lun}]}},
                     "initiator": {"nics": data_nics(initiator, target, MTU), "iscsi": {"iqn": IQN}}}
        dep = deploy(lab, root / "deploy", groups={"targets": ["target"], "initiators": ["initiator"]},
                     host_vars=host_vars, group_vars={"lab_agent_manage_mtu": True})
        TIMES["site_netlab_s"] = dep.site_s
        started = time.monotonic()
        play(lab, dep.inventory, "iscsi_target.yml")
        play(lab, dep.inventory, "iscsi_initiator.yml")
        TIMES["iscsi_plays_s"] = time.monotonic() - started
        yield dep
    finally:
        lab.cleanup()
        vmlab.resume()


def paths(vm: Vm) -> list[tuple[str, str]]:
    """multipathd's paths: (device, dm state) per path."""
    out = vm.ssh("multipathd show paths raw format '%d %t'", check=False).stdout
    return [(p[0], p[1]) for p in (line.split() for line in out.splitlines()) if len(p) == 2]


def both_active(vm: Vm) -> list[tuple[str, str]] | None:
    found = paths(vm)
    return found if len(found) == 2 and all(state == "active" for _, state in found) else None


def ready(dep: Deployed) -> None:
    """Both agents registered, both paths of the multipath map active, MTU 9000 end to end on both data paths."""
    for host in ("target", "initiator"):
        registered(dep, host)
    lab = dep.lab
    for vm, peer in ((lab["target"], lab["initiator"]), (lab["initiator"], lab["target"])):
        for nic in data_nics(vm, peer, MTU):        # no fragmentation allowed
            vm.ssh(f"ip link set dev {nic['iface']} mtu {MTU} && ping -c 1 -W 5 -M do -s 8972 {nic['peer']}")
    assert wait_for(lambda: both_active(lab["initiator"]), 180, "dm-multipath to have both paths active", interval=1)


def cells(run: dict[str, Any]) -> dict[tuple[int, str], dict[str, Any]]:
    return {(int(g["cell"]["mtu"]), str(g["cell"]["paths"])): g for g in run["net_groups"]}


def test_single_path_vs_multipath_at_mtu_1500_and_9000_as_a_suite(netdep: Deployed) -> None:
    dep = netdep
    ready(dep)
    started = time.monotonic()
    run_id = dep.submit(put_suite(dep, CELLS, "cells.yaml"), "--host", "target", "--initiator", "initiator")
    run = dep.wait_run(run_id)
    TIMES["net_suite_s"] = time.monotonic() - started
    assert run["state"] == "SUCCEEDED", (run["reason"], [(s["name"], s["state"], s["reason"]) for s in run["steps"]])
    by_cell = cells(run)
    assert set(by_cell) == {(m, p) for m in (1500, 9000) for p in ("single", "multi")}, list(by_cell)
    for (mtu, mode), g in by_cell.items():
        assert g["complete"], g["reason"]
        names = ["a"] if mode == "single" else ["a", "b"]
        assert set(g["per_path"]) == {f"{h}.{n}" for h in ("target", "initiator") for n in names}, g["per_path"]
        for key, p in g["per_path"].items():          # each path carried the cell's data, at both ends
            assert p["mtu"] == mtu and p["gbps"] > 0.005, (mtu, mode, key, p)
        if mode == "multi":                            # multibus: both paths share the load
            a, b = g["per_path"]["initiator.a"]["gbps"], g["per_path"]["initiator.b"]["gbps"]
            assert min(a, b) > 0.2 * max(a, b), (mtu, a, b)
        total = g["total"]
        assert total["initiator_iops"] > 0 and total["lat_mean_ns"], total
        TIMES[f"net_{mode}_mtu{mtu}_gbps"] = total["initiator_gbps"]
        TIMES[f"net_{mode}_mtu{mtu}_skew_ms"] = g["skew_ms"]          # a figure, not asserted: guests' clocks
        TIMES[f"net_{mode}_mtu{mtu}_late_s"] = max(h["late_s"] or 0.0 for h in g["per_host"].values())
    devices = {(r["per_path"] and len(r["per_path"])): r["metrics"]["block"]["device"]
               for r in run["results"] if r["metrics"].get("role") == "initiator"}
    assert devices[1].startswith("/dev/sd") and devices[2].startswith("/dev/dm-"), devices
    shown = dep.labctl("run", "show", run_id).stdout
    assert "multipath vs single path: seq-64k-read at MTU 9000" in shown, shown
    assert "MTU 9000 vs 1500: seq-64k-read multi path" in shown, shown


def rx_bytes(vm: Vm, iface: str) -> int:
    return int(vm.ssh(f"cat /sys/class/net/{iface}/statistics/rx_bytes").stdout)


def test_a_pulled_cable_mid_cell_fails_over_and_the_cell_records_its_window(netdep: Deployed) -> None:
    dep = netdep
    ready(dep)
    lab, initiator = dep.lab, dep.lab["initiator"]
    iface_a = data_nics(initiator, lab["target"], MTU)[0]["iface"]
    run_id = dep.submit(put_suite(dep, FAILOVER, "failover.yaml"), "--host", "target", "--initiator", "initiator")

    seen = [rx_bytes(initiator, iface_a)]

    def moving() -> bool:                       # fio reads over path a: its NIC receives megabytes
        seen.append(rx_bytes(initiator, iface_a))
        return seen[-1] - seen[-2] > 4 << 20
    wait_for(moving, 900, "fio to read over path a", interval=2)
    tap_a = initiator.spec.tap(1)
    lab.net.set_link(tap_a, up=False)                   # the cable of path a
    pulled = time.monotonic()
    try:
        wait_for(lambda: sorted(s for _, s in paths(initiator)) == ["active", "failed"], 120,
                 "multipathd to fail the pulled path", interval=1)
        TIMES["multipath_failover_s"] = time.monotonic() - pulled
        run = dep.wait_run(run_id)
    finally:
        lab.net.set_link(tap_a, up=True)
    assert run["state"] == "SUCCEEDED", (run["reason"], [(s["name"], s["state"], s["reason"]) for s in run["steps"]])
    (g,) = run["net_groups"]
    assert g["complete"], g["reason"]
    (failure,) = g["failures"]
    assert (failure["host"], failure["path"], failure["survivors"]) == ("initiator", "a", ["b"]), failure
    assert failure["carried_on_s"] >= 10 and failure["survivor_gbps"] > 0.005, failure
    TIMES["multipath_io_stalled_s"] = failure["io_stalled_s"]
    (ini,) = [r for r in run["results"] if r["metrics"].get("role") == "initiator"]
    assert ini["metrics"]["io"]["errors"] == 0, ini["metrics"]["io"]          # nothing lost: no I/O error
    shown = dep.labctl("run", "show", run_id).stdout
    assert "path failure: rand-16k-read.mtu9000.multi: initiator path a stopped" in shown, shown
    assert "b carried on" in shown and "(the failover window)" in shown, shown
    assert wait_for(lambda: both_active(initiator), 180, "the path to come back", interval=1)


def test_the_agents_may_set_their_mtu_and_hold_no_other_capability(netdep: Deployed) -> None:
    """The agents here may set their MTU (lab_agent_manage_mtu): the unit gives CAP_NET_ADMIN and nothing else."""
    for host in ("target", "initiator"):
        unit = netdep.lab[host].ssh("systemctl show storagelab-agent -p AmbientCapabilities -p "
                                    "CapabilityBoundingSet -p User").stdout
        assert "AmbientCapabilities=cap_net_admin" in unit and "CapabilityBoundingSet=cap_net_admin" in unit, unit
        assert "User=storagelab" in unit, unit
