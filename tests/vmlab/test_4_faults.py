"""Faults only real hosts have, on the deployed VM lab:

- power loss mid-step: the agent VM's QEMU is killed while fio runs; the attempt is LOST within the heartbeat
  timeout; the VM comes back (with its clock minutes behind: a host whose battery-backed clock drifted) and the
  step is retried after the interlock has judged the DUT again, with exactly one result per step;
- a drive that raises a critical warning mid-step (QMP ``qom-set`` of the controller's ``smart_critical_warning``):
  the step's drive health (read by the root helper for the unprivileged agent) says so, the run's report names the
  step, and the heartbeat's SMART check (through the same helper) quarantines both namespaces of the drive;
- a drive pulled mid-step (QMP ``device_del`` of the NVMe controller): the step fails with the reason and the DUT
  is quarantined (three failed presence checks), the host and its SCSI DUT stay in service."""

from __future__ import annotations

import dataclasses
import time

import pytest

from orchestrator.labs.lab import wait_for
from tests.vmlab.conftest import TIMES, Deployed
from tests.vmlab.test_1_deploy import put_suite, registered

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3600)]

# three attempts: the one the power loss ends, its retry, and room for one spurious loss of the retry while the
# rebooted 1-vCPU TCG guest is starved (its agent or the controller's intake silent past the 30 s heartbeat
# timeout, seen in 1 of 3 clean-clone CI runs: the retry LOST and its orphan stopped, the run then failed for want
# of a third attempt); the test still requires the power loss's attempt to end LOST or "host restarted", the run
# to succeed with one result per step, and any extra attempt to be such a loss, counted in the tier's figures
LONG = ("suite: long\nretry: {max_attempts: 3, when: [lost, timeout, error]}\nprofiles:\n"
        "  - {name: 4k-randread, rw: randread, bs: 4k, iodepth: 4, runtime: 90s}\n"
        "  - {name: 64k-read, rw: read, bs: 64k, iodepth: 4, runtime: 2s}\n")
CLOCK_BEHIND_S = 7 * 60


def running_step(dep: Deployed, run_id: str) -> dict[str, object]:
    def running() -> dict[str, object] | None:
        run = dep.run(run_id)
        return next((s for s in run["steps"] if s["state"] == "RUNNING"), None) if run else None
    step = wait_for(running, 900, f"a step of {run_id} to run", interval=3)
    assert isinstance(step, dict)
    return step


def test_power_loss_mid_step_is_lost_then_retried_once_the_host_is_back(deployed: Deployed) -> None:
    dep, lab = deployed, deployed.lab
    run_id = dep.submit(put_suite(dep, LONG, "long.yaml"), "--host", "nvme1", "--device", "nvme0")
    step = running_step(dep, run_id)
    lost_from = time.monotonic()
    vm = lab["nvme1"]
    vm.kill()                                                      # power loss: nothing flushed, nothing stopped

    def lost() -> bool:
        run = dep.run(run_id)
        return any(s["id"] == step["id"] and s["state"] == "LOST" for s in run["steps"])
    wait_for(lost, 120, f"step {step['name']} to be LOST", interval=2)
    TIMES["lost_after_power_loss_s"] = time.monotonic() - lost_from
    # the power comes back with the host's clock minutes behind
    vm.spec = dataclasses.replace(vm.spec, rtc_offset_s=-CLOCK_BEHIND_S)
    back = time.time()
    vm.start()
    TIMES["boot_after_power_loss_s"] = vm.wait_ssh(900)
    host = registered(dep, "nvme1", after=back - CLOCK_BEHIND_S - 60)
    run = dep.wait_run(run_id)
    assert run["state"] == "SUCCEEDED", (run["reason"], [(s["name"], s["state"], s["reason"], [
        (a["id"], a["state"], a["reason"]) for a in s["attempts"]]) for s in run["steps"]])
    (retried,) = [s for s in run["steps"] if s["id"] == step["id"]]
    attempts = retried["attempts"]
    assert len(attempts) in (2, 3) and attempts[-1]["state"] == "SUCCEEDED", attempts
    first = attempts[0]        # LOST by the controller, or FAILED by the agent's report once it is back
    assert (first["state"], first["state"] == "LOST" or first["reason"].startswith(
        "the host restarted while fio ran")) in (("LOST", True), ("FAILED", True)), attempts
    extra = attempts[1:-1]     # a spurious loss of the retry on the starved guest, stopped as an orphan
    assert all(a["reason"].startswith("host lost mid-step") for a in extra), attempts
    TIMES["power_loss_extra_attempts"] = len(extra)
    by_step: dict[str, int] = {}
    for r in run["results"]:
        by_step[r["step_id"]] = by_step.get(r["step_id"], 0) + 1
    assert by_step == {s["id"]: 1 for s in run["steps"] if s["kind"] == "measure"}, by_step   # none lost or doubled
    skew = dep.ctl.ssh("python3 -c \"import sqlite3; print(sqlite3.connect('file:/var/lib/storagelab/store.sqlite?"
                       "mode=ro', uri=True).execute(\\\"select clock_skew_s from hosts where name='nvme1'\\\")"
                       ".fetchone()[0])\"").stdout
    assert -CLOCK_BEHIND_S - 120 < float(skew) < -CLOCK_BEHIND_S + 120, skew
    assert host["name"] == "nvme1"


# 45 s: the warning lands mid-step even when the step is seen running late (a TCG guest on a loaded machine)
WARN = "suite: warn\nprofiles:\n  - {name: 64k-write, rw: write, bs: 64k, iodepth: 4, runtime: 45s}\n"
RELIABILITY_DEGRADED = 0x04           # NVMe critical warning bit 2


def test_a_critical_warning_mid_step_is_reported_and_quarantines_the_dut(deployed: Deployed) -> None:
    dep, lab = deployed, deployed.lab
    run_id = dep.submit(put_suite(dep, WARN, "warn.yaml"), "--host", "nvme1", "--device", "nvme0")
    step = running_step(dep, run_id)
    lab["nvme1"].qmp("qom-set", path="/machine/peripheral/nvme0", property="smart_critical_warning",
                     value=RELIABILITY_DEGRADED)
    try:
        run = dep.wait_run(run_id)
        assert run["state"] == "SUCCEEDED", run["reason"]        # a warning is the drive's news, not fio's failure
        (result,) = run["results"]
        health = result["provenance"]["drive_health"]
        assert health["before"][0]["snapshot"]["critical_warning"] == 0
        assert health["after"][0]["snapshot"]["critical_warning"] == RELIABILITY_DEGRADED
        shown = dep.labctl("run", "show", run_id).stdout
        assert f"drive health: nvme0, after step {step['name']}" in shown and "critical warning 0x04" in shown, shown

        # the health log is the controller's (the drive's), not a namespace's: both namespaces of the drive go
        def quarantined() -> list[dict[str, object]] | None:
            host = dep.host("nvme1")
            devs = [d for d in host["devices"] if d["name"] in ("nvme0", "nvme1")] if host else []
            return devs if len(devs) == 2 and all(d["quarantined_at"] for d in devs) else None
        started = time.monotonic()
        devs = wait_for(quarantined, 600, "both namespaces of the drive to be quarantined by the SMART check",
                        interval=5)
        TIMES["smart_quarantine_s"] = time.monotonic() - started
        assert isinstance(devs, list) and all("critical_warning=0x04" in str(d["quarantine_reason"]) for d in devs)
    finally:
        lab["nvme1"].qmp("qom-set", path="/machine/peripheral/nvme0", property="smart_critical_warning", value=0)
        dep.labctl("hosts", "release", "nvme1", check=False)          # the host and every DUT of it


def test_a_drive_pulled_mid_step_fails_the_step_and_is_quarantined(deployed: Deployed) -> None:
    dep, lab = deployed, deployed.lab
    run_id = dep.submit(put_suite(dep, LONG, "long.yaml"), "--host", "nvme1", "--device", "nvme1")
    running_step(dep, run_id)
    lab["nvme1"].qmp("device_del", id="nvme0")            # the NVMe drive (both namespaces) is pulled
    run = dep.wait_run(run_id)
    assert run["state"] == "FAILED"
    failed = [s for s in run["steps"] if s["state"] == "FAILED"]
    assert failed, run["steps"]

    def quarantined() -> dict[str, object] | None:
        host = dep.host("nvme1")
        dev = next((d for d in host["devices"] if d["name"] == "nvme1"), None) if host else None
        return dev if dev and dev["quarantined_at"] else None
    dev = wait_for(quarantined, 300, "DUT nvme1 to be quarantined", interval=3)
    assert isinstance(dev, dict) and dev["quarantine_reason"]
    other = dep.wait_run(dep.submit(put_suite(dep, "suite: q\nprofiles:\n  - {name: a, rw: randread, bs: 4k, "
                                                   "runtime: 2s}\n", "q.yaml"), "--host", "nvme1", "--device",
                                    "scsi0"))
    assert other["state"] == "SUCCEEDED", other["reason"]              # the host and its other DUT go on
