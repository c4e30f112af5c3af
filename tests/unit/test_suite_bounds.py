"""Suite loader bounds (issue 12, items 1 and 5): text size, YAML aliases and depth, cells counted before
expansion, typed and range-checked sizes and durations, the strict resolved Workload of a start message,
and the capacity / override checks at submit."""

from __future__ import annotations

import resource
import time
from typing import Any

import pytest
from pydantic import ValidationError

from labcontract.errors import SuiteError
from labcontract.protocol import Submit
from labcontract.suite import (
    MAX_CELLS,
    MAX_SUITE_BYTES,
    Workload,
    capacity_problems,
    override_problems,
    parse_suite,
)
from labcontract.units import parse_duration, parse_size

ONE = "suite: s\nprofiles: [{name: p, rw: read, bs: 4k}]\n"
INJECTION = "1%\nexec_prerun=touch X\n[evil]\nfilename=/dev/loop7\nrw=write\n;%"


def problems(text: str) -> list[str]:
    with pytest.raises(SuiteError) as info:
        parse_suite(text, "s.yaml")
    return [str(p) for p in info.value.problems]


def anchors_bomb(levels: int = 9) -> str:
    """The 1.3 KB kind: each level lists the previous one nine times (9**9 leaves once expanded)."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n" + ONE


def million_cells() -> str:
    vals = ", ".join(str(v) for v in range(100))
    return ("suite: s\nprofiles:\n  - {name: p, rw: randrw, bs: 4k, sweep: {rwmixread: [" + vals + "], "
            "percentage_random: [" + vals + "], iodepth: [" + ", ".join(str(v) for v in range(1, 101)) + "]}}\n")


def test_runtime_and_bs_out_of_range_are_refused_naming_the_key() -> None:
    got = problems("suite: s\ndefaults: {runtime: 99999999999999}\nprofiles: [{name: p, rw: read, bs: 1P}]\n")
    assert "defaults.runtime: 99999999999999 is out of range (must be <= 604800)" in got
    assert "profiles[0].bs: block size '1P' is over the ceiling of 64m" in got


@pytest.mark.parametrize(("option", "value", "message"), [
    ("bs", "1000", "not a multiple of 512"),
    ("bs", "128m", "over the ceiling of 64m"),
    ("bs", "256", "below 512 bytes"),
    ("ramp_time", "2d", "out of range (must be <= 86400)"),
    ("runtime", "8d", "out of range (must be <= 604800)"),
    ("runtime", "0", "out of range (must be >= 1)"),
    ("iodepth", "65537", "out of range"),
    ("numjobs", "4097", "out of range"),
    ("footprint", "2P", "over the ceiling of 1p"),
    ("footprint", "0.001%", "below 0.01%"),
    ("footprint", "'1%\\nexec_prerun=x'", "not a size"),
    ("bs", "'9999999999999999999999999999999999999999p'", "over 32 characters"),
    ("runtime", "'" + "9" * 400 + "h'", "over 32 characters"),
])
def test_each_bound_is_refused_with_its_key(option: str, value: str, message: str) -> None:
    bs = "" if option == "bs" else ", bs: 4k"
    got = problems(f"suite: s\nprofiles: [{{name: p, rw: read{bs}, {option}: {value}}}]\n")
    assert any(p.startswith(f"profiles[0].{option}: ") and message in p for p in got), got


def test_an_anchors_bomb_is_refused_before_any_expansion() -> None:
    text = anchors_bomb()
    assert len(text) < 1500
    t0 = time.monotonic()
    got = problems(text)
    assert time.monotonic() - t0 < 1
    assert got == ["line 2: not valid YAML: YAML aliases are not allowed in a suite (*l0); write the values out"]


def test_deep_nesting_and_oversized_text_and_huge_integers_are_refused() -> None:
    assert problems("suite: s\nprofiles: " + "[" * 5000 + "]" * 5000 + "\n") == [
        "line 2: not valid YAML: nested more than 16 levels deep"]
    big = ONE + "#" * MAX_SUITE_BYTES
    assert problems(big) == [f"the suite text is {len(big)} bytes, over the limit of {MAX_SUITE_BYTES} bytes"]
    got = problems("suite: s\nprofiles: [{name: p, rw: read, bs: " + "9" * 5000 + "}]\n")
    assert got[0].startswith("not a valid suite value: ")


def test_a_million_cells_are_counted_not_expanded_and_reported_with_every_other_problem() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    got = problems(million_cells().replace("bs: 4k", "bs: 1P, runtime: 99999999999999"))
    assert time.monotonic() - t0 < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000     # KiB: no expansion
    assert f"cell_limit: the suite's dimensions make 1000000 measured cells (op_modes x network x each profile's " \
           f"sweep and ladder sizes), over the ceiling of {MAX_CELLS}" in got
    assert "profiles[0].bs: block size '1P' is over the ceiling of 64m" in got
    assert "profiles[0].runtime: 99999999999999 is out of range (must be <= 604800)" in got


def test_op_modes_and_network_dimensions_count_too() -> None:
    vals = ", ".join(str(v) for v in range(100))
    forty = ", ".join(str(v) for v in range(40))
    twenty_six = ", ".join(str(v) for v in range(26))
    text = (f"suite: s\nop_modes: [stock, 'hp:10', 'hp:20']\nprofiles:\n  - {{name: p, rw: randrw, bs: 4k, "
            f"sweep: {{rwmixread: [{vals}], percentage_random: [{forty}]}}}}\n")
    assert any("make 12000 measured cells" in p for p in problems(text))
    net = (f"suite: s\nnetwork: {{paths: [p1], mtu: [1500, 9000], multipath: [single, multi]}}\nprofiles:\n"
           f"  - {{name: p, rw: randrw, bs: 4k, sweep: {{rwmixread: [{vals}], percentage_random: [{twenty_six}]}}}}\n")
    assert any("make 10400 measured cells" in p for p in problems(net))


def test_cell_limit_has_a_ceiling() -> None:
    assert problems(ONE.replace("profiles", "cell_limit: 99999999\nprofiles")) == [
        f"cell_limit: 99999999 is out of range (must be <= {MAX_CELLS})"]


def test_a_suite_at_the_ceiling_still_loads_quickly() -> None:
    vals = ", ".join(str(v) for v in range(0, 100))
    text = (f"suite: s\ncell_limit: {MAX_CELLS}\nprofiles:\n  - {{name: p, rw: randrw, bs: 4k, "
            f"sweep: {{rwmixread: [{vals}], percentage_random: [{vals}]}}}}\n")
    t0 = time.monotonic()
    assert len(parse_suite(text, "s.yaml").cells) == MAX_CELLS
    assert time.monotonic() - t0 < 5


def test_units_refuse_overflowing_values() -> None:
    for bad in ("9" * 400 + "p", "1e999"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ValueError):
        parse_duration("9" * 30 + "d")


# --- the resolved Workload (what a start message carries) ---------------------------------------------

def workload(**kw: Any) -> dict[str, Any]:
    return {"name": "p", "rw": "read", "bs": 4096, **kw}


@pytest.mark.parametrize("bad", [
    {"footprint": INJECTION},
    {"footprint": "1%;x"},
    {"footprint": "150%"},
    {"footprint": "0%"},
    {"footprint": "4k"},                       # resolved footprints are bytes or N%, nothing else
    {"footprint": str(1 << 60)},
    {"name": "x]\n[evil"},
    {"name": "../x"},
    {"bs": "4k"},                              # typed: no string
    {"bs": 1000},
    {"bs": 1 << 50},
    {"runtime": 99999999999999},
    {"ramp_time": 2 * 86400},
    {"iodepth": 0},
    {"numjobs": True},
    {"rwmixread": 101},
    {"ioengine": "external"},
])
def test_the_resolved_workload_is_strict(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Workload.model_validate(workload(**bad))


def test_a_good_resolved_workload_round_trips() -> None:
    w = Workload.model_validate(workload(footprint="12.5%", runtime=60))
    assert Workload.model_validate_json(w.model_dump_json()) == w
    assert Workload.model_validate(workload(footprint="1073741824")).footprint == "1073741824"


def test_every_builtin_suite_resolves_to_strict_workloads() -> None:
    from labcontract.suite import builtin_suites, load_suite

    for name in builtin_suites():
        for w in load_suite(name).workloads:
            assert Workload.model_validate_json(w.model_dump_json()) == w


def test_op_mode_footprints_stay_plain() -> None:
    s = parse_suite("suite: s\nop_modes: ['hp:90']\nprofiles: [{name: p, rw: read, bs: 4k, footprint: 0.01%}]\n",
                    "s.yaml")
    assert s.cells[0].workload.footprint == "0.001%"


# --- at submit: sizes against the device, overrides against the bounds -----------------------------------

def test_capacity_problems_name_the_profile_and_the_device() -> None:
    s = parse_suite("suite: s\nprofiles:\n  - {name: big, rw: read, bs: 64m}\n"
                    "  - {name: fp, rw: read, bs: 4k, footprint: 1g}\n  - {name: ok, rw: read, bs: 4k}\n", "s.yaml")
    got = [str(p) for p in capacity_problems(s, 32 << 20, "device dut0 (/dev/loop3)")]
    assert got == ["profile big.bs: block size 64m is larger than device dut0 (/dev/loop3) (33554432 bytes)",
                   "profile fp.footprint: footprint 1g is larger than device dut0 (/dev/loop3) (33554432 bytes)"]
    assert capacity_problems(s, 2 << 30, "d") == []


def test_a_block_size_larger_than_the_footprint_is_refused_at_submit() -> None:
    """fio refuses such a job at its start ("size smaller than bs"): issue 27 asks for the refusal at submit."""
    s = parse_suite("suite: s\nprofiles:\n  - {name: abs, rw: read, bs: 1m, footprint: 512k}\n"
                    "  - {name: pct, rw: read, bs: 1m, footprint: 1%}\n"
                    "  - {name: ok, rw: read, bs: 4k, footprint: 1%}\n", "s.yaml")
    got = [str(p) for p in capacity_problems(s, 64 << 20, "device dut0 (/dev/loop3)")]
    assert got == [
        "profile abs.bs: block size 1m is larger than the footprint 512k (524288 of device dut0 (/dev/loop3)): fio "
        "would refuse the job",
        "profile pct.bs: block size 1m is larger than the footprint 671088 (1% of device dut0 (/dev/loop3)): fio "
        "would refuse the job"]
    assert [p.location for p in capacity_problems(s, 1 << 30, "d")] == ["profile abs.bs"]   # 1% of 1 GiB holds 1m


def test_override_problems() -> None:
    s = parse_suite(ONE.replace("bs: 4k", "bs: 4k, runtime: 6d"), "s.yaml")
    assert [str(p) for p in override_problems(s, None, 2.0)] == [
        "--scale: makes a runtime of 1036800 s, over the ceiling of 604800 s"]
    assert override_problems(s, 60, None) == []


def test_submit_fields_are_bounded() -> None:
    base: dict[str, Any] = {"run_id": "r1", "suite_source": "s.yaml", "suite_text": ONE, "host": "h1",
                            "devices": ["dut0"], "reply_to": "lab:reply:x"}
    Submit.model_validate(base)
    for bad in ({"run_id": "../x"}, {"run_id": "a..b"}, {"suite_text": "x" * (MAX_SUITE_BYTES + 1)},
                {"runtime_override": 99999999999999}, {"scale": float("inf")}, {"devices": ["dut0\n"]},
                {"host": "h/../x"}):
        with pytest.raises(ValidationError):
            Submit.model_validate({**base, **bad})


def test_in_flight_buffers_are_bounded_per_device() -> None:
    """Each bound alone allows 4096 jobs x 65536 deep x 64 MiB (fio would take the host's memory); their
    product is capped, named by the profile, and a heavy but real ladder point still loads."""
    with pytest.raises(SuiteError) as e:
        parse_suite("suite: s\nprofiles:\n  - {name: p, rw: randread, bs: 64m, iodepth: 4096, numjobs: 64}\n", "x.yaml")
    assert "profiles[0]: numjobs x iodepth x bs = 64 x 4096 x 64m = 16t of I/O buffers per device, over the " \
           "ceiling of 16g" in str(e.value)
    assert len(parse_suite("suite: s\nprofiles:\n  - {name: p, rw: randread, bs: 1m, iodepth: 256, numjobs: 16}\n",
                           "x.yaml").cells) == 1


def test_a_run_s_steps_over_all_its_rounds_have_a_ceiling() -> None:
    """cells x max_rounds (phases.rounds) and groups x max_rounds (phases.precondition) are judged at parse: a
    suite within cell_limit could otherwise queue millions of steps round after round."""
    from labcontract.suite import MAX_RUN_STEPS, most_steps

    mixes = ", ".join(str(v) for v in range(0, 100, 5))           # 20 mixes x 10 sizes = 200 cells
    sizes = ", ".join(f"{k}k" for k in (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048))
    rounds = ("suite: s\nphases:\n  rounds: {cell: {rwmixread: 0, bs: 4k}, max_rounds: %d}\nprofiles:\n"
              f"  - {{name: p, rw: randrw, sweep: {{rwmixread: [{mixes}], bs: [{sizes}]}}}}\n")
    got = problems(rounds % 1000)     # round 1 planned, 999 more rounds of every cell, the two WIPC passes
    assert got == [f"phases.rounds.max_rounds: a run of this suite may come to {200 * 1000 + 2} steps "
                   f"over its rounds (every round up to max_rounds), over the ceiling of {MAX_RUN_STEPS}: lower "
                   "max_rounds"], got
    assert len(parse_suite(rounds % 400, "s.yaml").cells) == 200          # 200 x 400 = 80,000: within
    pre = ("suite: s\nphases:\n  precondition: {max_rounds: 100000}\nprofiles:\n"
           "  - {name: p, rw: randwrite, bs: 4k, precondition: true}\n")
    got = problems(pre)
    assert len(got) == 1 and got[0].startswith("phases.precondition.max_rounds: a run of this suite may come to "
                                               "100001 steps"), got
    ok = parse_suite(pre.replace("100000", "50000"), "s.yaml")
    assert most_steps(list(ok.cells), ok.phases) == 50_001

