"""Suite validation: every problem reported at once, by file and key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from labcontract.errors import SuiteError
from labcontract.fiojob import render_job
from labcontract.suite import load_suite, parse_suite
from labcontract.units import format_size, parse_duration, parse_size

GOOD = """\
suite: good
defaults: {runtime: 2m, iodepth: 16, numjobs: 16, refill_buffers: true, norandommap: true, randrepeat: false}
workloads:
  - {name: 4k-read, rw: randrw, bs: 4k, rwmixread: 100}
  - {name: 8k-7030, rw: randrw, bs: 8K, rwmixread: 70, footprint: 20%}
  - {name: 128k-seq, rw: read, bs: 128KiB, iodepth: 4, footprint: 1g}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(SuiteError) as info:
        parse_suite(text, "s.yaml")
    return [str(p) for p in info.value.problems]


def test_good_suite_resolves_defaults() -> None:
    s = parse_suite(GOOD, "good.yaml")
    assert [w.name for w in s.workloads] == ["4k-read", "8k-7030", "128k-seq"]
    w0, w1, w2 = s.workloads
    assert (w0.bs, w0.rwmixread, w0.iodepth, w0.numjobs, w0.runtime) == (4096, 100, 16, 16, 120)
    assert w1.footprint == "20%" and w1.bs == 8192
    assert w2.iodepth == 4 and w2.footprint == str(1 << 30) and w2.rwmixread is None
    assert len(s.sha256) == 64


def test_mixed_mode_defaults_to_50_50() -> None:
    s = parse_suite("suite: m\nworkloads:\n  - {name: a, rw: randrw, bs: 4k}\n", "m.yaml")
    assert s.workloads[0].rwmixread == 50


def test_every_problem_at_once_with_key_paths() -> None:
    got = problems("""\
suite: bad
defaults: {iodepth: 0, colour: red}
workloads:
  - {name: a, rw: randread, bs: 4q}
  - {name: b, rw: randrw, bs: 4k, rwmixread: 150}
  - {name: c, rw: randread, bs: 4k, iodepth: -2, numjobs: 0}
  - {name: d, rw: sideways}
  - {name: a, rw: read, bs: 4k, rwmixread: 10}
""")
    assert "defaults.iodepth: 0 is out of range (must be >= 1)" in got
    assert "defaults.colour: unknown key" in got
    assert any(p.startswith("workloads[0].bs: not a size: '4q'") for p in got)
    assert "workloads[1].rwmixread: 150 is out of range (must be <= 100)" in got
    assert "workloads[2].iodepth: -2 is out of range (must be >= 1)" in got
    assert "workloads[2].numjobs: 0 is out of range (must be >= 1)" in got
    assert any(p.startswith("workloads[3].rw: 'sideways' is not one of") for p in got)
    assert "workloads[3].bs: required key is missing (here or in defaults)" in got
    assert "workloads[4].name: duplicate workload name 'a'" in got
    assert "workloads[4].rwmixread: only applies to mixed modes, not rw=read" in got


def test_error_message_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("suite: x\nworkloads:\n  - {name: a, rw: read, bs: 4q}\n")
    with pytest.raises(SuiteError) as info:
        load_suite(f)
    text = str(info.value)
    assert text.splitlines()[0] == f"{f}: 1 problem in suite"
    assert f"{f}: workloads[0].bs: not a size: '4q'" in text


@pytest.mark.parametrize(("text", "expect"), [
    ("", "a suite must be a mapping"),
    ("suite: x\nworkloads: [\n", "not valid YAML"),
    ("suite: x\nworkloads: []\n", "workloads"),
    ("workloads:\n  - {name: a, rw: read, bs: 4k}\n", "suite: required key is missing"),
    ("suite: 'bad name!'\nworkloads:\n  - {name: a, rw: read, bs: 4k}\n", "not a valid name"),
    ("suite: x\nworkloads:\n  - {name: a, rw: read, bs: 100}\n", "below 512 bytes"),
    ("suite: x\nworkloads:\n  - {name: a, rw: read, bs: 4k, runtime: 0}\n", "runtime"),
    ("suite: x\nworkloads:\n  - {name: a, rw: read, bs: 4k, footprint: 150%}\n", "at most 100%"),
])
def test_rejections(text: str, expect: str) -> None:
    assert any(expect in p for p in problems(text)), problems(text)


def test_missing_file_is_a_suite_error(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="cannot read"):
        load_suite(tmp_path / "nope.yaml")


def test_units() -> None:
    assert parse_size("4k") == 4096 and parse_size("4KiB") == 4096 and parse_size("1.5m") == 1572864
    assert parse_size(512) == 512 and format_size(131072) == "128k" and format_size(1000) == "1000"
    assert parse_duration("2m") == 120 and parse_duration("6h") == 21600 and parse_duration(5) == 5
    for bad in ("4q", "", "-1k", True, 1.5, "1.0001k"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ValueError):
        parse_duration("1.5s")


def test_render_matches_published_command_line_options() -> None:
    """The review's 4K command line, option by option (methodology.md section 3)."""
    s = parse_suite("""\
suite: r
workloads:
  - {name: 4ktest, rw: randrw, bs: 4k, rwmixread: 100, iodepth: 16, numjobs: 16, runtime: 60,
     refill_buffers: true, norandommap: true, randrepeat: false, ioengine: libaio, direct: true}
""", "r.yaml")
    job = render_job(s.workloads[0], "/dev/sdx")
    options = {line.split("=", 1)[0]: line.split("=", 1)[1] for line in job.splitlines() if "=" in line}
    published = {"filename": "/dev/sdx", "direct": "1", "rw": "randrw", "refill_buffers": "1",
                 "norandommap": "1", "randrepeat": "0", "ioengine": "libaio", "bs": "4k",
                 "rwmixread": "100", "iodepth": "16", "numjobs": "16", "runtime": "60",
                 "group_reporting": "1"}
    for key, value in published.items():
        assert options[key] == value, key
    assert "[4ktest]" in job


def test_runtime_override() -> None:
    s = parse_suite(GOOD, "good.yaml").with_runtime(3)
    assert {w.runtime for w in s.workloads} == {3} and {w.ramp_time for w in s.workloads} == {0}
