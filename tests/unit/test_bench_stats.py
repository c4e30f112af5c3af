"""The benchmarks' pure helpers (bench/benchlab.py): CPU split for pinning, /proc stat parsing, and the
per-pair ratios with their 95% interval that docs/performance.md reports."""

from __future__ import annotations

import math

import pytest

from bench.benchlab import excludes, fio_job_cpu, fmt_ci, last_report, proc_cpu, ratio_summary, ratios, split_cpus
from bench.repeatability import make_suite
from orchestrator.runs.planner import plan


def test_split_cpus_gives_fio_its_own_cpus() -> None:
    assert split_cpus({0, 1}) == (frozenset({0}), frozenset({1}))
    assert split_cpus({0, 1, 2, 3}) == (frozenset({0, 1}), frozenset({2, 3}))
    assert split_cpus({0, 2, 5}) == (frozenset({0, 2}), frozenset({5}))
    assert split_cpus({3}) is None


def test_proc_cpu_reads_own_and_reaped_children_time() -> None:
    # pid (comm with ") (" inside) state ppid ... utime=14 stime=15 cutime=16 cstime=17 (1-based fields)
    stat = "123 (a ) (b) S 1 2 3 4 5 6 7 8 9 10 250 50 1000 500 20 0 1 0 99\n"
    assert proc_cpu(stat, tick=100) == (3.0, 15.0)


def test_ratios_are_per_pair() -> None:
    assert ratios([90.0, 110.0], [100.0, 100.0]) == [0.9, 1.1]
    with pytest.raises(ValueError, match="as many"):
        ratios([1.0], [1.0, 2.0])


def test_ratio_summary_interval_matches_student_t() -> None:
    # mean 1.0, sample sd sqrt(0.04 / 3), n=4: half width t(0.975, 3) * sd / sqrt(4), t(0.975, 3) = 3.182446
    s = ratio_summary([0.9, 1.1, 0.9, 1.1])
    assert s.mean == pytest.approx(1.0)
    assert s.ci_low is not None and s.ci_high is not None
    # a ratio cannot be negative: the log-scale interval, mean * exp(-+ t CoV / sqrt(n))
    assert s.ci_high == pytest.approx(math.exp(3.182446 * (0.04 / 3) ** 0.5 / 2), rel=1e-5)
    assert s.ci_low == pytest.approx(math.exp(-3.182446 * (0.04 / 3) ** 0.5 / 2), rel=1e-5)
    assert not excludes(s, 1.0)
    assert excludes(ratio_summary([0.80, 0.82, 0.81]), 1.0)
    assert fmt_ci(s).startswith("1.0000 [") and "median 1.0000, n=4" in fmt_ci(s)


def test_fmt_ci_single_value_has_no_interval() -> None:
    assert fmt_ci(ratio_summary([0.95])) == "0.9500 [no interval: n=1] (median 0.9500, n=1)"


@pytest.mark.parametrize("order", ["interleaved", "back_to_back"])
def test_repeatability_suite_plans_precondition_then_repeats(order: str) -> None:
    steps = plan(make_suite(5, order, 10, 5, 20), ["/dev/x"])
    assert [st.kind for st in steps] == ["precondition"] + ["measure"] * 10
    names = [st.name for st in steps[1:]]
    if order == "interleaved":
        assert names[:3] == ["4k-randwrite.q16.rep1", "4k-randwrite.q1.rep1", "4k-randwrite.q16.rep2"]
    else:
        assert names[:3] == ["4k-randwrite.q16.rep1", "4k-randwrite.q16.rep2", "4k-randwrite.q16.rep3"]
    assert {st.cell["repeat"] for st in steps[1:]} == {1, 2, 3, 4, 5}


def test_fio_job_cpu_reads_the_final_report_of_status_snapshots() -> None:
    snap = '{"fio version": "fio-3.33", "jobs": [{"usr_cpu": 1.0, "sys_cpu": 1.0, "job_runtime": 1000}]}'
    final = ('{"fio version": "fio-3.33", "jobs": [{"usr_cpu": 5.0, "sys_cpu": 15.0, "job_runtime": 8000},'
             ' {"usr_cpu": 10.0, "sys_cpu": 0.0, "job_runtime": 4000}]}')
    text = f"fio: a warning\n{snap}\n{final}\n".encode()
    assert last_report(text)["jobs"][0]["job_runtime"] == 8000
    cpu, runtime = fio_job_cpu(text)
    assert cpu == pytest.approx(0.2 * 8 + 0.1 * 4)
    assert runtime == 8.0
    with pytest.raises(ValueError, match="no fio JSON"):
        last_report("fio: nothing\n")
