"""Loss, orphans, retries, timeouts and quarantine in the controller's logic (real SQLite store,
recording dispatcher); the same faults done for real are in tests/integration/test_faults.py."""

from __future__ import annotations

from typing import Any

from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import (
    CancelStep,
    HealthCheck,
    Heartbeat,
    Register,
    Release,
    ReportStep,
    StepEnded,
    StepStarted,
    StepUnknown,
    Submit,
)
from orchestrator.runs.scheduling import decide
from orchestrator.store.models import Attempt, Device, Host, Run, Step
from tests.unit.test_controller import SUITE, ended, submit

RETRY3 = SUITE.replace("profiles:", "retry: {max_attempts: 3, when: [lost, timeout, error]}\nprofiles:")
REPURGE = SUITE.replace("profiles:", "phases: {purge: true}\nretry: {repurge: true}\nprofiles:")


def submit_text(ctl: Any, text: str, run_id: str = "r1") -> None:
    assert ctl.submit(Submit(run_id=run_id, suite_source="x.yaml", suite_text=text, host="h1",
                             devices=("dut0",), reply_to="-")).ok


def start(ctl: Any, disp: Any, clock: Any) -> str:
    ctl.schedule()
    att = disp.starts()[-1].attempt_id
    ctl.handle_event(StepStarted(host="h1", attempt_id=att, pid=7, fio_started_at=clock.t, job_sha256="x"))
    return str(att)


def lose(ctl: Any, clock: Any) -> None:
    clock.t += 11
    ctl.watch()


def come_back(ctl: Any, clock: Any) -> None:
    ctl.handle_event(Heartbeat(host="h1"))


def cancels(disp: Any) -> list[CancelStep]:
    return [m for kind, _h, m in disp.sent if kind == "cancel"]


def test_returning_host_has_its_orphan_stopped_then_the_step_is_retried(env: Any,
                                                                        fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, clock, db = env
    submit(ctl)
    a1 = start(ctl, disp, clock)
    lose(ctl, clock)
    with db() as s:
        att = s.get(Attempt, a1)
        assert att.state == "LOST" and att.lost_at == clock.t
    ctl.schedule()
    assert len(disp.starts()) == 1                     # nothing runs on the device while the step is LOST
    # the agent restarts: it re-adopts the fio it finds and registers
    ctl.handle_event(StepStarted(host="h1", attempt_id=a1, pid=7, fio_started_at=clock.t, job_sha256="x",
                                 adopted=True))
    ctl.handle_event(Register(host="h1", agent_version="0.1.0", facts=HostFacts(hostname="h1"), running=(a1,),
                              duts=(DeclaredDut(name="dut0", path="/dev/loop9", kind="block", size_bytes=1),)))
    assert [c.attempt_id for c in cancels(disp)] == [a1] and "orphan" in cancels(disp)[0].reason
    assert ("report", "h1", ReportStep(attempt_id=a1)) in disp.sent
    ctl.schedule()
    assert len(disp.starts()) == 1                     # not before the orphan is known to have stopped
    ctl.handle_event(StepEnded(host="h1", attempt_id=a1, outcome="cancelled", reason="orphan ..."))
    with db() as s:
        att = s.get(Attempt, a1)
        assert att.state == "FAILED" and "orphaned fio was stopped" in att.reason
        assert att.step.state == "PENDING" and att.step.reason.startswith("retrying (lost): attempt 1 of 2")
    ctl.schedule()
    a2 = disp.starts()[-1].attempt_id
    assert a2 == a1.replace("-a1", "-a2")
    ctl.handle_event(ended(a2, fio_outputs["4k-randread"]))
    with db() as s:
        step = s.get(Attempt, a2).step
        assert step.state == "SUCCEEDED" and step.attempts[-1].result is not None
        assert step.attempts[0].result is None


def test_output_finished_while_the_host_was_away_is_collected(env: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, clock, db = env
    submit(ctl)
    a1 = start(ctl, disp, clock)
    lose(ctl, clock)
    come_back(ctl, clock)                              # a network cut healed: heartbeats resume, no register
    ctl.watch()
    assert cancels(disp) and ("report", "h1", ReportStep(attempt_id=a1)) in disp.sent
    ctl.handle_event(ended(a1, fio_outputs["4k-randread"]))     # it had finished: the stop came too late
    with db() as s:
        att = s.get(Attempt, a1)
        assert att.state == "SUCCEEDED" and att.result is not None and "output collected" in att.reason
    assert len(disp.starts()) == 1


def test_a_host_that_never_returns_fails_the_run_and_its_orphan_is_stopped_later(env: Any) -> None:
    ctl, disp, clock, db = env
    submit(ctl)
    a1 = start(ctl, disp, clock)
    lose(ctl, clock)
    clock.t += ctl.tuning.lost_give_up_s
    ctl.watch()
    with db() as s:
        run = s.get(Run, "r1")
        assert run.state == "FAILED" and "gave up" in run.reason
        assert all(st.state == "FAILED" for st in run.steps)
    ctl.handle_event(StepStarted(host="h1", attempt_id=a1, pid=7, fio_started_at=clock.t, job_sha256="x",
                                 adopted=True))
    assert [c.attempt_id for c in cancels(disp)] == [a1]


def test_retries_stop_at_max_attempts(env: Any) -> None:
    ctl, disp, clock, db = env
    submit(ctl)                                        # default policy: 2 attempts, on lost and timeout
    for _ in range(2):
        att = start(ctl, disp, clock)
        ctl.handle_event(StepEnded(host="h1", attempt_id=att, outcome="timeout", reason="step timeout reached"))
    with db() as s:
        run = s.get(Run, "r1")
        first = run.steps[0]
        assert first.state == "FAILED" and [a.state for a in first.attempts] == ["FAILED", "FAILED"]
        assert first.attempts[0].reason.startswith("timeout:")
    assert len(disp.starts()) == 2


def test_fio_errors_are_retried_only_when_the_suite_says_so(env: Any) -> None:
    ctl, disp, clock, db = env
    submit(ctl)
    att = start(ctl, disp, clock)
    ctl.handle_event(StepEnded(host="h1", attempt_id=att, outcome="exited", exit_code=1))
    with db() as s:
        assert s.get(Attempt, att).step.state == "FAILED"


def test_fio_errors_retried_up_to_max_attempts(env: Any) -> None:
    ctl, disp, clock, db = env
    submit_text(ctl, RETRY3)
    for n in range(3):
        att = start(ctl, disp, clock)
        assert att.endswith(f"-a{n + 1}")
        ctl.handle_event(StepEnded(host="h1", attempt_id=att, outcome="exited", exit_code=1))
    with db() as s:
        assert s.get(Attempt, att).step.state == "FAILED" and len(s.get(Attempt, att).step.attempts) == 3


def test_refused_and_cancelled_steps_are_never_retried(env: Any) -> None:
    ctl, disp, clock, db = env
    submit_text(ctl, RETRY3)
    att = start(ctl, disp, clock)
    ctl.handle_event(StepEnded(host="h1", attempt_id=att, outcome="refused", reason="not declared"))
    with db() as s:
        assert s.get(Run, "r1").state == "FAILED"
    assert len(disp.starts()) == 1


def test_controller_stops_an_overdue_step_and_retries_it(env: Any) -> None:
    ctl, disp, clock, db = env
    submit(ctl)
    att = start(ctl, disp, clock)
    with db() as s:
        timeout = s.get(Attempt, att).timeout_s
    clock.t += timeout + ctl.tuning.timeout_grace_s - 1
    ctl.handle_event(Heartbeat(host="h1"))
    ctl.watch()
    assert not cancels(disp)
    clock.t += 2
    ctl.handle_event(Heartbeat(host="h1"))
    ctl.watch()
    ctl.watch()                                        # asked once per ask_again_s, not every pass
    assert len(cancels(disp)) == 1 and "deadline" in cancels(disp)[0].reason
    ctl.handle_event(StepEnded(host="h1", attempt_id=att, outcome="cancelled", reason=cancels(disp)[0].reason))
    with db() as s:
        a = s.get(Attempt, att)
        assert a.state == "FAILED" and a.stop_cause == "timeout" and a.step.state == "PENDING"


def test_repurge_runs_before_the_retried_step(env: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, clock, _db = env
    submit_text(ctl, REPURGE)
    purge = start(ctl, disp, clock)
    assert disp.starts()[-1].action == "purge"
    ctl.handle_event(StepEnded(host="h1", attempt_id=purge, outcome="exited", exit_code=0))
    measure = start(ctl, disp, clock)
    ctl.handle_event(StepUnknown(host="h1", attempt_id=measure))     # the agent lost its state: retried
    ctl.schedule()
    again = disp.starts()[-1]
    assert again.action == "purge" and again.step_id.endswith("-rp2")
    ctl.handle_event(StepStarted(host="h1", attempt_id=again.attempt_id, pid=8, fio_started_at=clock.t,
                                 job_sha256="x"))
    ctl.handle_event(StepEnded(host="h1", attempt_id=again.attempt_id, outcome="exited", exit_code=0))
    ctl.schedule()
    retry = disp.starts()[-1]
    assert retry.attempt_id == measure.replace("-a1", "-a2") and retry.action == "fio"


def check(kind: str, ok: bool, detail: str = "", observed: str | None = None, target: str = "/dev/loop9") -> Any:
    return HealthCheck(check=kind, target=target, ok=ok, detail=detail, observed=observed)


def queue_waits(ctl: Any, db: Any) -> dict[str, str]:
    with db() as s:
        runs = list(s.query(Run).all())
        hosts = {h.name: h for h in s.query(Host).all()}
        return decide(runs, hosts, ctl.clock(), ctl.host_up).waits


def test_failing_device_is_quarantined_after_n_checks_and_released(env: Any) -> None:
    ctl, disp, _clock, db = env
    for n in range(ctl.tuning.quarantine_after):
        with db() as s:
            assert s.get(Host, "h1").devices[0].quarantined_at is None, n
        ctl.handle_event(Heartbeat(host="h1", health=(check("present", False, "has size 0"),)))
    with db() as s:
        dev = s.get(Host, "h1").devices[0]
        assert dev.quarantined_at is not None and "present check failed 3 times in a row: has size 0" in \
            dev.quarantine_reason
    submit(ctl)
    ctl.schedule()
    assert not disp.starts()
    assert "quarantined" in queue_waits(ctl, db)["r1"]
    reply = ctl.release(Release(host="h1", device="dut0", reply_to="-"))
    assert reply.ok
    ctl.schedule()
    assert len(disp.starts()) == 1
    assert not ctl.release(Release(host="h1", reply_to="-")).ok          # nothing quarantined any more


def test_a_passing_check_resets_the_count(env: Any) -> None:
    ctl, _disp, _clock, db = env
    for ok in (False, False, True, False, False):
        ctl.handle_event(Heartbeat(host="h1", health=(check("smart", ok, "critical_warning=0x04"),)))
    with db() as s:
        assert s.get(Host, "h1").devices[0].quarantined_at is None


def test_agent_self_test_quarantines_the_host_and_fails_its_started_run(env: Any,
                                                                       fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, clock, db = env
    submit(ctl)
    att = start(ctl, disp, clock)
    for _ in range(3):
        ctl.handle_event(Heartbeat(host="h1", health=(check("agent", False, "fio binary 'fio' not found",
                                                            target="h1"),)))
    ctl.handle_event(ended(att, fio_outputs["4k-randread"]))     # the running step finishes and is kept
    ctl.schedule()
    with db() as s:
        run = s.get(Run, "r1")
        assert run.state == "FAILED" and "host h1 quarantined" in run.reason
        assert run.steps[0].state == "SUCCEEDED" and run.steps[1].state == "FAILED"
        assert s.get(Host, "h1").quarantine_reason.startswith("agent check failed 3 times")
    assert len(disp.starts()) == 1


def test_a_replaced_device_fails_the_serial_check(env: Any) -> None:
    ctl, _disp, _clock, db = env
    with db.begin() as s:
        s.get(Host, "h1").devices[0].serial = "S4EVNX0R123456"
    dut = DeclaredDut(name="dut0", path="/dev/loop9", kind="block", size_bytes=1 << 30, serial="S4EVNX0R999999")
    ctl.handle_event(Register(host="h1", agent_version="0.1.0", facts=HostFacts(hostname="h1"), duts=(dut,)))
    for _ in range(3):
        ctl.handle_event(Heartbeat(host="h1", health=(check("serial", True, observed="S4EVNX0R999999"),)))
    with db() as s:
        dev: Device = s.get(Host, "h1").devices[0]
        assert dev.serial == "S4EVNX0R123456"
        assert "expected S4EVNX0R123456 (device replaced?)" in dev.quarantine_reason
    assert ctl.release(Release(host="h1", device="/dev/loop9", reply_to="-")).ok
    with db() as s:
        dev = s.get(Host, "h1").devices[0]
        assert dev.serial == "S4EVNX0R999999" and dev.quarantined_at is None


def test_steps_order_puts_a_repurge_first() -> None:
    from orchestrator.runs.scheduling import next_pending

    run = Run(id="r", steps=[Step(id="m", seq=3, round=0, kind="measure", state="PENDING"),
                             Step(id="p", seq=3, round=-1, kind="purge", state="PENDING")])
    assert next_pending(run).id == "p"  # type: ignore[union-attr]
