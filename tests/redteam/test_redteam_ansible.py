"""Red team, the Ansible side (issue 12 item 8), on the real lab: redis-server, a controller that runs the
playbooks through ansible-runner (connection local), an agent, loop-device DUTs holding random data.

- a DUT declared without ``allow``: a provisioned run's purge is refused ("allow: nothing"), no fio runs;
- a DUT whose signature probe fails (a ``wipefs`` that exits 1 for that device only, first on the module's
  PATH through the inventory's ``lab_dut_environment``): refused ("signature probe failed"), even with
  ``wipe_ok``;
- an inventory DUT path ``/dev/disk/by-id/X$(touch Y)``: refused by the loader (file and key named), by the
  controller at start, and handed to Ansible anyway (the loader bypassed) nothing runs it.

Each case: refused with the reason, the controller alive, no fio started, the DUTs' checksums unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from labcontract.errors import InventoryError
from labcontract.inventory import load_inventory
from orchestrator.labs.lab import Dut, Lab, wait_for
from orchestrator.queries import RunDetail
from orchestrator.store.db import make_engine, sessions
from tests.ansible_helpers import local_inventory, run_playbook
from tests.conftest import LabHandle

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("losetup") is None,
                                 reason="needs root and loop devices")]

SUITE = """\
suite: redteam-ansible
op_modes: [stock]
phases: {purge: true, provision: true}
profiles:
  - {name: seqread, rw: read, bs: 128k, iodepth: 4, runtime: 1s}
"""

FAILING_WIPEFS = """#!/bin/sh
# wipefs that cannot probe {dev} (as an unreadable device would), the real one for any other device
case "$*" in
  *"{dev}"*) echo "wipefs: error: {dev}: probing initialization failed: Permission denied" >&2; exit 1 ;;
esac
exec {real} "$@"
"""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def host_provisioning(root: Path) -> dict[str, object]:
    """agent.yml kept off this machine's /etc, packages, users and services (every path under ``root``)."""
    root.mkdir(parents=True, exist_ok=True)
    return {"lab_packages_install": False, "lab_agent_install": False, "lab_agent_start": False,
            "lab_agent_user": "root", "lab_agent_state_dir": str(root / "state"),
            "lab_agent_log_dir": str(root / "log"), "lab_agent_run_dir": str(root / "run"),
            "lab_agent_script": str(root / "storagelab-agent-ctl"), "lab_agent_unit_dir": str(root / "units"),
            "lab_agent_udev_rules_file": str(root / "60-storagelab.rules"), "lab_agent_udev_reload": False,
            "io_tuning_udev_rules_file": str(root / "60-sched.rules"), "io_tuning_udev_reload": False,
            "io_tuning_sysctl_file": str(root / "60-sysctl.conf"), "io_tuning_sysctl_apply": False}


def random_dut(lab: Lab, name: str) -> Dut:
    dut = lab.make_dut(name, 16)
    assert dut.loop, "needs a loop device"
    with open(dut.loop, "r+b") as fh:                  # random data the purge would destroy
        fh.write(os.urandom(1 << 20))
        os.fsync(fh.fileno())
    return dut


@pytest.fixture(scope="module")
def ansible_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """``bare`` declared without allow; ``probe`` allows purge (and wipe_ok) but its wipefs probe fails."""
    tmp = tmp_path_factory.mktemp("redteam-ansible")
    lab = Lab(tmp / "lab")
    try:
        lab.start_redis()
        bare, probe = random_dut(lab, "bare"), random_dut(lab, "probe")
        fake = tmp / "fakebin"
        fake.mkdir()
        wipefs = fake / "wipefs"
        wipefs.write_text(FAILING_WIPEFS.format(dev=probe.loop, real=shutil.which("wipefs")))
        wipefs.chmod(0o755)
        inv = local_inventory(
            tmp / "inv",
            [{"name": "bare", "kind": "loop", "path": bare.loop},
             {"name": "probe", "kind": "loop", "path": probe.loop, "allow": ["purge", "op_mode"], "wipe_ok": True}],
            lab_state_dir=str(tmp / "dut-state"), **host_provisioning(tmp / "host"),
            lab_dut_environment={"PATH": f"{fake}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"})
        load_inventory(inv)
        store = f"sqlite:///{tmp / 'lab' / 'store.sqlite'}"
        controller = lab.start_controller(store, extra=("--inventory", str(inv)))
        agent = lab.start_agent("localhost", [f"bare={bare.loop}", f"probe={probe.loop}"])
        handle = LabHandle(lab, store, sessions(make_engine(store)), "localhost", {"bare": bare, "probe": probe},
                           controller, agent)
        handle.wait_registered()
        yield handle
    finally:
        lab.stop()


def refused_before_fio(lab: LabHandle, device: str) -> RunDetail:
    """A provisioned run of the one DUT: it fails at its dut_state step; no measurement was dispatched."""
    before = {name: sha(d.backing) for name, d in lab.duts.items()}
    d = lab.wait_run(lab.submit(SUITE, device), timeout=240)
    assert d.run.state == "FAILED", (d.run.state, [(st.name, st.state, st.reason) for st in d.steps])
    for st in d.steps:
        if st.kind == "measure":
            assert st.attempts == [] and st.state != "SUCCEEDED", (st.name, st.state)   # no fio started
    assert {name: sha(dut.backing) for name, dut in lab.duts.items()} == before
    assert lab.controller.alive() and lab.agent.alive()
    return d


def dut_state_reason(d: RunDetail) -> str:
    [step] = [st for st in d.steps if st.kind == "dut_state" and st.state == "FAILED"]
    return f"{step.reason} {step.note}"


def test_a_dut_declared_without_allow_is_not_purged(ansible_lab: LabHandle) -> None:
    loop = ansible_lab.duts["bare"].loop
    d = refused_before_fio(ansible_lab, "bare")
    reason = dut_state_reason(d)
    assert f"refusing purge on {loop}: DUT bare does not allow purge (allow: nothing)" in reason, reason


def test_a_failed_signature_probe_refuses(ansible_lab: LabHandle) -> None:
    loop = ansible_lab.duts["probe"].loop
    d = refused_before_fio(ansible_lab, "probe")
    reason = dut_state_reason(d)
    assert f"refusing purge on {loop}: signature probe failed: wipefs exited 1" in reason, reason
    assert "Permission denied" in reason


def test_a_device_path_with_a_command_substitution_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "Y"
    path = f"/dev/disk/by-id/X$(touch {marker})"
    inv = local_inventory(tmp_path / "inv", [{"name": "evil", "path": path, "serial": "S1", "allow": ["purge"]}],
                          lab_state_dir=str(tmp_path / "state"))
    with pytest.raises(InventoryError) as err:
        load_inventory(inv)
    assert f"{inv}/host_vars/localhost.yml: duts[0].path: {path!r}: not a safe device path" in str(err.value)

    # the controller reads the inventory at start: it refuses it, naming the file and the key
    lab = Lab(tmp_path / "lab")
    try:
        lab.start_redis()
        store = f"sqlite:///{tmp_path / 'lab' / 'store.sqlite'}"
        controller = lab.start_controller(store, extra=("--inventory", str(inv)))
        wait_for(lambda: not controller.alive(), 60, "the controller to refuse the inventory")
        assert controller.popen.returncode not in (0, None)
        log = controller.log.read_text()
        assert "duts[0].path" in log and "not a safe device path" in log, log
    finally:
        lab.stop()

    # handed to Ansible without the loader: the module takes it as one argument, never a shell word
    run = run_playbook("dut_state.yml", inv, tmp_path / "run", {"dut_op_mode": "hp:10"})
    [res] = run.item_results("Purge DUTs")
    assert run.status == "failed" and res["reason_codes"] == ["missing"], res
    facts = run_playbook("facts.yml", inv, tmp_path / "facts", {"facts_dir": str(tmp_path / "out")})
    assert facts.status == "failed"
    assert not marker.exists()
