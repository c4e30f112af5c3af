"""SNIA PTS-E's rounds (labcontract.rounds): the suite form and its checks, the plan (purge, WIPC, round 1), the
controller's judgement at a round's end (orchestrator.runs.rounds), which rounds are reported, and the estimate."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from labcontract.errors import SuiteError
from labcontract.fioresult import StepMetrics
from labcontract.rounds import window_rounds
from labcontract.suite import load_suite, parse_suite, tracked_cell
from orchestrator.queries import in_window, round_windows
from orchestrator.runs import rounds
from orchestrator.runs.planner import plan
from orchestrator.runs.scheduling import step_seconds
from orchestrator.store.models import PreconditionRecord, Run, Step

MINI = """\
suite: mini
phases:
  purge: true
  rounds: {cell: {rwmixread: 0, bs: 4k}, window: 2, max_rounds: 3}
profiles:
  - {name: iops, rw: randrw, runtime: 1s, sweep: {rwmixread: [100, 0], bs: [64k, 4k]}}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(SuiteError) as e:
        parse_suite(text, "s.yaml")
    return [str(p) for p in e.value.problems]


def test_the_built_in_pts_suites_plan_purge_wipc_and_round_one_in_the_specifications_order() -> None:
    s = load_suite("snia-iops")
    steps = plan(s, ["/dev/x"])
    assert [(p.kind, p.name) for p in steps[:3]] == [("purge", "purge.stock"), ("precondition", "wipc.pass1"),
                                                    ("precondition", "wipc.pass2")]
    measured = steps[3:]
    assert len(measured) == 56 and all(p.kind == "measure" and p.cell["round"] == 1 for p in measured)
    # the mixes outer, the block sizes from the largest down (PTS-E's loop order)
    assert [p.name for p in measured[:9]] == [f"iops.r100.{bs}.round1" for bs in
                                              ("1m", "128k", "64k", "32k", "16k", "8k", "4k", "512")] + \
        ["iops.r95.1m.round1"]
    assert [p.step_id("r1") for p in steps[1:4]] == ["r1-s001-r001", "r1-s002-r001", "r1-s003-r001"]
    assert tracked_cell(s, "stock").workload.name == "iops.r0.4k"
    for name, cells, tracked in (("snia-throughput", 2, "tp-128k.write"), ("snia-throughput-1m", 2, "tp-1m.write"),
                                 ("snia-latency", 9, "lat.r0.4k")):
        s = load_suite(name)
        assert len(s.cells) == cells and tracked_cell(s, "stock").workload.name == tracked


def test_wipc_writes_the_footprint_twice_in_128k_sequential_writes_and_scale_shortens_its_limit() -> None:
    s = load_suite("snia-iops")
    wipc = [p.workload for p in plan(s, ["/dev/x"], scale=0.01) if p.kind == "precondition"]
    for w in wipc:
        assert w is not None
        assert (w.rw, w.bs, w.numjobs, w.iodepth, w.time_based, w.runtime) == ("write", 128 << 10, 1, 32, False, 216)
        assert w.rwmixread is None and w.footprint is None
    job = plan(s, ["/dev/x"])[1].job_text
    assert "rw=write" in job and "bs=128k" in job and "time_based" not in job


def test_hp_modes_get_their_own_wipc_and_rounds() -> None:
    s = parse_suite(MINI.replace("suite: mini", "suite: mini\nop_modes: [stock, 'hp:20']"), "s.yaml")
    steps = plan(s, ["/dev/x"])
    assert [p.name for p in steps if p.kind != "measure"] == ["purge.stock", "stock.wipc.pass1", "stock.wipc.pass2",
                                                             "purge.hp20", "hp20.wipc.pass1", "hp20.wipc.pass2"]
    hp = [p.workload for p in steps if p.kind == "precondition" and p.cell["op_mode"] == "hp:20"]
    assert all(w is not None and w.footprint == "80%" for w in hp)
    assert tracked_cell(s, "hp:20").workload.name == "hp20.iops.r0.4k"


def test_what_rounds_may_not_be_combined_with_and_a_cell_that_names_no_cell_or_two() -> None:
    bad = MINI.replace("  purge: true\n", "  purge: true\n  precondition: {round: 5s}\n") \
        .replace("suite: mini\n", "suite: mini\nrepeat: 2\nretry: {repurge: true}\n") \
        .replace("runtime: 1s,", "runtime: 1s, load_curve: [50],")
    got = problems(bad)
    assert any("not available with retry.repurge (a purge between two rounds" in p for p in got), got
    assert any("not available with phases.precondition" in p for p in got)
    assert any("not available with repeat" in p for p in got)
    assert any("not available with load_curve" in p for p in got)
    assert problems(MINI.replace("rwmixread: 0, bs: 4k}", "rwmixread: 5, bs: 4k}")) == [
        "phases.rounds.cell: rwmixread=5, bs=4096 names 0 cells (it must name exactly one: give the swept values, "
        "and the profile when several profiles sweep them)"]
    assert any(p.startswith("phases.rounds.cell.bs: not a size") for p in problems(MINI.replace("bs: 4k}", "bs: 4q}")))
    two = MINI + "  - {name: more, rw: randrw, runtime: 1s, sweep: {rwmixread: [100, 0], bs: [64k, 4k]}}\n"
    assert "names 2 cells" in problems(two)[0]
    named = parse_suite(two.replace("cell: {rwmixread: 0", "cell: {profile: more, rwmixread: 0"), "s.yaml")
    assert tracked_cell(named, "stock").workload.name == "more.r0.4k"
    net = MINI.replace("phases:", "network: {paths: [a]}\nphases:")
    assert any("not available with a network suite" in p for p in problems(net))


def _run(max_rounds: int | None = None) -> Run:
    s = parse_suite(MINI, "s.yaml")
    run = Run(id="r1", suite_name="mini", suite_source="s.yaml", suite_text=MINI, suite_sha256=s.sha256, host="h",
              device="/dev/x", devices=["/dev/x"], state="RUNNING", submitted_at=0.0, max_rounds=max_rounds)
    run.steps = [Step(id=p.step_id("r1"), run_id="r1", seq=p.seq, round=p.round, kind=p.kind, name=p.name,
                      cell=p.cell, note=p.note, workload=p.workload.model_dump(mode="json") if p.workload else None,
                      job_text=p.job_text, state="SUCCEEDED") for p in plan(s, ["/dev/x"])]
    return run


def _metrics(iops: float) -> StepMetrics:
    """What a round records of a step's metrics (orchestrator.runs.preconditioning.round_values)."""
    combined = SimpleNamespace(iops=iops, lat_mean_ns=1e5, lat_max_ns=1e6, lat_stddev_ns=1e4, bw_bytes=iops * 4096)
    return cast(StepMetrics, SimpleNamespace(read=SimpleNamespace(iops=0.0), write=SimpleNamespace(iops=iops),
                                             combined=combined))


class _Session:
    """What after_cell asks of a session: the record it added, found again."""

    def __init__(self) -> None:
        self.added: list[Any] = []

    def scalar(self, _query: Any) -> Any:
        return next((x for x in self.added if isinstance(x, PreconditionRecord)), None)

    def add(self, obj: Any) -> None:
        self.added.append(obj)


def _round(s: _Session, run: Run, r: int, tracked_iops: float) -> list[Step]:
    queued: list[Step] = []
    for st in sorted((st for st in run.steps if st.kind == "measure" and st.round == r), key=lambda st: st.seq):
        queued += rounds.after_cell(s, run, st, _metrics(tracked_iops if "r0.4k" in st.name else 5.0), 10.0)  # type: ignore[arg-type]
    run.steps.extend(queued)
    return queued


def test_a_round_ends_with_the_next_queued_until_the_tracked_cell_is_steady() -> None:
    run, s = _run(), _Session()
    nxt = _round(s, run, 1, 1000.0)
    assert [(st.id, st.name, st.round, st.cell["round"], st.state) for st in nxt] == [
        (f"r1-s{seq:03d}-r002", f"iops.{c}.round2", 2, 2, "PENDING")
        for seq, c in zip(range(3, 7), ("r100.64k", "r100.4k", "r0.64k", "r0.4k"), strict=True)]
    assert nxt[0].workload["name"] == "iops.r100.64k.round2" and "[iops.r100.64k.round2]" in nxt[0].job_text
    assert _round(s, run, 2, 1010.0) == []
    (rec,) = s.added
    assert rec.name == "rounds.iops.r0.4k" and rec.seq == 3 and rec.criteria["op_mode"] == "stock"
    assert rec.steady is True and rec.reached_round == 2 and [r["iops"] for r in rec.rounds] == [1000.0, 1010.0]
    assert round_windows([rec]) == {"stock": range(1, 3)}


def test_rounds_stop_at_max_rounds_or_at_the_submissions_lower_cap_and_a_failed_cell_ends_them() -> None:
    run, s = _run(), _Session()
    for r, v in ((1, 100.0), (2, 1000.0)):
        assert _round(s, run, r, v)
    assert _round(s, run, 3, 100.0) == []
    (rec,) = s.added
    assert rec.steady is False and rec.verdict.startswith("not steady after 3 rounds (max_rounds 3)")
    assert round_windows([rec]) == {"stock": range(2, 4)}        # the last window is reported
    run, s = _run(max_rounds=1), _Session()
    assert _round(s, run, 1, 100.0) == [] and "max_rounds 1" in s.added[0].verdict
    run, s = _run(), _Session()
    first = next(st for st in run.steps if st.kind == "measure")
    rounds.fail_cell(s, run, first, "fio exited 1", 5.0)  # type: ignore[arg-type]
    assert _round(s, run, 1, 100.0) == []
    assert s.added[0].verdict == "round 1: iops.r100.64k.round1 failed: fio exited 1"


def test_only_the_windows_rounds_are_reported() -> None:
    w = {"stock": window_rounds(7, 5, 9), "hp:20": window_rounds(None, 5, 4)}
    assert w == {"stock": range(3, 8), "hp:20": range(1, 5)}
    assert [r for r in range(1, 10) if in_window({"round": r}, w)] == [3, 4, 5, 6, 7]
    assert in_window({"round": 9, "op_mode": "hp:20"}, w) is False and in_window({}, w) is True
    assert in_window({"round": 1, "op_mode": "hp:40"}, w) is True                # no record: every round
    assert in_window({"round": 1}, {"stock": range(1, 1)}) is True               # nothing tracked yet


def test_a_queued_rounds_run_is_estimated_at_window_to_max_rounds_rounds() -> None:
    run = _run()
    st = next(st for st in run.steps if st.kind == "measure")
    r = rounds.rounds_of(run)
    assert step_seconds(st, None, upper=False, rounds=r) == 2.0 and step_seconds(st, None, upper=True, rounds=r) == 3.0
    wipc = next(st for st in run.steps if st.kind == "precondition")
    assert step_seconds(wipc, None, upper=True, rounds=r) == 6 * 3600
