"""Latency-vs-load curves (suite key ``load_curve``, labcontract.loadcurve, orchestrator.runs.loadcurve): the suite's
rules, the rate each point asks for, and a curve run through the controller on a real SQLite store with real fio
output, its points planned from the maximum's result and run right after it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from labcontract.errors import SuiteError
from labcontract.facts import DeclaredDut, HostFacts, StepKindFact
from labcontract.loadcurve import rate_per_job, rates_per_job
from labcontract.protocol import Artifact, Register, StepEnded, Submit
from labcontract.suite import count_steps, fio_kind_version, measured_seconds, parse_suite
from orchestrator.cells import cell_key, cell_label
from orchestrator.runs import planner
from orchestrator.store.models import Result, Run, Step

CURVE = """\
suite: curve
defaults: {runtime: 1}
profiles:
  - {name: 4k-randread, rw: randread, bs: 4k, iodepth: 8, numjobs: 2, load_curve: [50, 25]}
  - {name: 8k-read, rw: read, bs: 8k, iodepth: 4}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(SuiteError) as e:
        parse_suite(text, "s.yaml")
    return [str(p) for p in e.value.problems]


def test_a_curve_is_sorted_counted_and_needs_the_fio_kind_that_rate_limits() -> None:
    suite = parse_suite(CURVE, "s.yaml")
    assert suite.cells[0].load_curve == (25, 50) and suite.cells[1].load_curve == ()
    assert count_steps(list(suite.cells), suite.phases) == 4          # two cells, two points
    assert measured_seconds(suite) == 1 * 3 + 1
    assert fio_kind_version(suite) == 2
    steps = planner.plan(suite, ["/dev/loop9"])
    assert [s.cell.get("load_curve") for s in steps] == [[25, 50], None]
    plain = parse_suite(CURVE.replace(", load_curve: [50, 25]", ""), "s.yaml")
    assert fio_kind_version(plain) == 1
    # the maximum is the cell's own measurement: a run with a curve compares with one without
    assert cell_key(steps[0].cell) == cell_key(planner.plan(plain, ["/dev/loop9"])[0].cell)


@pytest.mark.parametrize(("curve", "why"), [
    ("[0, 50]", "profiles[0].load_curve[0]: 0 is out of range (must be >= 1)"),
    ("[100]", "profiles[0].load_curve[0]: 100 is out of range (must be <= 99)"),
    ("['50']", "profiles[0].load_curve[0]: input should be a valid integer (got '50')"),
    ("[50, 50]", "profiles[0].load_curve: a percentage is listed twice"),
    (str(list(range(1, 23))), "profiles[0].load_curve: list should have at most 20 items"),
    ("50", "profiles[0].load_curve: input should be a valid list (got 50)"),
])
def test_a_bad_curve_is_refused_with_its_reason(curve: str, why: str) -> None:
    found = problems(CURVE.replace("[50, 25]", curve))
    assert any(why in p for p in found), found


def test_a_curve_refuses_a_rate_of_its_own_and_a_network_suite() -> None:
    rated = problems(CURVE.replace("numjobs: 2,", "numjobs: 2, rate_iops: 100,"))
    assert any("profiles[0].load_curve: the curve sets each point's rate itself: rate_iops" in p for p in rated)
    # a mixed workload's points need per-direction rates: the agent's fio kind 3; one that only reads, 2
    assert fio_kind_version(parse_suite(CURVE.replace("rw: randread,", "rw: randrw, rwmixread: 70,"), "s")) == 3
    assert fio_kind_version(parse_suite(CURVE.replace("rw: randread,", "rw: randrw, rwmixread: 100,"), "s")) == 2
    net = """\
suite: n
network: {paths: [a]}
profiles:
  - {name: r, rw: read, bs: 128k, runtime: 1, load_curve: [50]}
"""
    assert any("not available in a network suite" in p for p in problems(net))


def test_a_mixed_point_asks_each_direction_its_share() -> None:
    assert rates_per_job(7_000.0, 3_000.0, 50, 1, mixed=True) == "3500,1500"
    assert rates_per_job(7_000.0, 3_000.0, 50, 2, mixed=False) == 2_500
    assert rates_per_job(7_000.0, 1.0, 50, 1, mixed=True) is None       # under one write a second: no point
    w = parse_suite(CURVE, "s").cells[0].workload
    assert w.model_copy(update={"rate_iops": "3500,1500"}).model_dump()["rate_iops"] == "3500,1500"


def test_the_rate_of_a_point_is_shared_by_every_job() -> None:
    assert rate_per_job(10_000.0, 50, 1) == 5_000
    assert rate_per_job(10_000.0, 25, 4) == 625          # numjobs x devices jobs, each capped
    assert rate_per_job(10.0, 10, 2) is None             # half an I/O per second per job: no point
    assert rate_per_job(0.0, 50, 1) is None and rate_per_job(float("nan"), 50, 1) is None
    assert rate_per_job(float("inf"), 50, 1) is None and rate_per_job(100.0, 100, 1) is None


def ended(host: str, attempt_id: str, fio_json: bytes) -> StepEnded:
    return StepEnded(host=host, attempt_id=attempt_id, outcome="exited", exit_code=0, fio_started_at=1.0,
                     fio_ended_at=2.0, artifacts=(Artifact.of("fio.json", fio_json), Artifact.of("job.fio", b"x")))


def test_a_curve_runs_through_the_controller(env: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, _clock, db = env
    reply = ctl.submit(Submit(run_id="r1", suite_source="s.yaml", suite_text=CURVE, host="h1", devices=("dut0",),
                              reply_to="-"))
    assert reply.ok, reply.errors
    ctl.schedule()
    (first,) = disp.starts()
    assert first.attempt_id == "r1-s000-a1"
    ctl.handle_event(ended("h1", first.attempt_id, fio_outputs["4k-randread"]))
    with db() as s:
        max_iops = s.scalars(select(Result.iops).where(Result.step_id == "r1-s000")).one()
        steps = {st.id: st for st in s.scalars(select(Step).where(Step.run_id == "r1"))}
        assert {"r1-s000-l25", "r1-s000-l50"} <= set(steps)
        p25 = steps["r1-s000-l25"]
        assert (p25.seq, p25.round, p25.name) == (0, 1, "4k-randread.load25")
        assert p25.cell["load_pct"] == 25 and "load_curve" not in p25.cell
        assert p25.workload["rate_iops"] == round(max_iops * 0.25 / 2)     # numjobs 2 on one device
        assert f"rate_iops={p25.workload['rate_iops']}\n" in p25.job_text
        assert "25% of the maximum's" in p25.note
        assert cell_label(p25.cell, p25.workload) == "4K random read 100% 2T8Q at 25% load (4k-randread)"
    for expected in ("r1-s000-l25-a1", "r1-s000-l50-a1", "r1-s001-a1"):   # the points before the next cell
        ctl.schedule()
        att = disp.starts()[-1]
        assert att.attempt_id == expected
        if expected != "r1-s001-a1":
            assert att.workload is not None and att.workload.rate_iops is not None
        ctl.handle_event(ended("h1", att.attempt_id, fio_outputs["4k-randread"]))
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "SUCCEEDED"
        assert len(s.scalars(select(Result).where(Result.run_id == "r1")).all()) == 4


def test_an_agent_whose_fio_kind_cannot_rate_limit_is_refused_at_submit(env: Any) -> None:
    ctl, _disp, _clock, _db = env
    facts = HostFacts(hostname="old", step_kinds=(StepKindFact(action="fio", version=1),))
    ctl.handle_event(Register(host="old", agent_version="0.1.0", facts=facts,
                              duts=(DeclaredDut(name="dut0", path="/dev/loop3", kind="block", size_bytes=1 << 30),)))
    reply = ctl.submit(Submit(run_id="r2", suite_source="s.yaml", suite_text=CURVE, host="old", devices=("dut0",),
                              reply_to="-"))
    assert not reply.ok
    assert any("load_curve: host old's agent runs fio steps at version 1" in str(e) for e in reply.errors), reply


MIXED = """\
suite: mixed
defaults: {runtime: 1}
profiles:
  - {name: 8k-randrw, rw: randrw, bs: 8k, rwmixread: 70, iodepth: 4, numjobs: 2, load_curve: [50]}
"""


def test_a_mixed_curve_asks_each_direction_its_share(env: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, _clock, db = env
    reply = ctl.submit(Submit(run_id="r3", suite_source="m.yaml", suite_text=MIXED, host="h1", devices=("dut0",),
                              reply_to="-"))
    assert reply.ok, reply.errors
    ctl.schedule()
    ctl.handle_event(ended("h1", disp.starts()[-1].attempt_id, fio_outputs["8k-randrw"]))
    with db() as s:
        top = s.scalars(select(Result).where(Result.step_id == "r3-s000")).one()
        point = s.get(Step, "r3-s000-l50")
        assert point is not None and top.read_iops and top.write_iops
        want = f"{round(top.read_iops * 0.5 / 2)},{round(top.write_iops * 0.5 / 2)}"
        assert point.workload["rate_iops"] == want and f"rate_iops={want}\n" in point.job_text
    ctl.schedule()
    start = disp.starts()[-1]
    assert start.attempt_id == "r3-s000-l50-a1" and start.workload is not None and start.workload.rate_iops == want
