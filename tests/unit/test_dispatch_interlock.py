"""The controller's half of the safety interlock: it judges a destructive step before dispatch by the
observation the agent registered with; reads pass, wipe_ok lifts a signature only."""

from __future__ import annotations

from typing import Any

from labcontract import interlock
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import Register
from orchestrator.store.models import Run
from tests.unit.test_fault_logic import submit_text

EXT4 = interlock.ObservedState(path="/dev/loop9", real_path="/dev/loop9",
                               signatures=(interlock.Signature(type="ext4", kind="filesystem", offset="0x438"),))
MOUNTED = interlock.ObservedState(path="/dev/loop9", real_path="/dev/loop9", mountpoints=("/mnt/x",))
WRITE = "suite: w\nprofiles:\n  - {name: seqwrite, rw: write, bs: 128k, runtime: 1}\n"
READ = "suite: r\nprofiles:\n  - {name: seqread, rw: read, bs: 128k, runtime: 1}\n"
PURGE_READ = READ.replace("profiles:", "phases: {purge: true}\nprofiles:")


def register(ctl: Any, observed: interlock.ObservedState, *, wipe_ok: bool = False) -> None:
    dut = DeclaredDut(name="dut0", path="/dev/loop9", kind="block", size_bytes=1 << 30, wipe_ok=wipe_ok,
                      observed=interlock.observed_to_dict(observed))
    ctl.handle_event(Register(host="h1", agent_version="0.1.0", facts=HostFacts(hostname="h1"), duts=(dut,)))


def test_a_write_on_a_device_with_a_filesystem_is_never_dispatched(env: Any) -> None:
    ctl, disp, _clock, db = env
    register(ctl, EXT4)
    submit_text(ctl, WRITE)
    ctl.schedule()
    assert not disp.starts()
    with db() as s:
        run = s.get(Run, "r1")
        assert run.state == "FAILED"
        assert run.steps[0].reason == ("interlock: refusing write on /dev/loop9: carries a filesystem signature "
                                       "(ext4 at offset 0x438)")


def test_reads_pass_and_a_purge_does_not(env: Any) -> None:
    ctl, disp, _clock, db = env
    register(ctl, EXT4)
    submit_text(ctl, READ)
    ctl.schedule()
    assert len(disp.starts()) == 1
    submit_text(ctl, PURGE_READ, run_id="r2")
    with db.begin() as s:
        s.get(Run, "r1").state = "SUCCEEDED"           # free the device
    ctl.schedule()
    with db() as s:
        assert "refusing purge on /dev/loop9" in s.get(Run, "r2").steps[0].reason
    assert len(disp.starts()) == 1


def test_wipe_ok_lifts_the_signature_but_not_a_mount(env: Any) -> None:
    ctl, disp, _clock, db = env
    register(ctl, EXT4, wipe_ok=True)
    submit_text(ctl, WRITE)
    ctl.schedule()
    assert len(disp.starts()) == 1
    with db.begin() as s:
        s.get(Run, "r1").state = "SUCCEEDED"
    register(ctl, MOUNTED, wipe_ok=True)
    submit_text(ctl, WRITE, run_id="r2")
    ctl.schedule()
    with db() as s:
        assert "mounted on /mnt/x" in s.get(Run, "r2").steps[0].reason


def test_a_provisioning_suite_needs_a_controller_with_an_inventory(env: Any) -> None:
    ctl, disp, _clock, db = env
    text = READ.replace("profiles:", "phases: {purge: true, provision: true}\nprofiles:")
    from labcontract.protocol import Submit

    reply = ctl.submit(Submit(run_id="r1", suite_source="p.yaml", suite_text=text, host="h1", devices=("dut0",),
                              reply_to="-"))
    assert not reply.ok
    assert reply.errors == ("phases.provision: this suite provisions its DUTs through Ansible; the controller runs "
                            "without an inventory (labctl controller --inventory DIR)",)
    with db() as s:
        assert s.get(Run, "r1") is None
    assert not disp.sent
