"""A suite with ``phases.provision`` on the one-machine lab: the controller runs the playbooks through
ansible-runner (connection local, a real loop device): DUT facts before, purge and OP mode per OP mode
(blkdiscard, footprint), facts after; the results carry what was done as provenance."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.labs.lab import Lab
from orchestrator.store.db import make_engine, sessions
from tests.ansible_helpers import local_inventory
from tests.conftest import LabHandle

pytestmark = pytest.mark.integration

SUITE = """\
suite: provisioned
op_modes: [stock, "hp:20"]
phases: {purge: true, provision: true}
profiles:
  - {name: seqread, rw: read, bs: 128k, iodepth: 4, runtime: 1s}
"""


def host_provisioning(root: Path) -> dict[str, object]:
    """agent.yml on this machine, kept off its /etc, package manager and services: every path it
    writes is under ``root``; packages and the agent are already installed."""
    root.mkdir(parents=True, exist_ok=True)
    return {"lab_packages_install": False, "lab_agent_install": False, "lab_agent_start": False,
            "lab_agent_state_dir": str(root / "state"), "lab_agent_log_dir": str(root / "log"),
            "lab_agent_run_dir": str(root / "run"), "lab_agent_script": str(root / "storagelab-agent-ctl"),
            "lab_agent_unit_dir": str(root / "units"), "io_tuning_udev_rules_file": str(root / "60-sched.rules"),
            "io_tuning_udev_reload": False, "io_tuning_sysctl_file": str(root / "60-sysctl.conf"),
            "io_tuning_sysctl_apply": False,
            # no system user, no ACL, no udev rule on this machine (the embedded lab's agent is not the role's)
            "lab_agent_user": "root", "lab_agent_udev_rules_file": str(root / "60-storagelab.rules"),
            "lab_agent_udev_reload": False}


@pytest.fixture
def provisioned_lab(tmp_path: Path) -> Iterator[tuple[LabHandle, Path]]:
    lab = Lab(tmp_path / "lab")
    try:
        lab.start_redis()
        dut = lab.make_dut("dut0", 64)
        assert dut.loop, "needs a loop device (root)"
        inv = local_inventory(tmp_path / "inv", [{"name": "dut0", "kind": "loop", "path": dut.loop,
                                                  "allow": ["purge", "op_mode"]}],
                              lab_state_dir=str(tmp_path / "dut-state"), **host_provisioning(tmp_path / "host"))
        store = f"sqlite:///{tmp_path / 'lab' / 'store.sqlite'}"
        controller = lab.start_controller(store, extra=("--inventory", str(inv)))
        agent = lab.start_agent("localhost", [f"dut0={dut.loop}"])
        handle = LabHandle(lab, store, sessions(make_engine(store)), "localhost", {"dut0": dut}, controller, agent)
        handle.wait_registered()
        yield handle, tmp_path
    finally:
        lab.stop()


def test_provisioning_steps_run_through_ansible_and_become_provenance(
        provisioned_lab: tuple[LabHandle, Path]) -> None:
    lab, tmp_path = provisioned_lab
    d = lab.wait_run(lab.submit(SUITE), timeout=240)
    assert d.run.state == "SUCCEEDED", (d.run.reason, [(st.name, st.reason) for st in d.steps])
    assert [(st.kind, st.name) for st in d.steps] == [
        ("provision", "provision.host"), ("facts", "facts.before"),
        ("dut_state", "dut-state.stock"), ("measure", "stock.seqread"),
        ("dut_state", "dut-state.hp20"), ("measure", "hp20.seqread"), ("facts", "facts.after")]
    assert (tmp_path / "host" / "storagelab-agent-ctl").exists()       # agent.yml ran, on the test's paths
    stock, hp = d.steps[2], d.steps[4]
    assert "purge" in stock.note and "blkdiscard" in stock.note, stock.note
    assert "footprint" in hp.note and "hp:20" in hp.note, hp.note
    names = {a.name for a in hp.attempts[0].artifacts}
    assert {"ansible.log", "dut_state.json"} <= names
    state = json.loads((tmp_path / "dut-state" / "dut0.json").read_text())
    assert state["op_mode"] == "hp:20" and state["footprint_bytes"] < 64 << 20
    result = d.results[d.steps[5].id]
    assert any("hp:20" in note for note in result.provenance["provisioning"])
    facts = result.provenance["dut_facts"]
    assert facts["phase"] == "before" and facts["duts"][0]["name"] == "dut0"
    shown = lab.labctl("run", "show", d.run.id).stdout
    assert "provisioned:" in shown and "DUT facts (before): dut0" in shown, shown
    log = lab.controller.log.read_text()
    assert f"[run {d.run.id}] [step dut-state.hp20] [host localhost]" in log and "ansible: TASK [Purge DUTs]" in log


QUICK_PROVISIONED = """\
suite: provisioned-quick
phases: {provision: true}
profiles:
  - {name: seqread, rw: read, bs: 128k, iodepth: 4, runtime: 1s}
"""


def stopped_within(lab: LabHandle, seconds: float) -> float:
    """SIGTERM the controller; how long it took to exit (fails past ``seconds``)."""
    import signal
    import time

    from orchestrator.labs.lab import wait_for

    sent = time.monotonic()
    lab.controller.popen.send_signal(signal.SIGTERM)
    wait_for(lambda: not lab.controller.alive(), seconds, f"the controller to stop within {seconds:.0f}s of SIGTERM")
    return time.monotonic() - sent


def test_sigterm_stops_the_controller_after_and_during_a_playbook(
        provisioned_lab: tuple[LabHandle, Path]) -> None:
    """ansible-runner installs its own SIGTERM/SIGINT handlers on the main thread unless given a cancel
    callback: after a provisioned run, the controller ignored SIGTERM (systemctl stop hung)."""
    lab, tmp_path = provisioned_lab
    d = lab.wait_run(lab.submit(QUICK_PROVISIONED), timeout=240)
    assert d.run.state == "SUCCEEDED", (d.run.reason, [(st.name, st.reason) for st in d.steps])
    took = stopped_within(lab, 5)
    assert lab.controller.popen.returncode == 0 and "controller stopped" in lab.controller.log.read_text()
    lab.lab.procs.remove(lab.controller)
    # again while a playbook runs: it is cancelled, the process still exits within 5 s
    lab.controller = lab.lab.start_controller(lab.store_url, extra=("--inventory", str(tmp_path / "inv")))
    run_id = lab.submit(QUICK_PROVISIONED)
    lab.wait_step_state(run_id, "RUNNING", timeout=60)
    assert lab.detail(run_id).steps[0].kind == "provision"
    during = stopped_within(lab, 5)
    assert "cancelled: the controller stops" in lab.controller.log.read_text(), lab.controller.tail()
    print(f"\nFIGURE SIGTERM -> exit: {took:.2f}s after a provisioned run, {during:.2f}s during a playbook")
