"""The review methodology end to end on real loop-device DUTs: purge, preconditioning rounds to a
steady-state verdict with per-second series, device groups, stock vs HP comparison."""

from __future__ import annotations

import json
import os
import re

import pytest

from orchestrator.cells import cell_label
from tests.conftest import LabHandle

pytestmark = pytest.mark.integration


def pc_suite(max_rounds: int, range_pct: float, excursion_pct: float, rw: str = "randrw") -> str:
    mix = ", rwmixread: 70" if rw == "randrw" else ""
    return f"""\
suite: pc
phases:
  purge: true
  precondition: {{numjobs: 2, iodepth: 4, round: 2s, max_rounds: {max_rounds}, window: 3,
                  max_range_pct: {range_pct}, max_excursion_pct: {excursion_pct}}}
defaults: {{runtime: 1s, ioengine: libaio, direct: true}}
profiles:
  - {{name: 4k, rw: {rw}, bs: 4k{mix}, ladder: {{numjobs: [1, 2], iodepth: [2]}}}}
"""


def test_preconditioning_reaches_steady_state_with_series(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    run_id = lab.submit(pc_suite(max_rounds=8, range_pct=100, excursion_pct=100))
    d = lab.wait_run(run_id, timeout=120)
    assert d.run.state == "SUCCEEDED", d.run.reason
    kinds = [(st.kind, st.round) for st in d.steps]
    assert kinds == [("purge", 0), ("precondition", 1), ("precondition", 2), ("precondition", 3),
                     ("measure", 0), ("measure", 0)]
    (pc,) = d.preconditions
    assert pc.steady is True and pc.reached_round == 3 and len(pc.rounds) == 3
    assert pc.verdict.startswith("steady at round 3")
    for r, st in zip(pc.rounds, [s for s in d.steps if s.kind == "precondition"], strict=True):
        res = d.results[st.id]
        assert r["iops"] == pytest.approx(res.iops) and r["iops"] > 0
        assert r["lat_mean_ns"] and r["lat_max_ns"] and r["lat_stddev_ns"]
        series = res.series
        assert series is not None and 1 <= len(series["t"]) <= 3       # one sample per second of a 2 s round
        assert all(v is not None and v > 0 for v in series["iops"])
        assert max(v for v in series["lat_max_us"] if v) <= res.lat_max_ns / 1000 * 1.01  # type: ignore[operator]
        w = st.workload
        assert w is not None and (w["numjobs"], w["iodepth"], w["rwmixread"]) == (2, 4, 70)   # its own workload
    measured = [st for st in d.steps if st.kind == "measure"]
    assert [(st.workload or {})["numjobs"] for st in measured] == [1, 2]
    show = lab.labctl("run", "show", run_id, check=True).stdout
    # the group by its cell's one name (orchestrator.cells.cell_label), as the reports title it
    assert re.search(r"^precondition .+ \(4k\): steady, 3 round\(s\): steady at round 3", show, re.M), show


def test_preconditioning_stops_at_max_rounds_when_never_steady(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    run_id = lab.submit(pc_suite(max_rounds=3, range_pct=0.0001, excursion_pct=0.0001))
    d = lab.wait_run(run_id, timeout=120)
    assert d.run.state == "SUCCEEDED", d.run.reason
    (pc,) = d.preconditions
    assert pc.steady is False and pc.reached_round is None and len(pc.rounds) == 3
    assert pc.verdict.startswith("not steady after 3 rounds (max_rounds 3)")
    assert sum(1 for st in d.steps if st.kind == "precondition") == 3


def test_purge_discards_the_declared_dut(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    dut = lab.duts["dut0"]
    fd = os.open(dut.path, os.O_WRONLY)
    try:
        os.write(fd, b"\xab" * (1 << 20))
        os.fsync(fd)
    finally:
        os.close(fd)
    other_before = lab.duts["dut1"].backing.read_bytes()[: 1 << 20]
    run_id = lab.submit(pc_suite(max_rounds=1, range_pct=100, excursion_pct=100, rw="randread"))
    d = lab.wait_run(run_id, timeout=90)
    assert d.run.state == "SUCCEEDED", d.run.reason
    purge = d.steps[0]
    assert purge.kind == "purge" and purge.state == "SUCCEEDED"
    script = next(a for a in purge.attempts[0].artifacts if a.name == "purge.sh")
    assert (lab.lab.root / "artifacts" / script.path).read_text().splitlines()[1] == \
        f"blkdiscard --force {dut.path}"
    with open(dut.path, "rb", buffering=0) as f:
        assert f.read(1 << 20) == b"\0" * (1 << 20)     # only reads ran after the purge
    assert lab.duts["dut1"].backing.read_bytes()[: 1 << 20] == other_before    # undeclared for this run


def test_device_group_builtin_gives_per_device_and_summed_results(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    from labcontract.suite import load_suite

    text = load_suite("device-group").source_text
    run_id = lab.submit(text, ["dut0", "dut1"], scale=0.02)
    d = lab.wait_run(run_id, timeout=240)
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert d.run.devices == [lab.duts["dut0"].path, lab.duts["dut1"].path]
    assert len(d.steps) == 24
    for st in d.steps:
        res = d.results[st.id]
        assert res.per_device is not None and list(res.per_device) == d.run.devices
        per = [m["combined"]["iops"] for m in res.per_device.values()]
        assert all(v > 0 for v in per)
        assert sum(per) == pytest.approx(res.iops, rel=1e-9)
        assert max(m["combined"]["lat_max_ns"] for m in res.per_device.values()) == res.lat_max_ns
        assert st.job_text.count("new_group=1") == 2 and "size=20%" in st.job_text
    assert len(d.results[d.steps[0].id].provenance["devices"]) == 2


def test_stock_vs_hp_compare(lab: LabHandle) -> None:
    stock = lab.submit("suite: op\nop_modes: [stock]\ndefaults: {runtime: 1s}\nprofiles:\n"
                       "  - {name: 4k, rw: randrw, bs: 4k, rwmixread: 70, iodepth: 4}\n"
                       "  - {name: 128k, rw: read, bs: 128k, iodepth: 4}\n")
    hp = lab.submit("suite: op\nop_modes: ['hp:20']\ndefaults: {runtime: 1s}\nprofiles:\n"
                    "  - {name: 4k, rw: randrw, bs: 4k, rwmixread: 70, iodepth: 4}\n"
                    "  - {name: 128k, rw: read, bs: 128k, iodepth: 4}\n")
    a, b = lab.wait_run(stock), lab.wait_run(hp)
    assert a.run.state == b.run.state == "SUCCEEDED"
    assert "size=80%" in b.steps[0].job_text and "size=" not in a.steps[0].job_text
    assert b.results[b.steps[0].id].provenance["op_mode"] == "hp:20"
    out = lab.labctl("compare", stock, hp, check=True).stdout
    assert f"A: {stock} (suite op, " in out and ", stock, SUCCEEDED)" in out
    assert f"B: {hp} (suite op, " in out and ", hp:20, SUCCEEDED)" in out
    ra, rb = a.results[a.steps[0].id], b.results[b.steps[0].id]
    expect = f"{(rb.iops - ra.iops) / ra.iops * 100:+.1f}%"
    assert expect in out, out
    doc = json.loads(lab.labctl("compare", stock, hp, "--format", "json", check=True).stdout)
    assert [(r["id"], r["op_modes"], r["partial"]) for r in doc["runs"]] == [(stock, ["stock"], False),
                                                                             (hp, ["hp:20"], False)]
    assert [c["cell"] for c in doc["cells"]] == [cell_label(st.cell, st.workload) for st in a.steps]
    for cell, sa, sb in zip(doc["cells"], a.steps, b.steps, strict=True):
        assert cell["cell"] in out                                     # the full name, in the table too
        x, y = a.results[sa.id], b.results[sb.id]
        assert [r["step"] for r in cell["runs"]] == [sa.name, sb.name]
        assert cell["runs"][0]["iops"] == x.iops and cell["runs"][1]["iops"] == y.iops
        assert cell["runs"][1]["lat_mean_us"] == pytest.approx((y.lat_mean_ns or 0) / 1000)
        assert cell["runs"][1]["vs_first_pct"]["iops"] == pytest.approx((y.iops - x.iops) / x.iops * 100)
