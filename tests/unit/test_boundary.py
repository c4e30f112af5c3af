"""Nothing the controller accepts can stop it (issue 29): a schedule's cron is judged with the scheduler's own
function, and every duty of the loop runs behind one boundary that sets the failing item aside with its reason
(a schedule disabled, a run marked, an attempt failed, a command answered) and goes on. Unit tier: the real
controller logic on a real SQLite store, a recording dispatcher, a clock the test moves."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

import orchestrator.controller.commands as commands_mod
import orchestrator.controller.notifying as notifying_mod
import orchestrator.controller.watchdogs as watchdogs_mod
from labcontract.protocol import ScheduleAdd, StepStarted, Submit
from orchestrator.controller import Controller
from orchestrator.controller.boundary import Boundary
from orchestrator.controller.lease import LeaseLost
from orchestrator.controller.notify import Notifier
from orchestrator.runs.cron import cron_problem, next_fire
from orchestrator.store.models import Run, Schedule
from tests.unit.conftest import Clock, RecordingDispatcher

SUITE = "suite: s\nprofiles:\n  - {name: a, rw: randread, bs: 4k, runtime: 1}\n"
Env = tuple[Controller, RecordingDispatcher, Clock, sessionmaker[Session]]


class Replies:
    """The redis calls a command's reply makes, recorded."""

    def __init__(self) -> None:
        self.lists: dict[str, list[dict[str, Any]]] = {}

    def lpush(self, key: str, value: str) -> None:
        self.lists.setdefault(key, []).append(json.loads(value))

    def expire(self, key: str, seconds: int) -> None:
        return None


def template(**kw: Any) -> Submit:
    return Submit(run_id="-", suite_source="s.yaml", suite_text=SUITE, host="h1", devices=("dut0",), reply_to="-",
                  **kw)


# --- the cron check -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cron", "why"), [
    ("0 0 1 1 * 0 2027", "it has 7"),                # croniter's seconds + year: fired once, then killed the loop
    ("0 0 1 1 * 2027", "it has 6"),
    ("0 0 30 2 *", "never fires"),
    ("0 0 31 2,4,6,9,11 *", "never fires"),
    ("61 * * * *", "is not a cron expression"),
    ("@daily", "it has 1"),
    ("x" * 300, "over 256"),
])
def test_a_cron_that_cannot_be_fired_is_refused_with_the_reason(cron: str, why: str) -> None:
    problem = cron_problem(cron, 1_795_000_000.0)
    assert problem is not None and why in problem


@pytest.mark.parametrize("cron", ["0 22 * * 1-5", "*/5 * * * *", "0 0 L 2 *", "0 0 * * 5#5", "0 0 29 2 *"])
def test_a_cron_that_fires_is_accepted_and_fires_forward(cron: str) -> None:
    now = 1_795_000_000.0
    assert cron_problem(cron, now) is None
    assert now < next_fire(cron, now) < next_fire(cron, next_fire(cron, now))


def test_the_controller_refuses_a_schedule_with_a_year(env: Env) -> None:
    ctl = env[0]
    reply = ctl.schedules(ScheduleAdd(name="once", cron="0 0 1 1 * 0 2027", submit=template(), reply_to="-"))
    assert not reply.ok and any(e.startswith("--cron: '0 0 1 1 * 0 2027' is not a cron expression of 5 fields")
                                for e in reply.errors), reply.errors


def test_times_past_2100_are_refused_by_the_message() -> None:
    # a not_before of 1e300 broke time.localtime in every scheduling pass (the queue's reasons)
    for field in ("not_before", "expires_at"):
        with pytest.raises(ValidationError, match="less than or equal to 4102444800"):
            template(**{field: 1e300})


# --- the boundary ---------------------------------------------------------------------------------------------

def test_a_duty_that_raises_is_counted_and_the_pass_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    b = Boundary()

    def boom() -> None:
        raise KeyError("a row it did not expect")
    with caplog.at_level(logging.ERROR):
        b.duty("schedules", boom)
        b.duty("schedules", boom)
    assert b.totals() == ({}, {"schedules": 2})
    assert "duty schedules failed (KeyError: 'a row it did not expect'); the controller goes on" in caplog.text
    assert caplog.text.count("Traceback") == 1          # the traceback once a minute, the line every time


def test_transient_faults_and_a_lost_lease_pass_through_the_boundary() -> None:
    b = Boundary()

    def down() -> None:
        raise redis.ConnectionError("refused")

    def lost() -> None:
        raise LeaseLost("taken over")
    with pytest.raises(redis.ConnectionError):
        b.duty("dispatch", down)
    with pytest.raises(LeaseLost):
        b.item("dispatch", "x", lost, lambda _why: None)
    assert b.totals() == ({}, {})


def test_a_schedule_that_cannot_be_fired_is_disabled_and_the_others_fire(env: Env) -> None:
    ctl, _disp, clock, db = env
    clock.t = 1_795_000_000.0     # 2026-11: the year-2020 schedule's last firing is past
    with db.begin() as s:         # a schedule accepted before the check (or written by an older controller)
        for name, cron in (("a-once", "0 0 1 1 * 0 2020"), ("b-nightly", "0 22 * * *")):
            s.add(Schedule(name=name, cron=cron, submit=template().model_dump(mode="json", exclude={"run_id",
                           "reply_to", "not_before", "expires_at"}), next_fire_at=clock.t - 1, created_at=clock.t))
    ctl.boundary.duty("schedules", ctl.fire_schedules)
    ctl.boundary.duty("schedules", ctl.fire_schedules)      # the next pass: no second try, no second run
    with db() as s:
        bad, good = s.get(Schedule, "a-once"), s.get(Schedule, "b-nightly")
        assert bad is not None and good is not None
        assert "CroniterBadDateError" in bad.disabled_reason and bad.disabled_reason.startswith("disabled ")
        assert good.disabled_reason == "" and good.last_run_id is not None and good.next_fire_at > clock.t
        runs = [r.submitted_by for r in s.query(Run).all()]
    assert sorted(runs) == ["schedule:b-nightly"]           # the disabled one's run was rolled back with it
    assert ctl.boundary.totals() == ({"schedules": 1}, {})


def _ended_run(ctl: Controller, db: sessionmaker[Session], run_id: str, *, scheduled: bool = False) -> None:
    with db.begin() as s:
        s.add(Run(id=run_id, suite_name="s", suite_source="s.yaml", suite_text=SUITE, suite_sha256="x" * 64,
                  host="h1", device="/dev/loop9", devices=["/dev/loop9"], state="SUCCEEDED", reason="",
                  submitted_at=ctl.clock(), ended_at=ctl.clock(), rerun_count=0,
                  submitted_by="schedule:nightly" if scheduled else "labctl"))


def test_a_notification_that_cannot_be_built_marks_its_run_and_the_others_go(env: Env, tmp_path: Any,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, _disp, _clock, db = env
    ctl.notifier = Notifier(files=[tmp_path / "n.jsonl"])
    for rid in ("r1", "r2"):
        _ended_run(ctl, db, rid)
    real = notifying_mod.payload

    def payload(run: Run, results: Any) -> dict[str, Any]:
        if run.id == "r1":
            raise ValueError("a figure it cannot format")
        return real(run, results)
    monkeypatch.setattr(notifying_mod, "payload", payload)
    ctl.notify()
    ctl.notify()
    with db() as s:
        r1, r2 = s.get(Run, "r1"), s.get(Run, "r2")
        assert r1 is not None and r2 is not None
        assert r1.set_aside == "notification not sent: ValueError: a figure it cannot format"
        assert r1.notified_at is not None and r2.notified_at is not None and r2.set_aside == ""
    assert [json.loads(x)["run"] for x in (tmp_path / "n.jsonl").read_text().splitlines()] == ["r2"]


def test_a_history_that_cannot_be_judged_marks_the_run_and_it_is_still_notified(
        env: Env, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, _disp, _clock, db = env
    ctl.notifier = Notifier(files=[tmp_path / "n.jsonl"])
    _ended_run(ctl, db, "r1", scheduled=True)
    import orchestrator.runhistory as runhistory

    def broken(s: Session, run_id: str) -> Any:
        raise ZeroDivisionError("a series of one")
    monkeypatch.setattr(runhistory, "run_history", broken)
    ctl.notify()
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.notified_at is not None
        assert run.set_aside == "history not judged: ZeroDivisionError: a series of one"
    (line,) = (tmp_path / "n.jsonl").read_text().splitlines()
    assert json.loads(line)["regressions"] == []
    assert ctl.boundary.totals()[0] == {"history": 1}


def test_a_watchdog_that_fails_on_one_attempt_fails_that_attempt_only(env: Env,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, disp, clock, db = env
    for n in (1, 2):
        ctl.submit(Submit(run_id=f"w{n}", suite_source="s.yaml", suite_text=SUITE, host="h1", devices=("dut0",),
                          reply_to="-"))
    ctl.schedule()
    (first,) = disp.starts()
    ctl.handle_event(StepStarted(host="h1", attempt_id=first.attempt_id, pid=1, fio_started_at=clock.t,
                                 job_sha256="x"))
    real = watchdogs_mod.WatchdogsMixin._overdue

    def overdue(self: Any, att: Any, now: float) -> bool:
        if att.id == first.attempt_id:
            raise TypeError("a deadline of the wrong type")
        return real(self, att, now)
    monkeypatch.setattr(watchdogs_mod.WatchdogsMixin, "_overdue", overdue)
    ctl.boundary.duty("watchdogs", ctl.watch)
    with db() as s:
        run = s.get(Run, "w1")
        assert run is not None and run.state == "FAILED"
        assert "the controller could not watch this attempt: TypeError: a deadline of the wrong type" in run.reason
    assert ctl.boundary.totals() == ({"watchdogs": 1}, {})


def test_a_command_whose_handler_raises_is_answered_and_set_aside(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    ctl = env[0]
    replies = Replies()
    ctl.redis = replies  # type: ignore[assignment]

    def plan(*_a: Any, **_k: Any) -> list[Any]:
        raise RuntimeError("a plan it cannot make")
    monkeypatch.setattr(commands_mod, "plan", plan)
    cmd = Submit(run_id="r9", suite_source="s.yaml", suite_text=SUITE, host="h1", devices=("dut0",),
                 reply_to="lab:reply:t1")
    with pytest.raises(RuntimeError):           # the intake dead-letters it (tests/redteam/test_redteam_trust.py)
        ctl.handle_command(cmd.model_dump_json())
    (reply,) = replies.lists["lab:reply:t1"]
    assert reply["ok"] is False and reply["errors"] == [
        "the controller could not apply this submit and set it aside: RuntimeError: a plan it cannot make"]
