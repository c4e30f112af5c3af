"""Suite language: validation with every problem at once, sweeps, ladders, OP modes, device groups,
built-in suites, and equivalence with the published review command lines."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from labcontract.errors import SuiteError
from labcontract.fiojob import render_job
from labcontract.suite import builtin_suites, count_steps, load_suite, parse_suite, with_overrides
from labcontract.units import format_size, parse_duration, parse_size
from orchestrator.runs.planner import plan

GOOD = """\
suite: good
defaults: {runtime: 2m, iodepth: 16, numjobs: 16, refill_buffers: true, norandommap: true, randrepeat: false}
profiles:
  - {name: 4k-read, rw: randrw, bs: 4k, rwmixread: 100}
  - {name: 8k-7030, rw: randrw, bs: 8K, rwmixread: 70, footprint: 20%}
  - {name: 128k-seq, rw: read, bs: 128KiB, iodepth: 4, footprint: 1g}
"""

# methodology.md section 3, verbatim
PUBLISHED_4K = ("fio --filename=/dev/sdx --direct=1 --rw=randrw --refill_buffers --norandommap --randrepeat=0 "
                "--ioengine=libaio --bs=4k --rwmixread=100 --iodepth=16 --numjobs=16 --runtime=60 "
                "--group_reporting --name=4ktest")
REPORTING_ONLY = {"lat_percentiles", "percentile_list"}   # change what fio reports, not what it does


def problems(text: str) -> list[str]:
    with pytest.raises(SuiteError) as info:
        parse_suite(text, "s.yaml")
    return [str(p) for p in info.value.problems]


def cli_options(cmdline: str) -> dict[str, str]:
    opts = {}
    for tok in shlex.split(cmdline)[1:]:
        key, _, value = tok[2:].partition("=")
        opts[key] = value or "1"
    return opts


def job_options(job: str) -> dict[str, str]:
    """The effective options of a single-job fio job file ([global] merged with the job section)."""
    opts: dict[str, str] = {}
    for line in job.splitlines():
        if line.startswith("[") and line != "[global]":
            opts["name"] = line.strip("[]")
        elif "=" in line and not line.startswith(";"):
            k, v = line.split("=", 1)
            opts[k] = v
    return opts


def test_good_suite_resolves_defaults() -> None:
    s = parse_suite(GOOD, "good.yaml")
    assert [w.name for w in s.workloads] == ["4k-read", "8k-7030", "128k-seq"]
    w0, w1, w2 = s.workloads
    assert (w0.bs, w0.rwmixread, w0.iodepth, w0.numjobs, w0.runtime) == (4096, 100, 16, 16, 120)
    assert w1.footprint == "20%" and w1.bs == 8192
    assert w2.iodepth == 4 and w2.footprint == str(1 << 30) and w2.rwmixread is None
    assert len(s.sha256) == 64 and s.devices == 1 and s.op_modes == ("stock",)


def test_mixed_mode_defaults_to_50_50() -> None:
    s = parse_suite("suite: m\nprofiles:\n  - {name: a, rw: randrw, bs: 4k}\n", "m.yaml")
    assert s.workloads[0].rwmixread == 50


def test_sweeps_and_ladders_are_cartesian_products_in_key_order() -> None:
    s = parse_suite("""\
suite: sw
profiles:
  - {name: p, rw: randrw, sweep: {rwmixread: [100, 50], bs: [4k, 8k]}}
  - {name: l, rw: randrw, bs: 8k, rwmixread: 70, ladder: {numjobs: [2, 4], iodepth: [2, 4, 8]}}
""", "sw.yaml")
    names = [w.name for w in s.workloads]
    assert names[:4] == ["p.r100.4k", "p.r100.8k", "p.r50.4k", "p.r50.8k"]
    assert names[4:] == ["l.t2.q2", "l.t2.q4", "l.t2.q8", "l.t4.q2", "l.t4.q4", "l.t4.q8"]
    assert [(w.numjobs, w.iodepth) for w in s.workloads[4:]] == [(2, 2), (2, 4), (2, 8), (4, 2), (4, 4), (4, 8)]
    assert s.cells[0].dims == {"rwmixread": 100, "bs": 4096}


def test_every_problem_at_once_with_key_paths() -> None:
    got = problems("""\
suite: bad
defaults: {iodepth: 0, colour: red}
profiles:
  - {name: a, rw: randread, bs: 4q}
  - {name: b, rw: randrw, bs: 4k, rwmixread: 150}
  - {name: c, rw: randread, bs: 4k, iodepth: -2, numjobs: 0}
  - {name: d, rw: sideways}
  - {name: e, rw: read, bs: 4k, rwmixread: 30}
  - {name: f, rw: randrw, sweep: {bs: [4k, 4q], colour: [1]}}
  - {name: g, rw: read, bs: 4k, footprint: 150%}
""")
    assert "defaults.iodepth: 0 is out of range (must be >= 1)" in got
    assert "defaults.colour: unknown key" in got
    assert any(p.startswith("profiles[0].bs: not a size: '4q'") for p in got)
    assert "profiles[1].rwmixread: 150 is out of range (must be <= 100)" in got
    assert "profiles[2].iodepth: -2 is out of range (must be >= 1)" in got
    assert "profiles[2].numjobs: 0 is out of range (must be >= 1)" in got
    assert any(p.startswith("profiles[3].rw: 'sideways' is not one of") for p in got)
    assert "profiles[3].bs: required key is missing (here, in a sweep or in defaults)" in got
    assert "profiles[4].rwmixread: contradicts rw=read (only mixed modes rw/readwrite/randrw take a read share)" in got
    assert "profiles[6].footprint: footprint '150%' must be above 0% and at most 100%" in got
    assert len(got) >= 10, got


def test_sweep_values_are_validated_one_by_one() -> None:
    got = problems("suite: s\nprofiles:\n  - {name: f, rw: randrw, sweep: {bs: [4k, 4q], colour: [1], "
                   "iodepth: [1, 1]}}\n")
    assert any(p.startswith("profiles[0].sweep.bs[1]: not a size: '4q'") for p in got), got
    assert any(p.startswith("profiles[0].sweep.colour: cannot sweep 'colour'") for p in got), got
    assert "profiles[0].sweep.iodepth: a value is listed twice" in got


def test_cell_limit() -> None:
    got = problems("suite: big\ncell_limit: 100\nprofiles:\n  - {name: p, rw: randrw, sweep: "
                   "{rwmixread: [0, 25, 50, 75, 100], bs: [4k, 8k, 16k, 32k, 64k], "
                   "percentage_random: [0, 25, 50, 75, 100]}}\n")
    assert got == ["cell_limit: the suite expands to 125 steps (125 measured cells), over the limit of 100"]


def test_error_message_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("suite: x\nprofiles:\n  - {name: a, rw: read, bs: 4q}\n")
    with pytest.raises(SuiteError) as info:
        load_suite(str(f))
    text = str(info.value)
    assert text.splitlines()[0] == f"{f}: 1 problem in suite"
    assert f"{f}: profiles[0].bs: not a size: '4q'" in text


def test_unknown_builtin_suite_lists_the_builtins() -> None:
    with pytest.raises(SuiteError) as info:
        load_suite("enterprise-synthetc")
    msg = str(info.value)
    assert "no built-in suite 'enterprise-synthetc'" in msg
    for name in ("enterprise-synthetic", "pattern-125", "device-group", "demo"):
        assert name in msg


@pytest.mark.parametrize(("text", "expect"), [
    ("", "a suite must be a mapping"),
    ("suite: x\nprofiles: [\n", "not valid YAML"),
    ("suite: x\nprofiles: []\n", "profiles: must not be empty"),
    ("profiles:\n  - {name: a, rw: read, bs: 4k}\n", "suite: required key is missing"),
    ("suite: 'bad name!'\nprofiles:\n  - {name: a, rw: read, bs: 4k}\n", "not a valid name"),
    ("suite: x\nprofiles:\n  - {name: a, rw: read, bs: 100}\n", "below 512 bytes"),
    ("suite: x\nprofiles:\n  - {name: a, rw: read, bs: 4k, runtime: 0}\n", "runtime"),
    ("suite: x\nop_modes: [stock, turbo]\nprofiles:\n  - {name: a, rw: read, bs: 4k}\n", "not OP modes"),
    ("suite: x\nop_modes: ['hp:95']\nprofiles:\n  - {name: a, rw: read, bs: 4k}\n", "not OP modes"),
    ("suite: x\ndevices: 0\nprofiles:\n  - {name: a, rw: read, bs: 4k}\n", "devices"),
    ("suite: x\nphases: {precondition: {round: 0}}\nprofiles:\n  - {name: a, rw: read, bs: 4k}\n", "round"),
])
def test_rejections(text: str, expect: str) -> None:
    assert any(expect in p for p in problems(text)), problems(text)


def test_units() -> None:
    assert parse_size("4k") == 4096 and parse_size("4KiB") == 4096 and parse_size("1.5m") == 1572864
    assert parse_size(512) == 512 and format_size(131072) == "128k" and format_size(1000) == "1000"
    assert parse_duration("2m") == 120 and parse_duration("6h") == 21600 and parse_duration(5) == 5
    for bad in ("4q", "", "-1k", True, 1.5, "1.0001k"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ValueError):
        parse_duration("1.5s")


def test_enterprise_4k_and_8k_jobs_equal_the_published_command_lines() -> None:
    s = load_suite("enterprise-synthetic")
    cells = {w.name: w for w in s.workloads}
    published_4k = cli_options(PUBLISHED_4K)
    expected = {
        "4k-random.r100": published_4k,
        "4k-random.r0": published_4k | {"rwmixread": "0"},
        "8k-7030.t16.q16": published_4k | {"bs": "8k", "rwmixread": "70"},
    }
    for name, want in expected.items():
        got = job_options(render_job(cells[name], "/dev/sdx"))
        want = {k: v for k, v in want.items() if k != "name"}
        got_cmp = {k: v for k, v in got.items() if k != "name"}
        assert {k: got_cmp.get(k) for k in want} == want, name
        assert set(got_cmp) - set(want) == REPORTING_ONLY, name


def test_pattern_125_expands_to_125_distinct_fio_jobs() -> None:
    s = load_suite("pattern-125")
    pattern = [c for c in s.cells if c.profile == "pattern"]
    assert len(pattern) == 125
    bodies = set()
    for c in pattern:
        opts = job_options(render_job(c.workload, "/dev/sdx"))
        del opts["name"]
        bodies.add(tuple(sorted(opts.items())))
        assert opts["rw"] == "randrw" and "percentage_random" in opts and "rwmixread" in opts
    assert len(bodies) == 125
    assert {(c.workload.rwmixread, c.workload.bs, c.workload.percentage_random) for c in pattern} == {
        (r, b * 1024, p) for r in (100, 75, 50, 25, 0) for b in (4, 8, 16, 32, 64) for p in (100, 75, 50, 25, 0)}
    extra = {c.profile: c.workload for c in s.cells if c.profile != "pattern"}
    assert (extra["block-64k"].bs, extra["block-64k"].rwmixread, extra["block-64k"].percentage_random) == \
        (65536, 100, 25)
    assert (extra["block-128k"].bs, extra["block-128k"].percentage_random) == (131072, 25)
    assert (extra["seq-128k-read"].rw, extra["seq-128k-read"].bs) == ("read", 131072)


def test_every_builtin_suite_validates_and_scales_to_seconds() -> None:
    for name in builtin_suites():
        s = load_suite(name)
        longest = max((w.runtime for w in s.workloads), default=60)
        fast = with_overrides(s, scale=min(0.02, 2 / longest))     # snia-wsat's 6 hours: scale 1/10,800
        assert all(w.runtime <= 2 for w in fast.workloads), name
        if fast.phases.precondition:
            assert fast.phases.precondition.round <= 2
    assert {w.runtime for w in with_overrides(load_suite("demo"), runtime=3).workloads} == {3}


def test_enterprise_plan_purges_and_preconditions_each_profile_with_its_own_workload() -> None:
    s = load_suite("enterprise-synthetic")
    steps = plan(s, ["/dev/sdx"])
    assert len(steps) == count_steps(list(s.cells), s.phases) == 42
    assert [st.kind for st in steps[:3]] == ["purge", "precondition", "measure"]
    ladder = [st for st in steps if st.name.startswith("8k-7030.")]
    assert len(ladder) == 16
    pcs = [st for st in steps if st.kind == "precondition"]
    assert len(pcs) == 9
    for st in pcs:
        w = st.workload
        assert w is not None and (w.numjobs, w.iodepth, w.runtime, w.time_based) == (16, 16, 60, True)
        nxt = steps[st.seq + 1]       # the cell measured after it: the same workload
        assert nxt.workload is not None and nxt.workload.identity == w.identity
    ladder_pc = next(st for st in pcs if "8k-7030" in st.name)
    assert ladder_pc.workload is not None and (ladder_pc.workload.bs, ladder_pc.workload.rwmixread) == (8192, 70)


def test_op_mode_hp_limits_the_footprint_and_says_so() -> None:
    s = parse_suite("suite: op\nop_modes: [stock, 'hp:20']\nprofiles:\n"
                    "  - {name: a, rw: randread, bs: 4k}\n  - {name: b, rw: randread, bs: 4k, footprint: 50%}\n", "op")
    by = {w.name: w for w in s.workloads}
    assert by["stock.a"].footprint is None and by["hp20.a"].footprint == "80%"
    assert by["stock.b"].footprint == "50%" and by["hp20.b"].footprint == "40%"
    steps = plan(s, ["/dev/x"])
    hp = [st for st in steps if st.cell.get("op_mode") == "hp:20"]
    assert hp and all("emulated by a footprint limit (80% of capacity usable)" in st.note for st in hp)
    assert "size=80%" in hp[0].job_text


def test_device_group_renders_one_job_per_device() -> None:
    s = load_suite("device-group")
    assert s.devices is None       # any number of devices
    w = s.workloads[0]
    job = render_job(w, ["/dev/a", "/dev/b", "/dev/c"])
    assert job.count("new_group=1") == 3 and "filename=/dev/b" in job and job.count("size=20%") == 1
    assert f"[{w.name}.dev2]" in job


def test_expansion_problems_keep_file_indices_when_other_profiles_are_invalid() -> None:
    got = problems("suite: s\ncell_limit: 3\nprofiles:\n  - {name: a, rw: read, bs: 4q}\n"
                   "  - {name: b, rw: randrw, sweep: {bs: [4k, 8k], iodepth: [1, 2]}, bs: 4k}\n")
    assert any(p.startswith("profiles[0].bs: not a size") for p in got), got
    assert "profiles[1].sweep.bs: also set as a fixed option of the profile" in got
    assert "cell_limit: the suite expands to 4 steps (4 measured cells), over the limit of 3" in got


@pytest.mark.parametrize("text", [
    "suite: a\nphases: {purge: true, precondition: {}}\nprofiles:\n"
    "  - {name: p, rw: randrw, sweep: {numjobs: [1, 2], rwmixread: [100, 0]}, bs: 4k}\n",
    "suite: b\nop_modes: [stock, 'hp:20']\nphases: {purge: true}\nprofiles:\n  - {name: p, rw: read, bs: 4k}\n",
    "suite: c\nop_modes: [stock, 'hp:20']\nphases: {purge: true, precondition: {}}\nprofiles:\n"
    "  - {name: p, rw: read, bs: 4k, precondition: false}\n  - {name: q, rw: write, bs: 4k}\n",
])
def test_counted_steps_equal_planned_steps(text: str) -> None:
    s = parse_suite(text, "count.yaml")
    assert count_steps(list(s.cells), s.phases) == len(plan(s, ["/dev/x"]))
