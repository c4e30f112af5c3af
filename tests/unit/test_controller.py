"""Controller logic on a real SQLite store, with a recording dispatcher in place of Celery."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from labcontract.errors import InvalidTransition
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import (
    Artifact,
    Heartbeat,
    Register,
    StepEnded,
    StepStarted,
    Submit,
)
from orchestrator.config import ControllerTuning
from orchestrator.controller import Controller
from orchestrator.states import StepState, check_step
from orchestrator.store.models import Attempt, Result, Run

SUITE = """\
suite: two
profiles:
  - {name: 4k-randread, rw: randread, bs: 4k, iodepth: 8, runtime: 1}
  - {name: 8k-randrw, rw: randrw, bs: 8k, rwmixread: 70, iodepth: 4, numjobs: 2, runtime: 1}
"""


def submit(ctl: Controller, host: str = "h1", device: str = "dut0", run_id: str = "r1") -> Any:
    return ctl.submit(Submit(run_id=run_id, suite_source="two.yaml", suite_text=SUITE, host=host,
                             devices=(device,), reply_to="-"))


def ended(attempt_id: str, fio_json: bytes, **kw: Any) -> StepEnded:
    arts = (Artifact.of("fio.json", fio_json), Artifact.of("job.fio", b"[global]\n"))
    return StepEnded(host="h1", attempt_id=attempt_id, outcome=kw.pop("outcome", "exited"),
                     exit_code=kw.pop("exit_code", 0), fio_started_at=1.0, fio_ended_at=2.0,
                     artifacts=arts, **kw)


def test_submission_problems_name_host_and_device(env: Any) -> None:
    ctl, *_ = env
    r = submit(ctl, host="nohost")
    assert not r.ok and r.errors == ("--host: unknown host 'nohost' (known: h1)",)
    r = submit(ctl, device="dut7")
    assert not r.ok and "--device: 'dut7' is not a declared DUT of host h1 (declared: dut0 (/dev/loop9))" in r.errors
    bad = ctl.submit(Submit(run_id="r9", suite_source="bad.yaml", suite_text="suite: b\nprofiles:\n"
                            "  - {name: a, rw: read, bs: 4q}\n", host="nohost", devices=("d",), reply_to="-"))
    assert not bad.ok and len(bad.errors) == 2   # the suite's problem and the host's, together


def test_an_engine_the_hosts_os_lacks_is_refused_at_submit(env: Any) -> None:
    """One suite runs on Linux and Windows hosts (libaio is windowsaio there); windowsaio on a Linux host and
    pvsync2 on a Windows host are refused before anything is queued. A host whose agent sent no OS family
    (older agents) is not judged here: its agent refuses the step."""
    ctl, *_ = env
    for host, family, path in (("lin", "linux", "/dev/loop7"), ("win", "windows", "//./PhysicalDrive2")):
        ctl.handle_event(Register(host=host, agent_version="0.1.0", facts=HostFacts(hostname=host, os_family=family),
                                  duts=(DeclaredDut(name="dut0", path=path, kind="block", size_bytes=1 << 30),)))

    def with_engine(engine: str, host: str, run_id: str) -> Any:
        text = SUITE.replace("suite: two\n", f"suite: two\ndefaults: {{ioengine: {engine}}}\n")
        return ctl.submit(Submit(run_id=run_id, suite_source="two.yaml", suite_text=text, host=host,
                                 devices=("dut0",), reply_to="-"))

    r = with_engine("windowsaio", "lin", "r1")
    assert not r.ok and r.errors == ("ioengine: windowsaio is Windows' engine (host lin runs Linux)",), r.errors
    r = with_engine("pvsync2", "win", "r2")
    assert not r.ok and r.errors[0].startswith("ioengine: pvsync2 (preadv2/pwritev2"), r.errors
    assert r.errors[0].endswith("(host win runs Windows)"), r.errors
    assert with_engine("libaio", "win", "r3").ok and with_engine("windowsaio", "win", "r4").ok
    assert with_engine("windowsaio", "h1", "r5").ok, "h1 registered no OS family: its agent judges"


def test_what_only_linux_agents_run_is_refused_for_a_windows_host_at_submit(env: Any) -> None:
    """Purge, provisioning, application and network suites need Linux agents' kinds (agents.kinds
    StepKind.platforms): on a host that registered Windows they are submission errors naming the host."""
    ctl, *_ = env
    for host, family in (("lin", "linux"), ("win", "windows")):
        ctl.handle_event(Register(host=host, agent_version="0.1.0", facts=HostFacts(hostname=host, os_family=family),
                                  duts=(DeclaredDut(name="dut0", path="/dev/loop7" if family == "linux"
                                                    else "//./PhysicalDrive2", kind="block", size_bytes=1 << 30),)))

    def sub(text: str, host: str, run_id: str, **kw: Any) -> Any:
        kw.setdefault("devices", ("dut0",))
        return ctl.submit(Submit(run_id=run_id, suite_source="s.yaml", suite_text=text, host=host, reply_to="-",
                                 **kw))

    purge = SUITE.replace("suite: two\n", "suite: two\nphases: {purge: true}\n")
    r = sub(purge, "win", "r1")
    assert not r.ok and r.errors == ("phases.purge: a purge runs on Linux agents only; host win runs Windows",)
    app = ("suite: oltp\nkind: sysbench\ndevices: 1\n"
           "sysbench: {tables: 1, table_size: 100, threads: [2], time: 2}\n")
    r = sub(app, "win", "r2")
    assert not r.ok and r.errors == (
        "kind: a sysbench application suite runs on Linux agents only; host win runs Windows",), r.errors
    net = ("suite: net\nnetwork: {paths: [a]}\n"
           "profiles:\n  - {name: seq-128k-read, rw: read, bs: 128k, runtime: 5s}\n")
    r = sub(net, "lin", "r3", devices=(), initiators=("win",))
    assert not r.ok and "network: a network suite runs on Linux agents only; host win runs Windows" in r.errors
    assert sub(purge, "lin", "r4").ok and sub(app, "lin", "r5").ok and sub(SUITE, "win", "r6").ok
    assert sub(purge, "h1", "r7").ok, "h1 registered no OS family: its agent judges"


def test_rejected_submission_creates_nothing(env: Any) -> None:
    ctl, disp, _clock, db = env
    submit(ctl, device="nope")
    ctl.schedule()
    with db() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 0
    assert disp.sent == []


def test_full_run(env: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, clock, db = env
    assert submit(ctl).ok
    assert submit(ctl).ok          # a re-sent submission is not a second run
    ctl.schedule()
    ctl.schedule()                 # one step at a time per device
    (first,) = disp.starts()
    assert first.attempt_id == "r1-s000-a1" and first.devices == ("/dev/loop9",) and first.action == "fio"
    assert first.timeout_s == 1 + ControllerTuning().step_timeout_margin_s
    ctl.handle_event(StepStarted(host="h1", attempt_id=first.attempt_id, pid=42, fio_started_at=clock.t,
                                 job_sha256="x"))
    ctl.handle_event(ended(first.attempt_id, fio_outputs["4k-randread"]))
    ctl.handle_event(ended(first.attempt_id, b"garbage"))      # duplicate end: ignored
    ctl.schedule()
    second = disp.starts()[1]
    assert second.attempt_id == "r1-s001-a1"
    ctl.handle_event(ended(second.attempt_id, fio_outputs["8k-randrw"]))
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "SUCCEEDED"
        results = s.scalars(select(Result).order_by(Result.step_id)).all()
        assert len(results) == 2
        r0, r1 = results
        assert r0.read_iops > 0 and r0.write_iops == 0 and r0.iops == r0.read_iops
        assert r1.read_iops > 0 and r1.write_iops > 0
        assert r1.iops == pytest.approx(r1.read_iops + r1.write_iops)
        assert r0.lat_mean_ns and r0.lat_p99_ns and r0.lat_max_ns and r0.lat_stddev_ns
        assert r0.provenance["host"]["fio_version"] == "fio-3.33"
        assert r0.provenance["device"]["path"] == "/dev/loop9"
        att = s.get(Attempt, first.attempt_id)
        assert att is not None and {a.name for a in att.artifacts} == {"fio.json", "job.fio"}
        for a in att.artifacts:
            assert len(ctl.artifacts.read(a.path)) == a.size


def test_fio_failure_and_unparsable_output(env: Any) -> None:
    ctl, disp, _clock, db = env
    submit(ctl)
    ctl.schedule()
    a0 = disp.starts()[0].attempt_id
    ctl.handle_event(StepEnded(host="h1", attempt_id=a0, outcome="exited", exit_code=1,
                               artifacts=(Artifact.of("fio.stderr", b"fio: pid=1, err=5/file:io_u.c"),)))
    ctl.schedule()
    a1 = disp.starts()[1].attempt_id
    ctl.handle_event(ended(a1, b"not json at all"))
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "FAILED"
        assert "fio exited with code 1: fio: pid=1, err=5/file:io_u.c" in run.steps[0].reason
        assert "fio.json" in run.steps[1].reason
        assert run.reason.startswith("2 of 2 steps failed")


def test_corrupted_artifact_fails_the_step(env: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, _clock, db = env
    submit(ctl)
    ctl.schedule()
    a0 = disp.starts()[0].attempt_id
    good = Artifact.of("fio.json", fio_outputs["4k-randread"])
    bad = good.model_copy(update={"sha256": "0" * 64})
    ctl.handle_event(StepEnded(host="h1", attempt_id=a0, outcome="exited", exit_code=0, artifacts=(bad,)))
    with db() as s:
        att = s.get(Attempt, a0)
        assert att is not None and att.state == "FAILED" and "fio.json arrived corrupted" in att.reason
        assert att.result is None


def test_refusal_fails_the_rest(env: Any) -> None:
    ctl, disp, _clock, db = env
    submit(ctl)
    ctl.schedule()
    a0 = disp.starts()[0].attempt_id
    ctl.handle_event(StepEnded(host="h1", attempt_id=a0, outcome="refused",
                               reason="host h1 refuses device /dev/sdz: not a declared DUT"))
    ctl.schedule()
    assert len(disp.starts()) == 1
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "FAILED"
        assert run.steps[0].reason == "refused by agent: host h1 refuses device /dev/sdz: not a declared DUT"
        assert run.steps[1].state == "FAILED" and "not run" in run.steps[1].reason


def test_unstarted_dispatch_is_resent_then_failed(env: Any) -> None:
    ctl, disp, clock, db = env
    submit(ctl)
    ctl.schedule()
    tuning = ControllerTuning()
    for _ in range(tuning.dispatch_retries - 1):
        clock.t += tuning.dispatch_expires_s + 6
        ctl.handle_event(Heartbeat(host="h1"))
        ctl.watch()
    starts = disp.starts()
    assert len(starts) == tuning.dispatch_retries
    assert len({m.attempt_id for m in starts}) == 1       # the same attempt, never a second one
    clock.t += tuning.dispatch_expires_s + 6
    ctl.handle_event(Heartbeat(host="h1"))
    ctl.watch()
    with db() as s:
        att = s.get(Attempt, starts[0].attempt_id)
        assert att is not None and att.state == "FAILED" and "did not start it" in att.reason


def test_state_machine_refuses_illegal_moves() -> None:
    with pytest.raises(InvalidTransition, match="step s1: cannot go from SUCCEEDED to RUNNING"):
        check_step("step", "s1", "SUCCEEDED", StepState.RUNNING)
    assert check_step("step", "s1", "LOST", StepState.RUNNING) == StepState.RUNNING


def test_device_group_naming_a_device_twice_or_the_wrong_count_is_refused(env: Any) -> None:
    ctl, disp, _clock, db = env
    ctl.handle_event(Register(host="h1", agent_version="0.1.0", facts=HostFacts(hostname="h1"), duts=(
        DeclaredDut(name="dut0", path="/dev/loop9", kind="block", size_bytes=1 << 30),
        DeclaredDut(name="dut1", path="/dev/loop8", kind="block", size_bytes=1 << 30))))
    group = "suite: g\ndevices: 2\nprofiles:\n  - {name: a, rw: randread, bs: 4k, runtime: 1}\n"
    r = ctl.submit(Submit(run_id="g1", suite_source="g.yaml", suite_text=group, host="h1",
                          devices=("dut0", "/dev/loop9"), reply_to="-"))
    assert not r.ok
    assert "--device: '/dev/loop9' names device /dev/loop9 twice in one device group (also as 'dut0')" in r.errors
    r = ctl.submit(Submit(run_id="g2", suite_source="g.yaml", suite_text=group, host="h1", devices=("dut0",),
                          reply_to="-"))
    assert not r.ok and "--device: suite g takes 2 device(s); 1 named" in r.errors
    assert ctl.submit(Submit(run_id="g3", suite_source="g.yaml", suite_text=group, host="h1",
                             devices=("dut0", "dut1"), reply_to="-")).ok
    ctl.schedule()
    (msg,) = disp.starts()
    assert msg.devices == ("/dev/loop9", "/dev/loop8") and msg.run_id == "g3"
    with db() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 1


def test_a_step_that_cannot_be_started_fails_alone_and_the_loop_goes_on(env: Any, monkeypatch: Any) -> None:
    """A value that breaks one step's start message (data, not a fault) fails that step with the reason; the
    pass is redone step by step, so the other run on another host still starts, and schedule() never raises
    (it used to stop the controller, and again at every restart)."""
    ctl, disp, _clock, db = env
    ctl.handle_event(Register(host="h2", agent_version="0.1.0", facts=HostFacts(hostname="h2", fio_version="fio-3.33"),
                              duts=(DeclaredDut(name="dut0", path="/dev/loop8", kind="block", size_bytes=1 << 30),)))
    assert submit(ctl, run_id="rbad").ok and submit(ctl, host="h2", run_id="rgood").ok
    real = Controller._start_msg

    def broken(self: Controller, run: Any, step: Any, att: Any) -> Any:
        if run.id == "rbad":
            raise OverflowError("date value out of range")
        return real(self, run, step, att)

    monkeypatch.setattr(Controller, "_start_msg", broken)
    ctl.schedule()
    assert [m.run_id for m in disp.starts()] == ["rgood"]
    with db() as s:
        bad = s.get(Run, "rbad")
        assert bad is not None and bad.state == "FAILED"
        assert bad.steps[0].reason == "could not be started: OverflowError: date value out of range"
        assert all(st.state == "FAILED" for st in bad.steps) and not bad.steps[0].attempts
    ctl.schedule()                                  # and the next pass is an ordinary one
    assert [m.run_id for m in disp.starts()] == ["rgood"]


def test_result_devices_carry_driver_from_host_facts_and_lat_hist_is_stored(
        env: Any, fio_outputs: dict[str, bytes]) -> None:
    """The device entry is the declared DUT completed by the host's block-device facts (matched here by its
    by-id link); the merged histogram's percentiles are the result's own."""
    from labcontract.facts import BlockDevice
    from labcontract.fioresult import bin_percentiles

    ctl, disp, _clock, db = env
    link = "/dev/disk/by-id/virtio-lab0"
    block = BlockDevice(name="loop9", path="/dev/other-name", size_bytes=1 << 30, model="Lab Disk", serial="S1",
                        by_id=(link,), driver="virtio_blk", transport="virtio", controller="0000:00:02.0")
    ctl.handle_event(Register(host="h1", agent_version="0.13.0", facts=HostFacts(
        hostname="h1", fio_version="fio-3.33", block_devices=(block,), product_name="Lab VM"), duts=(
        DeclaredDut(name="dut0", path="/dev/loop9", kind="block", size_bytes=1 << 30, firmware="F1", by_id=link),)))
    assert submit(ctl).ok
    ctl.schedule()
    (first,) = disp.starts()
    ctl.handle_event(ended(first.attempt_id, fio_outputs["4k-randread"]))
    with db() as s:
        res = s.scalars(select(Result)).one()
        (dev,) = res.provenance["devices"]
        assert (dev["path"], dev["name"], dev["model"], dev["serial"], dev["firmware"], dev["size_bytes"]) == (
            "/dev/loop9", "dut0", "Lab Disk", "S1", "F1", 1 << 30)
        assert (dev["driver"], dev["transport"], dev["controller"]) == ("virtio_blk", "virtio", "0000:00:02.0")
        assert res.provenance["host"]["product_name"] == "Lab VM"
        hist = res.lat_hist
        assert hist is not None and hist["write"] == [] and "per_device" not in hist
        bins = {ns: c for ns, c in hist["read"]}
        # the lab's rule: p99.999 too when fio did 1,000,000 I/Os in its second (a fast machine's page cache)
        assert bin_percentiles(bins) == res.metrics["combined"]["percentiles_ns"]
