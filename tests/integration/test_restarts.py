"""Restarts of agent and controller neither lose nor duplicate a step; undeclared devices are refused."""

from __future__ import annotations

import hashlib
import signal
import time
import uuid

import pytest

from labcontract.protocol import StartStep
from labcontract.suite import parse_suite
from orchestrator.controller.dispatch import Dispatcher
from orchestrator.labs.lab import wait_for
from tests.conftest import LabHandle, events_tail, one_workload, pid_alive

pytestmark = pytest.mark.integration


def _fio_pid(d: object) -> int:
    att = d.steps[0].attempts[0]  # type: ignore[attr-defined]
    assert att.pid
    return int(att.pid)


def test_agent_killed_mid_fio_readopts_it(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    run_id = lab.submit(one_workload(6))
    d = lab.wait_step_state(run_id, "RUNNING")
    pid = _fio_pid(d)
    lab.lab.stop_proc(lab.agent, signal.SIGKILL)
    assert pid_alive(pid), "fio must survive its agent"
    lab.restart_agent()
    d = lab.wait_run(run_id, timeout=60)
    assert d.run.state == "SUCCEEDED", d.run.reason
    (att,) = d.steps[0].attempts
    res = d.results[d.steps[0].id]
    assert att.pid == pid and res.attempt_id == att.id
    assert 5500 <= res.runtime_ms <= 7000        # one fio, run to its end, not restarted


def test_fio_finished_while_agent_was_away_is_reported(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    run_id = lab.submit(one_workload(2))
    d = lab.wait_step_state(run_id, "RUNNING")
    pid = _fio_pid(d)
    lab.lab.stop_proc(lab.agent, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), 30, "fio to finish without its agent")
    assert lab.detail(run_id).steps[0].state in ("RUNNING", "LOST")
    lab.restart_agent()
    d = lab.wait_run(run_id, timeout=60)
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert len(d.steps[0].attempts) == 1 and d.results[d.steps[0].id].iops > 0


def test_controller_restart_loses_nothing(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    suite = ("suite: three\nprofiles:\n" + "".join(
        f"  - {{name: w{i}, rw: randread, bs: 4k, iodepth: 4, runtime: 2s}}\n" for i in range(3)))
    run_id = lab.submit(suite)
    lab.wait_step_state(run_id, "RUNNING")
    lab.lab.stop_proc(lab.controller, signal.SIGKILL)
    time.sleep(0)  # the agent carries on alone; its events wait in the stream
    wait_for(lambda: any(b"step_ended" in f.get("data", "").encode() for f in events_tail(lab.broker)),
             30, "the agent to report the end while the controller is down")
    lab.restart_controller()
    d = lab.wait_run(run_id, timeout=90)
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert [len(st.attempts) for st in d.steps] == [1, 1, 1]
    assert len(d.results) == 3


def test_agent_refuses_undeclared_device_and_writes_nothing(fresh_lab: LabHandle) -> None:
    """A run queued for dut1; the agent comes back declaring only dut0: it refuses the step."""
    lab = fresh_lab
    dut1 = lab.duts["dut1"]
    before = hashlib.sha256(dut1.backing.read_bytes()).hexdigest()
    lab.lab.stop_proc(lab.agent, signal.SIGKILL)
    run_id = lab.submit(one_workload(1, "write-it").replace("randread", "randwrite"), device="dut1")
    lab.wait_step_state(run_id, "DISPATCHED")
    lab.restart_agent([f"dut0={lab.duts['dut0'].path}"])
    d = lab.wait_run(run_id, timeout=60)
    assert d.run.state == "FAILED"
    reason = d.steps[0].reason
    assert reason.startswith("refused by agent: host testhost refuses device") and dut1.path in reason
    assert "not a declared DUT" in reason
    assert hashlib.sha256(dut1.backing.read_bytes()).hexdigest() == before


def test_redelivered_start_runs_fio_once(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    w = parse_suite(one_workload(2), "x").workloads[0]
    attempt = f"manual-{uuid.uuid4().hex[:6]}"
    msg = StartStep(run_id="manual", step_id="manual-s000", attempt_id=attempt, host=lab.host,
                    devices=(lab.duts["dut0"].path,), job_name=w.name, workload=w, timeout_s=60,
                    dispatched_at=time.time())
    disp = Dispatcher(lab.broker, expires_s=30)
    try:
        for _ in range(3):
            disp.start(msg)
    finally:
        disp.close()

    attempt_dir = lab.lab.root / "agents" / lab.host / "attempts" / attempt
    wait_for(lambda: (attempt_dir / "reported").exists(), 30, "the manual attempt to end and be reported")
    log = lab.agent.log.read_text()
    assert log.count(f"attempt {attempt} started fio pid") == 1, log
    assert log.count(f"attempt {attempt} already known; start ignored (redelivery)") == 2, log
    assert (attempt_dir / "rc").read_text().strip() == "0"
    assert [p.name for p in attempt_dir.parent.iterdir() if p.name.startswith(attempt)] == [attempt]


def test_redis_crash_loses_no_queued_submission(fresh_lab: LabHandle) -> None:
    """A submission waits in the broker while the controller is down; redis-server is killed (SIGKILL)
    and restarted from its append-only file; the controller comes back and runs it."""
    from labcontract.suite import parse_suite
    from orchestrator.runs.client import ControllerClient
    from orchestrator.store.models import Run

    lab = fresh_lab
    lab.lab.stop_proc(lab.controller, signal.SIGKILL)
    suite = parse_suite(one_workload(1, "after-crash"), "crash.yaml")
    run_id, reply = ControllerClient(lab.redis(), timeout_s=0.5).submit(suite, lab.host, ["dut0"])
    assert reply is None                                  # nobody answered: it waits in the broker

    aof = lab.lab.root / "redis"

    def persisted() -> bool:                              # appendfsync everysec: on disk within ~1 s
        return any(run_id.encode() in f.read_bytes() for f in aof.rglob("*") if f.is_file())
    wait_for(persisted, 10, "the submission to reach redis's append-only file")
    lab.lab.restart_redis(signal.SIGKILL)
    lab.restart_controller()

    def queued() -> bool:
        lab.check_alive()
        with lab.sessions() as s:
            return s.get(Run, run_id) is not None
    wait_for(queued, 60, "the restarted controller to take the submission from the restored stream")
    d = lab.wait_run(run_id, timeout=90)
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert len(d.steps[0].attempts) == 1 and d.results[d.steps[0].id].iops > 0
