"""Repeats (issue 16 item 1): the plan of a repeated suite, its bounds, and the summaries of a repeated run."""

from __future__ import annotations

import statistics

import pytest
from rich.console import Console

from labcontract.errors import SuiteError
from labcontract.suite import load_suite, parse_suite, repeat_problems, steps_of, with_overrides
from orchestrator.cells import cell_key
from orchestrator.htmlreport.model import mean_result
from orchestrator.queries import RunDetail
from orchestrator.report import repeats_table
from orchestrator.runs.planner import NetHosts, plan
from orchestrator.stats.samples import is_repeated, run_samples, summary_rows
from orchestrator.store.models import Result, Run, Step

SUITE = """\
suite: rep
repeat: 3
phases:
  purge: true
  precondition: {numjobs: 1, iodepth: 4, round: 5s, max_rounds: 5}
defaults: {runtime: 5s}
profiles:
  - name: 4k-random
    rw: randwrite
    bs: 4k
    ladder: {iodepth: [1, 4]}
  - name: seq
    rw: read
    bs: 128k
"""


def measures(text: str, repeat: int | None = None) -> list[str]:
    return [p.name for p in plan(parse_suite(text, "s.yaml"), ["/dev/x"], repeat=repeat) if p.kind == "measure"]


def test_interleaved_runs_each_precondition_group_once_then_again() -> None:
    steps = plan(parse_suite(SUITE, "s.yaml"), ["/dev/x"])
    assert [(p.kind, p.name) for p in steps] == [
        ("purge", "purge.4k-random"), ("precondition", "precondition.4k-random.round1"),
        *(("measure", f"4k-random.q{q}.rep{k}") for k in (1, 2, 3) for q in (1, 4)),
        ("purge", "purge.seq"), ("precondition", "precondition.seq.round1"),
        *(("measure", f"seq.rep{k}") for k in (1, 2, 3))]
    assert [p.cell.get("repeat") for p in steps if p.kind == "measure"] == [1, 1, 2, 2, 3, 3, 1, 2, 3]
    first = next(p for p in steps if p.kind == "measure")
    assert first.workload is not None and first.workload.name == "4k-random.q1.rep1"
    assert "[4k-random.q1.rep1]" in first.job_text


def test_back_to_back_runs_each_cell_repeats_in_a_row() -> None:
    names = measures(SUITE.replace("repeat: 3", "repeat: 3\nrepeat_order: back_to_back"))
    assert names == [f"4k-random.q{q}.rep{k}" for q in (1, 4) for k in (1, 2, 3)] + [f"seq.rep{k}" for k in (1, 2, 3)]


def test_once_is_the_plan_as_it_always_was() -> None:
    once = plan(parse_suite(SUITE.replace("repeat: 3\n", ""), "s.yaml"), ["/dev/x"])
    assert [p.name for p in once if p.kind == "measure"] == ["4k-random.q1", "4k-random.q4", "seq"]
    assert all("repeat" not in p.cell for p in once)
    assert measures(SUITE.replace("repeat: 3\n", ""), repeat=2) == [
        "4k-random.q1.rep1", "4k-random.q4.rep1", "4k-random.q1.rep2", "4k-random.q4.rep2", "seq.rep1", "seq.rep2"]


@pytest.mark.parametrize("name", ["demo", "enterprise-synthetic", "sysbench-oltp", "pgbench", "network-paths",
                                  "device-group"])
def test_the_step_count_cell_limit_judges_is_the_plan_of_every_kind(name: str) -> None:
    suite = with_overrides(load_suite(name), repeat=3)
    hosts = NetHosts("t", ("i",)) if suite.network is not None else None
    devices = ["/dev/a", "/dev/b"] if suite.devices is None or suite.devices > 1 else ["/dev/a"]
    steps = plan(suite, devices, net_hosts=hosts, device_bytes=1 << 34)
    assert steps_of(suite) == len(steps)
    measured = [p for p in steps if p.kind in ("measure", "app", "net") and p.cell.get("phase") != "prepare"]
    assert measured and all(p.cell["repeat"] in (1, 2, 3) for p in measured)
    keys = {cell_key(p.cell) for p in measured}
    assert len(measured) == 3 * len(keys) * (2 if suite.network is not None else 1), "repeat never makes a new cell"
    assert len({p.seq for p in steps}) == len(steps) // (2 if suite.network is not None else 1), "a seq per step"


def test_bad_repeats_are_refused_with_the_reason() -> None:
    with pytest.raises(SuiteError) as e:
        parse_suite(SUITE.replace("repeat: 3", "repeat: 0"), "s.yaml")
    assert [str(p) for p in e.value.problems] == ["repeat: 0 is out of range (must be >= 1)"]
    with pytest.raises(SuiteError) as e:
        parse_suite(SUITE.replace("repeat: 3", "repeat: 51\nrepeat_order: sideways"), "s.yaml")
    assert {p.location for p in e.value.problems} == {"repeat", "repeat_order"}
    suite = parse_suite(SUITE.replace("repeat: 3", "cell_limit: 10"), "s.yaml")
    assert repeat_problems(suite, None) == [] and repeat_problems(suite, 1) == []
    assert [str(p) for p in repeat_problems(suite, 3)] == [
        "--repeat: 3 repeats make 13 steps, over the suite's cell_limit of 10"]
    assert [str(p) for p in repeat_problems(suite, 0)] == ["--repeat: 0 is not a repeat count (1-50)"]


# --- a repeated run's summaries ------------------------------------------------------------------------------

def _run(values: dict[int, list[float | None]]) -> RunDetail:
    run = Run(id="r1", suite_name="rep", host="h", device="/dev/x", devices=["/dev/x"], state="SUCCEEDED")
    steps, results = [], {}
    seq = 0
    for q, vals in values.items():
        for k, v in enumerate(vals, 1):
            st = Step(id=f"s{seq}", run_id="r1", seq=seq, round=0, kind="measure", name=f"4k.q{q}.rep{k}",
                      cell={"op_mode": "stock", "profile": "4k", "iodepth": q, "repeat": k}, state="SUCCEEDED")
            steps.append(st)
            if v is not None:
                results[st.id] = Result(step_id=st.id, run_id="r1", iops=v, bw_bytes=v * 4096, lat_mean_ns=1e9 / v,
                                        lat_max_ns=5e6, lat_stddev_ns=1e4, runtime_ms=1000,
                                        metrics={"combined": {"iops": v, "clat": {"p99": 2 * v}}, "tool": "fio"})
            seq += 1
    return RunDetail(run, steps, results, [])


def test_each_cell_summarizes_the_repeats_it_has() -> None:
    d = _run({1: [1000.0, 1100.0, 900.0], 4: [4000.0, None, 4200.0]})
    assert is_repeated(d)
    cells = list(run_samples(d, with_op_mode=True).values())
    assert [c.planned for c in cells] == [3, 3] and [c.n("iops") for c in cells] == [3, 2]
    s = cells[0].summary("iops")
    assert s is not None and s.mean == 1000.0 and s.cov_pct == pytest.approx(10.0)
    heads, rows = summary_rows(d)
    assert heads == ["cell", "n", "IOPS", "±95%", "CoV", "avg lat µs", "±95%", "CoV"]
    assert rows[0][:5] == ["1T1Q (4k stock)", "3/3", "1,000", "-22.0% +28.2%", "10.0%"]
    assert rows[1][:2] == ["1T4Q (4k stock)", "2/3"]


def test_run_show_prints_the_repeats_table_and_none_for_a_run_once() -> None:
    once = _run({1: [1000.0]})
    once.steps[0].cell.pop("repeat")
    assert not is_repeated(once) and repeats_table(once) is None
    table = repeats_table(_run({1: [1000.0, 1100.0, 900.0]}))
    assert table is not None
    console = Console(width=100, record=True)
    console.print(table)
    text = console.export_text()
    assert "repeated cells" in text and "3/3" in text and "-22.0% +28.2%" in text


def test_a_repeated_cells_report_figures_are_the_means() -> None:
    d = _run({1: [1000.0, 1100.0, 900.0]})
    mean = mean_result([d.results[st.id] for st in d.steps])
    assert mean.iops == pytest.approx(1000.0) and mean.bw_bytes == pytest.approx(1000.0 * 4096)
    assert mean.lat_mean_ns == pytest.approx(statistics.fmean(1e9 / v for v in (1000.0, 1100.0, 900.0)))
    assert mean.metrics == {"combined": {"iops": pytest.approx(1000.0), "clat": {"p99": pytest.approx(2000.0)}},
                            "tool": "fio"}


def test_a_cell_too_noisy_to_judge_says_so_instead_of_printing_bounds() -> None:
    # Three repeats at 82,784 IOPS on average with a CoV of 56%: Student's interval ran from -29,683 to 195,251.
    import json

    from orchestrator.compare import as_json, compare_details
    from orchestrator.export.tables import cell_rows

    d = _run({1: [33_113.6, 124_176.0, 91_062.4]})
    _heads, rows = summary_rows(d)
    assert rows[0][2:5] == ["82,784", "too noisy: CoV 56% over 3 repeats", "55.7%"]
    exported = [r for r in cell_rows(d) if r["metric"] == "iops"]
    assert exported[0]["ci_low"] is None and exported[0]["note"] == "too noisy: CoV 56% over 3 repeats"
    doc = json.loads(as_json(compare_details([d, d])))
    stats = doc["cells"][0]["runs"][0]["stats"]["iops"]
    assert stats["ci_low"] is None and stats["note"] == "too noisy: CoV 56% over 3 repeats"
