"""The safety interlock on real loop devices, on both sides: the controller refuses before dispatch
from what the agent last observed; the agent refuses again at start from what it sees then. Nothing
is written either way (checksum of the backing file before and after)."""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import LabHandle, one_workload

pytestmark = pytest.mark.integration

WRITE = one_workload(1).replace("rw: randread", "rw: randwrite")
READ = one_workload(1)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mkfs(device: str) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True, capture_output=True)


def test_controller_refuses_a_write_on_a_dut_holding_ext4_before_dispatch(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    dut = lab.duts["dut0"]
    assert dut.loop
    mkfs(dut.loop)
    lab.lab.stop_proc(lab.agent)
    lab.restart_agent()                               # registers a fresh observation: ext4 on the DUT
    before = sha(dut.backing)
    d = lab.wait_run(lab.submit(WRITE), timeout=60)
    assert d.run.state == "FAILED"
    step = d.steps[0]
    assert step.reason.startswith(f"interlock: refusing write on {dut.loop}: carries a filesystem signature (ext4")
    assert not step.attempts                          # nothing was dispatched
    assert sha(dut.backing) == before
    d = lab.wait_run(lab.submit(READ), timeout=60)    # reading a device with a filesystem harms nothing
    assert d.run.state == "SUCCEEDED", d.run.reason


def test_agent_refuses_at_start_what_changed_since_it_registered(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    dut = lab.duts["dut0"]
    assert dut.loop
    mkfs(dut.loop)                                    # after the registration the controller judges by
    before = sha(dut.backing)
    d = lab.wait_run(lab.submit(WRITE), timeout=60)
    assert d.run.state == "FAILED"
    (att,) = d.steps[0].attempts
    assert att.reason.startswith(f"refused by agent: refusing write on {dut.loop}: carries a filesystem signature")
    assert sha(dut.backing) == before


def test_wipe_ok_lets_a_signature_through(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    dut = lab.duts["dut0"]
    assert dut.loop
    mkfs(dut.loop)
    lab.lab.stop_proc(lab.agent)
    t = time.time()
    lab.agent = lab.lab.start_agent(lab.host, [f"dut0={dut.loop}"], extra=("--wipe-ok", "dut0"))
    lab.wait_registered(after=t)
    d = lab.wait_run(lab.submit(WRITE), timeout=60)
    assert d.run.state == "SUCCEEDED", d.run.reason
