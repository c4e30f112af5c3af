"""Protocol 7 on the controller (real SQLite store, recording dispatcher): rerun, the actor of a command per stream,
token commands (web stream only), Submit.max_rounds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from labcontract.errors import ProtocolError
from labcontract.protocol import (
    COMMANDS_STREAM,
    WEB_COMMANDS_STREAM,
    Artifact,
    Cancel,
    Rerun,
    StepEnded,
    Submit,
    TokenCreate,
    TokenRevoke,
)
from orchestrator.controller import Controller
from orchestrator.store.models import ApiToken, PreconditionRecord, Run
from tests.unit.test_controller import SUITE, ended, submit
from tests.unit.test_intake import FakeRedis

PRECONDITION = """\
suite: pc
phases:
  precondition: {numjobs: 1, iodepth: 4, round: 1s, max_rounds: 50, window: 5}
profiles:
  - {name: 4k-randread, rw: randread, bs: 4k, iodepth: 8, runtime: 1}
"""
HASH = "ab" * 32


@pytest.fixture
def ctl_r(env: Any) -> tuple[Controller, Any, Any, Any, FakeRedis]:
    ctl, disp, clock, db = env
    r = FakeRedis()
    ctl.redis = r
    return ctl, disp, clock, db, r


def _failed_then_succeeded(ctl: Controller, disp: Any, fio: dict[str, bytes]) -> None:
    """Run r1: its first step fails (fio exit 1), its second succeeds: the run ends FAILED."""
    assert submit(ctl).ok
    ctl.schedule()
    a0 = disp.starts()[0].attempt_id
    ctl.handle_event(StepEnded(host="h1", attempt_id=a0, outcome="exited", exit_code=1,
                               artifacts=(Artifact.of("fio.stderr", b"fio: err=5"),)))
    ctl.schedule()
    ctl.handle_event(ended(disp.starts()[1].attempt_id, fio["8k-randrw"]))


def send(ctl: Controller, cmd: Any, stream: str = COMMANDS_STREAM) -> None:
    ctl.handle_command(cmd.model_dump_json(), stream)


def reply(r: FakeRedis, key: str) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(r.lists[key][-1])
    return got


def test_a_rerun_runs_only_the_failed_step_again_with_a_new_attempt(ctl_r: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, _clock, db, r = ctl_r
    _failed_then_succeeded(ctl, disp, fio_outputs)
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "FAILED" and run.rerun_count == 0
    send(ctl, Rerun(run_id="r1", reply_to="lab:reply:a"))
    assert reply(r, "lab:reply:a")["ok"] is True
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "QUEUED" and run.rerun_count == 1 and run.ended_at is None
        assert [st.state for st in run.steps] == ["PENDING", "SUCCEEDED"] and run.reason == ""
    ctl.schedule()
    again = disp.starts()[2]
    assert again.attempt_id == "r1-s000-a2"            # the next attempt number; a1 stays as history
    ctl.handle_event(ended(again.attempt_id, fio_outputs["4k-randread"]))
    ctl.schedule()
    assert len(disp.starts()) == 3                       # the step that succeeded is not run again
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "SUCCEEDED"
        assert [(a.number, a.state) for a in run.steps[0].attempts] == [(1, "FAILED"), (2, "SUCCEEDED")]
        assert [a.number for a in run.steps[1].attempts] == [1]


def test_a_rerun_is_refused_for_an_unknown_active_or_fully_succeeded_run(ctl_r: Any,
                                                                         fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, _clock, _db, r = ctl_r
    send(ctl, Rerun(run_id="nope", reply_to="lab:reply:u"))
    assert reply(r, "lab:reply:u")["errors"] == ["unknown run 'nope'"]
    assert submit(ctl).ok
    send(ctl, Rerun(run_id="r1", reply_to="lab:reply:q"))
    assert "only a run that ended can be rerun" in reply(r, "lab:reply:q")["errors"][0]
    ctl.schedule()
    ctl.handle_event(ended(disp.starts()[0].attempt_id, fio_outputs["4k-randread"]))
    ctl.schedule()
    ctl.handle_event(ended(disp.starts()[1].attempt_id, fio_outputs["8k-randrw"]))
    send(ctl, Rerun(run_id="r1", reply_to="lab:reply:s"))
    assert "has no failed or cancelled step" in reply(r, "lab:reply:s")["errors"][0]


def test_a_cancelled_run_reruns_its_cancelled_steps(ctl_r: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, _clock, db, r = ctl_r
    assert submit(ctl).ok
    ctl.schedule()
    first = disp.starts()[0].attempt_id
    send(ctl, Cancel(run_id="r1", reply_to="-"))
    ctl.handle_event(StepEnded(host="h1", attempt_id=first, outcome="cancelled", reason="cancelled by user"))
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "CANCELLED"
    send(ctl, Rerun(run_id="r1", reply_to="lab:reply:c"))
    assert reply(r, "lab:reply:c")["ok"] is True
    for name in ("4k-randread", "8k-randrw"):
        ctl.schedule()
        ctl.handle_event(ended(disp.starts()[-1].attempt_id, fio_outputs[name]))
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "SUCCEEDED" and run.reason == "" and run.rerun_count == 1
        assert [a.number for a in run.steps[0].attempts] == [1, 2]


def test_the_actor_is_the_web_services_only_on_its_stream(ctl_r: Any) -> None:
    ctl, _disp, _clock, db, _r = ctl_r
    base = {"suite_source": "two.yaml", "suite_text": SUITE, "host": "h1", "devices": ("dut0",), "reply_to": "-"}
    send(ctl, Submit(run_id="w1", actor="token:alice", **base), WEB_COMMANDS_STREAM)
    send(ctl, Submit(run_id="l1", actor="token:alice", **base), COMMANDS_STREAM)   # a labctl user claiming it
    send(ctl, Submit(run_id="w2", **base), WEB_COMMANDS_STREAM)
    with db() as s:
        by = {run.id: run.submitted_by for run in s.scalars(select(Run))}
    assert by == {"w1": "token:alice", "l1": "labctl", "w2": "web"}


def test_token_commands_are_refused_on_the_labctl_stream(ctl_r: Any) -> None:
    ctl, _disp, _clock, db, r = ctl_r
    with pytest.raises(ProtocolError, match="accepted only on the web service's stream"):
        send(ctl, TokenCreate(name="ci", role="admin", token_sha256=HASH, reply_to="lab:reply:t"))
    assert "token commands are accepted only on the web service's stream" in reply(r, "lab:reply:t")["errors"][0]
    with pytest.raises(ProtocolError):
        send(ctl, TokenRevoke(name="ci", reply_to="-"))
    with db() as s:
        assert s.scalars(select(ApiToken)).all() == []


def test_tokens_are_created_once_revoked_and_made_again(ctl_r: Any) -> None:
    ctl, _disp, clock, db, r = ctl_r
    web = WEB_COMMANDS_STREAM
    send(ctl, TokenCreate(name="ci", role="engineer", token_sha256=HASH, actor="labctl-admin",
                          expires_at=clock.t + 3600, reply_to="lab:reply:1"), web)
    assert reply(r, "lab:reply:1")["ok"] is True
    send(ctl, TokenCreate(name="ci", role="admin", token_sha256="cd" * 32, reply_to="lab:reply:2"), web)
    assert reply(r, "lab:reply:2")["errors"] == ["token 'ci' exists (revoke it first)"]
    send(ctl, TokenCreate(name="ci2", role="admin", token_sha256=HASH, reply_to="lab:reply:3"), web)
    assert "already stored" in reply(r, "lab:reply:3")["errors"][0]
    send(ctl, TokenRevoke(name="nope", reply_to="lab:reply:4"), web)
    assert reply(r, "lab:reply:4")["errors"] == ["no token 'nope'"]
    with db() as s:
        row = s.get(ApiToken, "ci")
        assert row is not None and (row.role, row.created_by, row.revoked_at) == ("engineer", "labctl-admin", None)
        assert row.token_sha256 == HASH and row.expires_at == clock.t + 3600
    send(ctl, TokenRevoke(name="ci", reply_to="lab:reply:5"), web)
    assert reply(r, "lab:reply:5")["ok"] is True
    with db() as s:
        row = s.get(ApiToken, "ci")
        assert row is not None and row.revoked_at == clock.t
    send(ctl, TokenCreate(name="ci", role="viewer", token_sha256="ef" * 32, reply_to="lab:reply:6"), web)
    assert reply(r, "lab:reply:6")["ok"] is True
    with db() as s:
        row = s.get(ApiToken, "ci")
        assert row is not None and (row.role, row.revoked_at, row.created_by) == ("viewer", None, "web")


def test_max_rounds_caps_the_precondition_and_is_refused_without_one(ctl_r: Any,
                                                                   fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, _clock, db, _r = ctl_r
    res = ctl.submit(Submit(run_id="p1", suite_source="pc.yaml", suite_text=PRECONDITION, host="h1",
                            devices=("dut0",), max_rounds=2, reply_to="-"))
    assert res.ok, res
    for _ in range(3):
        ctl.schedule()
        ctl.handle_event(ended(disp.starts()[-1].attempt_id, fio_outputs["4k-randread"]))
    with db() as s:
        run = s.get(Run, "p1")
        assert run is not None and run.state == "SUCCEEDED" and run.max_rounds == 2
        assert [st.round for st in run.steps if st.kind == "precondition"] == [1, 2]
        rec = s.scalars(select(PreconditionRecord)).one()
        assert rec.steady is False and rec.verdict.startswith("not steady after 2 rounds (max_rounds 2)")
    bad = ctl.submit(Submit(run_id="p2", suite_source="two.yaml", suite_text=SUITE, host="h1", devices=("dut0",),
                            max_rounds=3, reply_to="-"))
    assert not bad.ok and bad.errors == ("--max-rounds: suite two has no precondition or rounds phase to cap",)


def test_a_failed_precondition_round_reruns_and_its_group_goes_on(ctl_r: Any, fio_outputs: dict[str, bytes]) -> None:
    """Round 2 fails (the group's record says so; the measurement still runs and succeeds: the run FAILED); a rerun
    runs round 2 again with the record reopened (round 1 kept), then the group goes on to its cap; the measurement
    that succeeded keeps its result."""
    ctl, disp, _clock, db, r = ctl_r
    assert ctl.submit(Submit(run_id="p1", suite_source="pc.yaml", suite_text=PRECONDITION, host="h1",
                             devices=("dut0",), max_rounds=3, reply_to="-")).ok
    ctl.schedule()
    ctl.handle_event(ended(disp.starts()[-1].attempt_id, fio_outputs["4k-randread"]))
    ctl.schedule()
    ctl.handle_event(StepEnded(host="h1", attempt_id=disp.starts()[-1].attempt_id, outcome="exited", exit_code=1,
                               artifacts=(Artifact.of("fio.stderr", b"fio: err=5"),)))
    ctl.schedule()
    ctl.handle_event(ended(disp.starts()[-1].attempt_id, fio_outputs["4k-randread"]))     # the measurement
    with db() as s:
        run = s.get(Run, "p1")
        assert run is not None and run.state == "FAILED"
        rec = s.scalars(select(PreconditionRecord)).one()
        assert rec.steady is False and rec.verdict.startswith("round 2 failed") and len(rec.rounds) == 1
    send(ctl, Rerun(run_id="p1", reply_to="lab:reply:p"))
    assert reply(r, "lab:reply:p")["ok"] is True
    with db() as s:
        rec = s.scalars(select(PreconditionRecord)).one()
        assert rec.steady is None and rec.ended_at is None and len(rec.rounds) == 1
    for _ in range(2):            # round 2 again, round 3 (the cap)
        ctl.schedule()
        ctl.handle_event(ended(disp.starts()[-1].attempt_id, fio_outputs["4k-randread"]))
    with db() as s:
        run = s.get(Run, "p1")
        assert run is not None and run.state == "SUCCEEDED", [(st.name, st.state, st.reason) for st in run.steps]
        r2 = next(st for st in run.steps if st.round == 2)
        assert [(a.number, a.state) for a in r2.attempts] == [(1, "FAILED"), (2, "SUCCEEDED")]
        rec = s.scalars(select(PreconditionRecord)).one()
        assert [x["round"] for x in rec.rounds] == [1, 2, 3]
        assert len(disp.starts()) == 5 and [len(st.attempts) for st in run.steps if st.kind == "measure"] == [1]
        assert rec.verdict.startswith("not steady after 3 rounds (max_rounds 3)")


def test_the_retry_policy_counts_attempts_again_after_a_rerun(ctl_r: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, clock, db, r = ctl_r
    text = SUITE + "retry: {max_attempts: 2, when: [error]}\n"
    assert ctl.submit(Submit(run_id="e1", suite_source="e.yaml", suite_text=text, host="h1", devices=("dut0",),
                             reply_to="-")).ok

    def fail_last() -> None:
        ctl.schedule()
        ctl.handle_event(StepEnded(host="h1", attempt_id=disp.starts()[-1].attempt_id, outcome="exited",
                                   exit_code=1, artifacts=(Artifact.of("fio.stderr", b"fio: err=5"),)))

    fail_last()
    fail_last()                  # attempt 2 of 2: the step fails
    ctl.schedule()
    ctl.handle_event(ended(disp.starts()[-1].attempt_id, fio_outputs["8k-randrw"]))
    clock.t += 5
    send(ctl, Rerun(run_id="e1", reply_to="lab:reply:e"))
    assert reply(r, "lab:reply:e")["ok"] is True
    fail_last()                  # attempt 3, the first since the rerun: retried
    with db() as s:
        run = s.get(Run, "e1")
        assert run is not None and run.state == "RUNNING"
        assert run.steps[0].state == "PENDING" and "attempt 1 of 2 failed" in run.steps[0].reason
    ctl.schedule()
    ctl.handle_event(ended(disp.starts()[-1].attempt_id, fio_outputs["4k-randread"]))
    with db() as s:
        run = s.get(Run, "e1")
        assert run is not None and run.state == "SUCCEEDED" and run.rerun_at is not None
        assert [a.state for a in run.steps[0].attempts] == ["FAILED", "FAILED", "FAILED", "SUCCEEDED"]


def test_the_intake_reads_the_web_stream_and_makes_its_group_again_after_nogroup() -> None:
    from orchestrator.controller.intake import Streams

    class Stub:
        def __init__(self) -> None:
            self.groups: list[str] = []

        def xgroup_create(self, name: str, group: str, id: str, mkstream: bool) -> None:
            self.groups.append(name)

        def scan_iter(self, **kw: Any) -> list[bytes]:
            return []

    stub = Stub()
    streams = Streams(stub)        # type: ignore[arg-type]
    streams.discover(lambda: ["h1"], force=True)
    assert {COMMANDS_STREAM, WEB_COMMANDS_STREAM} <= streams.names and WEB_COMMANDS_STREAM in stub.groups
    stub.groups.clear()
    streams.discover(lambda: ["h1"], force=True)      # what the intake does on NOGROUP: every group again
    assert WEB_COMMANDS_STREAM in stub.groups
