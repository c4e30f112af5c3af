"""``playbooks/site.yml`` deploys the lab onto real hosts (QEMU guests with their own kernel and systemd), run from
the checkout's root exactly as docs/deployment.md shows it: the controller host's and the agents' systemd units are
started and enabled, the agents register over broker TLS, a suite runs on an emulated NVMe namespace and its result
is stored with the device's model, serial and firmware, and with the drive's own NVMe smart-log before and after the
step (read as root by the deployed drive-health helper, shown by ``labctl run show``); a reboot brings the agent
back through systemd and the lab goes on; a second run changes nothing."""

from __future__ import annotations

import time

import pytest

from orchestrator.labs.lab import wait_for
from tests.vmlab.conftest import TIMES, Deployed, play

pytestmark = [pytest.mark.vm, pytest.mark.timeout(5400)]

CTL_UNITS = ("storagelab-controller", "storagelab-web", "storagelab-redis", "storagelab-prometheus")
QUICK = "suite: quick\nprofiles:\n  - {name: 4k-randread, rw: randread, bs: 4k, iodepth: 4, runtime: 2s}\n"
WRITE = "suite: write\nprofiles:\n  - {name: 128k-write, rw: write, bs: 128k, iodepth: 4, runtime: 3s}\n"


def units(dep: Deployed, host: str, names: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """Each unit's (active state, enabled state), once it is out of a transition: a unit a handler restarted at the
    play's end may still be ``activating`` on a TCG guest of a busy machine (waited on, up to 5 minutes)."""
    out = {}
    for name in names:
        def settled(name: str = name) -> tuple[str, str] | None:
            res = dep.lab[host].ssh(f"systemctl is-active {name}; systemctl is-enabled {name}", check=False)
            active, enabled = ([*res.stdout.split(), "?", "?"])[:2]
            return None if active in ("activating", "deactivating", "reloading") else (active, enabled)
        got = wait_for(settled, 300, f"unit {name} on {host} to settle", interval=2)
        assert isinstance(got, tuple)
        out[name] = got
    return out


def registered(dep: Deployed, host: str, after: float = 0.0) -> dict[str, object]:
    def up() -> dict[str, object] | None:
        h = dep.host(host)
        return h if h and h["registered_at"] and h["registered_at"] > after and (h["age_s"] or 1e9) < 30 else None
    found = wait_for(up, 600, f"agent {host} to register", interval=5)
    assert isinstance(found, dict)
    return found


def put_suite(dep: Deployed, text: str, name: str = "quick.yaml") -> str:
    import subprocess

    path = f"/root/{name}"
    subprocess.run(dep.ctl.ssh_argv(f"cat > {path}"), input=text, text=True, check=True, capture_output=True,
                   timeout=60)
    return path


def test_site_yml_deploys_onto_real_hosts_and_a_suite_runs_on_nvme(deployed: Deployed) -> None:
    dep = deployed
    (first,) = dep.recaps
    assert set(first) == {"ctl", "nvme1"} and all(r["failed"] == 0 for r in first.values())
    assert units(dep, "ctl", CTL_UNITS) == {u: ("active", "enabled") for u in CTL_UNITS}
    for agent in ("nvme1",):
        assert units(dep, agent, ("storagelab-agent",)) == {"storagelab-agent": ("active", "enabled")}
        env = dep.lab[agent].ssh("systemctl show storagelab-agent -p Environment").stdout
        assert "rediss://agent-" + agent in env and "LAB_BROKER_CA=" in env       # broker TLS
        helper = units(dep, agent, ("storagelab-drive-health.socket",))
        assert helper == {"storagelab-drive-health.socket": ("active", "enabled")}
    host = registered(dep, "nvme1")
    devices = {d["name"]: d for d in host["devices"]}                           # type: ignore[attr-defined]
    assert devices["nvme0"]["model"] == "QEMU NVMe Ctrl" and devices["nvme0"]["serial"] == "VMLAB01NVME"
    assert devices["nvme0"]["firmware"] and devices["nvme0"]["firmware"] != "unknown"

    started = time.monotonic()
    run_id = dep.submit(put_suite(dep, WRITE, "write.yaml"), "--host", "nvme1", "--device", "nvme0")
    run = dep.wait_run(run_id)
    TIMES["first_suite_s"] = time.monotonic() - started
    assert run["state"] == "SUCCEEDED", (run["reason"], [(s["name"], s["state"], s["reason"]) for s in run["steps"]])
    (result,) = run["results"]
    dev = result["provenance"]["device"]
    assert (dev["model"], dev["serial"]) == ("QEMU NVMe Ctrl", "VMLAB01NVME") and dev["firmware"] not in (None, "")
    assert (dev["logical_block_size"], dev["physical_block_size"]) == (512, 512)    # the LBA format in use
    assert result["iops"] > 0          # a TCG guest's IOPS: proof that fio ran, not a figure of the lab
    # the drive's own counters around the step, read as root by the helper for an agent that is not root
    health = result["provenance"]["drive_health"]
    (before,), (after,) = health["before"], health["after"]
    assert before["name"] == after["name"] == "nvme0" and not before["error"] and not after["error"], health
    b, a = before["snapshot"], after["snapshot"]
    assert b["source"] == "nvme smart-log" and 0 < b["temperature_c"] < 100
    written = (a["data_units_written"] - b["data_units_written"]) * 512_000      # NVMe data units
    assert written >= result["write_bw_bytes"] * result["runtime_ms"] / 1000 * 0.9, (written, result)
    assert a["media_errors"] == b["media_errors"] == 0 and a["critical_warning"] == 0
    # the drive's temperature every second of the step, from its hwmon sensor (the kernel's nvme driver asks the
    # controller's SMART / Health log): a real sensor of an emulated drive, read by the agent that is not root
    temps = result["provenance"]["drive_temp"]["nvme0"]
    assert temps["samples"] >= 2 and 0 < temps["min_c"] <= temps["max_c"] < 100, temps
    assert len(temps["t"]) == len(temps["c"]) == temps["samples"]
    shown = dep.labctl("run", "show", run_id).stdout
    assert "drive health: nvme0" in shown and "nvme smart-log around 1 step(s)" in shown, shown
    assert f"nvme0 {temps['min_c']:g}-{temps['max_c']:g} °C (avg" in shown, shown


def test_a_rebooted_agent_comes_back_through_systemd_and_the_lab_goes_on(deployed: Deployed) -> None:
    dep = deployed
    before = time.time()
    TIMES["reboot_nvme1_s"] = dep.lab.reboot("nvme1")
    registered(dep, "nvme1", after=before)
    run = dep.wait_run(dep.submit(put_suite(dep, QUICK), "--host", "nvme1", "--device", "nvme1"))
    assert run["state"] == "SUCCEEDED", run["reason"]


def test_a_second_site_run_changes_nothing(deployed: Deployed) -> None:
    started = time.monotonic()
    second = play(deployed.lab, deployed.inventory, "site.yml")
    TIMES["site_second_s"] = time.monotonic() - started
    assert {h: r["changed"] for h, r in second.items()} == {h: 0 for h in second}, second
