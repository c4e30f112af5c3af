"""Step kinds as plug-ins (orchestrator.kinds): every kind the planner emits has an entry; the ``app`` kind's
start message, interlock operation and storage, through the controller on a real SQLite store."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labcontract.apps import AppResult, AppStart, PgbenchParams, SysbenchParams, expected_seconds
from labcontract.appsuite import fs_size_bytes
from labcontract.protocol import Artifact, StartStep, StepEnded, StepStarted, Submit
from orchestrator import kinds
from orchestrator.config import ControllerTuning
from orchestrator.controller import Controller, step_operation
from orchestrator.runs import planner
from orchestrator.states import StepState
from orchestrator.store.models import Attempt, Result, Run, Step
from tests.unit.conftest import Clock, RecordingDispatcher

Env = tuple[Controller, RecordingDispatcher, Clock, sessionmaker[Session]]


def test_every_planned_kind_has_an_entry() -> None:
    planned = set(typing.get_args(planner.StepKind))
    assert planned and planned <= kinds.names(), f"no step kind registered for {planned - kinds.names()}"
    wire = set(typing.get_args(StartStep.model_fields["kind"].annotation))
    assert wire <= kinds.names(), f"start messages name kinds without an entry: {wire - kinds.names()}"
    assert kinds.local_names() == {"provision", "dut_state", "facts"}
    with pytest.raises(LookupError, match="no step kind 'nope'"):
        kinds.get("nope")


def test_which_kinds_a_retry_may_run_again_is_the_kinds_own_attribute() -> None:
    retryable = {n for n in kinds.names() if kinds.get(n).retryable}
    assert retryable == {"purge", "precondition", "measure"}
    assert {n for n in kinds.names() if kinds.get(n).repurge_before_retry} == {"precondition", "measure"}
    assert not kinds.get("app").retryable and not kinds.get("net").retryable and not kinds.get("provision").retryable


def test_a_kind_name_is_registered_once() -> None:
    class Dup(kinds.common.BaseKind):
        names = ("measure",)

    with pytest.raises(ValueError, match="registered twice"):
        kinds.register(Dup())


SUITE = "suite: oltp\nprofiles:\n  - {name: a, rw: read, bs: 4k, runtime: 1}\n"   # the retry policy's source
SYSBENCH = SysbenchParams(tables=1, table_size=100, threads=(2, 4), time=3)


def _app_run(db: sessionmaker[Session], *steps: tuple[str, dict[str, Any], AppStart]) -> None:
    with db.begin() as s:
        run = Run(id="r1", suite_name="oltp", suite_source="oltp.yaml", suite_text=SUITE, suite_sha256="ab" * 32,
                  host="h1", device="/dev/loop9", devices=["/dev/loop9"], state="QUEUED", submitted_at=1.0)
        for seq, (name, cell, app) in enumerate(steps):
            run.steps.append(Step(id=f"r1-s{seq:03d}", seq=seq, round=0, kind="app", name=name, cell=cell,
                                  workload=None, job_text=app.model_dump_json(), state=str(StepState.PENDING)))
        s.add(run)


def _ended(attempt_id: str, files: dict[str, bytes], **kw: Any) -> StepEnded:
    return StepEnded(host="h1", attempt_id=attempt_id, outcome=kw.pop("outcome", "exited"),
                     exit_code=kw.pop("exit_code", 0), fio_started_at=1.0, fio_ended_at=2.0,
                     artifacts=tuple(Artifact.of(n, d) for n, d in files.items()), **kw)


def _start(ctl: Controller, disp: RecordingDispatcher, clock: Clock) -> StartStep:
    ctl.schedule()
    msg = disp.starts()[-1]
    ctl.handle_event(StepStarted(host="h1", attempt_id=msg.attempt_id, pid=7, fio_started_at=clock.t, job_sha256="x"))
    return msg


PREPARE = AppStart(kind="sysbench", phase="prepare", sysbench=SYSBENCH)
POINT = AppStart(kind="sysbench", phase="run", point=2, sysbench=SYSBENCH)
RESULT = AppResult(tool="sysbench", tool_version="1.0.20", server_version="10.11.6-MariaDB",
                   metrics={"tps": 812.5, "qps": 16250.0, "lat_avg_ms": 2.46, "lat_p99_ms": 5.5, "errors": 0},
                   series={"tps": [800.0, 810.0, 827.5]}, seconds=3.0)


def test_app_steps_start_store_and_prepare_leaves_no_row(env: Env) -> None:
    ctl, disp, clock, db = env
    _app_run(db, ("app.prepare.stock", {"op_mode": "stock", "app": "sysbench", "phase": "prepare"}, PREPARE),
             ("oltp_read_write@2", {"op_mode": "stock", "profile": "oltp_read_write", "app": "sysbench",
                                    "threads": 2}, POINT))
    first = _start(ctl, disp, clock)
    assert (first.action, first.kind, first.devices, first.app, first.workload) == (
        "app", "app", ("/dev/loop9",), PREPARE, None)
    assert first.timeout_s == expected_seconds(PREPARE) + ControllerTuning().step_timeout_margin_s
    ctl.handle_event(_ended(first.attempt_id, {"app.json": RESULT.model_copy(update={"metrics": {}}).model_dump_json()
                                               .encode(), "app.log": b"prepared\n"}))
    second = _start(ctl, disp, clock)
    assert second.app == POINT and second.timeout_s == 3 + 300 + ControllerTuning().step_timeout_margin_s
    files = {"app.json": RESULT.model_dump_json().encode(), "app-spec.json": b"{}", "app.log": b"", "server.log": b"",
             "tool.out": b"", "fio.stderr": b""}
    ctl.handle_event(_ended(second.attempt_id, files))
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None
        assert run.state == "SUCCEEDED", run.reason
        prep, point = run.steps
        assert prep.note.startswith("prepared by sysbench 1.0.20") and not prep.attempts[0].result
        (res,) = s.scalars(select(Result)).all()
        assert res.step_id == point.id
        assert (res.kind, res.tool, res.tool_version, res.throughput, res.throughput_unit) == (
            "sysbench", "sysbench", "1.0.20", 812.5, "TPS")
        assert res.lat_mean_ns == pytest.approx(2.46e6) and res.lat_p99_ns == pytest.approx(5.5e6)
        assert res.runtime_ms == 3000 and res.fio_version is None and res.iops is None and res.bw_bytes is None
        assert res.series == {"tps": [800.0, 810.0, 827.5]}
        assert res.metrics["metrics"]["qps"] == 16250.0 and res.metrics["server_version"] == "10.11.6-MariaDB"
        prov = res.provenance
        assert prov["op_mode"] == "stock" and prov["suite_sha256"] == "ab" * 32 and prov["job_sha256"]
        assert prov["device"]["path"] == "/dev/loop9" and prov["app"]["point"] == 2
        assert sorted(a.name for a in point.attempts[0].artifacts) == sorted(files)


@pytest.mark.parametrize(("body", "why"), [
    (b"not json", "app.json invalid"),
    (json.dumps({"tool": "sysbench", "metrics": {"tps": "fast"}}).encode(), "metrics.tps"),
    (json.dumps({"tool": "x; rm -rf /", "metrics": {}}).encode(), "tool"),
    (None, "app.json missing"),
])
def test_a_bad_app_result_ends_the_attempt_as_an_error(env: Env, body: bytes | None, why: str) -> None:
    ctl, disp, clock, db = env
    _app_run(db, ("oltp_read_write@2", {"op_mode": "stock", "app": "sysbench", "threads": 2}, POINT))
    msg = _start(ctl, disp, clock)
    ctl.handle_event(_ended(msg.attempt_id, {"app.log": b""} | ({"app.json": body} if body is not None else {})))
    with db() as s:
        att = s.get(Attempt, msg.attempt_id)
        assert att is not None
        assert att.state == "FAILED" and why in att.reason, att.reason
        assert s.scalars(select(Result)).all() == []


def test_app_interlock_operations_and_pgbench_throughput(env: Env) -> None:
    pg = PgbenchParams(scale=1, clients=(2,), time=2)
    ext = AppStart.model_validate({"kind": "external", "phase": "run", "external": {"workload": "w1", "time": 5}})

    def step(app: AppStart) -> Step:
        return Step(id="x", kind="app", name="x", cell={}, job_text=app.model_dump_json())

    assert step_operation(step(PREPARE)) == "purge" and step_operation(step(POINT)) == "write"
    assert step_operation(step(AppStart(kind="pgbench", phase="prepare", pgbench=pg))) == "purge"
    assert step_operation(step(ext)) == "write"
    assert step_operation(Step(id="y", kind="app", name="y", cell={}, job_text="{")) == "purge"
    from orchestrator.kinds.app import headline

    assert headline(ext, AppResult(tool="fio", metrics={"ops": 3.0, "mb_s": 2.0})) == (3.0, "ops")
    assert headline(ext, AppResult(tool="fio", metrics={"mb_s": 2.0, "tps": 9.0})) == (9.0, "TPS")


APP_SUITE = """\
suite: tiny-oltp
kind: sysbench
devices: 1
op_modes: ["hp:20"]
phases: {purge: true}
sysbench: {tables: 1, table_size: 100, threads: [2, 4], time: 2}
"""


def test_an_application_suite_runs_through_the_controller(env: Env) -> None:
    """Submitted, planned (purge, prepare, a step per point), each started by its kind; the OP footprint is
    sized from the registered DUT (1 GiB, hp:20: 80% of it)."""
    ctl, disp, clock, db = env
    reply = ctl.submit(Submit(run_id="r1", suite_source="tiny.yaml", suite_text=APP_SUITE, host="h1",
                              devices=("dut0",), reply_to="-"))
    assert reply.ok, reply.errors
    purge = _start(ctl, disp, clock)
    assert purge.action == "purge" and purge.kind == "purge"
    ctl.handle_event(_ended(purge.attempt_id, {}))
    prepare = _start(ctl, disp, clock)
    assert prepare.action == "app" and prepare.app is not None and prepare.app.phase == "prepare"
    assert prepare.app.fs_size_bytes == fs_size_bytes("hp:20", 1 << 30) and fs_size_bytes("hp:20", 1 << 30)
    ctl.handle_event(_ended(prepare.attempt_id, {"app.log": b""}))
    for threads in (2, 4):
        point = _start(ctl, disp, clock)
        assert point.app is not None and point.app.point == threads
        res = RESULT.model_copy(update={"metrics": {"tps": 100.0 * threads}})
        ctl.handle_event(_ended(point.attempt_id, {"app.json": res.model_dump_json().encode()}))
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None
        assert run.state == "SUCCEEDED", run.reason
        got = sorted((r.step_id, r.throughput) for r in s.scalars(select(Result)))
        assert [t for _sid, t in got] == [200.0, 400.0]
        assert [st.cell.get("threads") for st in run.steps if st.kind == "app"] == [None, 2, 4]
