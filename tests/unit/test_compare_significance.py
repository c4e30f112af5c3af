"""compare with repeats (issue 16, deliverable 2): each run's figure is the mean over a cell's repeats, and the
difference to the first run gets a verdict (orchestrator.stats.significance.judge) when both sides have 2 or
more repeats: significant with the right sign, no significant difference for overlapping noise, and "cannot
be judged" for a single run on either side; a missing cell has no verdict; network runs compare per repeat
group. Synthetic runs on a SQLite store (tests/unit/test_compare.py's helpers)."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.compare import CANNOT_JUDGE, as_csv, as_json, compare_runs
from orchestrator.comparetable import verdict_text
from orchestrator.store.models import NetGroup
from tests.unit.test_compare import add_run, c4k, db, figures, printed

__all__ = ["db"]    # the fixture

TEN_A = [100_000.0, 101_000.0, 99_000.0, 100_500.0, 99_500.0]        # mean 100,000, CoV ~0.8%
TEN_B = [x * 1.10 for x in TEN_A]                                     # +10%, the same noise
NOISY_A = [100_000.0, 120_000.0, 85_000.0, 110_000.0, 90_000.0]       # CoV ~14%
NOISY_B = [105_000.0, 88_000.0, 118_000.0, 95_000.0, 101_000.0]       # +1.4%, well inside the noise


def repeats(cell: dict[str, Any], iops: list[float]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """A cell run ``len(iops)`` times (``repeat`` 1..N, as the planner numbers them); latency = 16 / IOPS,
    so a higher IOPS is also a lower latency. A single value is a cell run once (no ``repeat`` key)."""
    if len(iops) == 1:
        return [(cell, figures(iops[0], lat_us=16e6 / iops[0] / 100))]
    return [({**cell, "repeat": k + 1}, figures(x, lat_us=16e6 / x / 100)) for k, x in enumerate(iops)]


def test_a_real_ten_percent_gain_in_small_noise_is_significant_and_better(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "ra", repeats(c4k(100), TEN_A))
        add_run(s, "rb", repeats(c4k(100), TEN_B))
        add_run(s, "rc", repeats(c4k(100), [x * 0.9 for x in TEN_A]))
        c = compare_runs(s, ["ra", "rb", "rc"])
    row = c.rows[0]
    assert len(c.rows) == 1 and row.repeats(0) == 5 and row.repeats(1) == 5
    assert row.entries[0].values["iops"] == pytest.approx(100_000.0)      # the mean, not the first repeat
    assert row.entries[1].values["iops"] == pytest.approx(110_000.0) and row.diff(1, "iops") == pytest.approx(10.0)
    v = row.verdict(1, "iops")
    assert v is not None and v.kind == "significant" and v.test == "welch" and v.p is not None and v.p < 0.001
    assert v.diff is not None and v.diff > 0 and v.effect_size is not None and v.effect_size > 3
    assert v.ci_low is not None and v.ci_high is not None and v.ci_low < 10_000 < v.ci_high and v.ci_low > 0
    lat = row.verdict(1, "lat_mean_us")
    assert lat is not None and lat.kind == "significant" and lat.diff is not None and lat.diff < 0
    worse = row.verdict(2, "iops")
    assert worse is not None and worse.kind == "significant" and worse.diff is not None and worse.diff < 0
    assert verdict_text(c, row, 1) == "significantly better"        # IOPS, MB/s up, latency down
    assert verdict_text(c, row, 2) == "significantly worse"
    text = printed(c, width=100)
    assert "A n=5 stock" in text and "+10.0%" in text and "significantly better" in text
    assert all(len(line) <= 100 for line in text.splitlines()), text
    doc = json.loads(as_json(c))
    b = doc["cells"][0]["runs"][1]
    assert doc["alpha"] == 0.05 and b["repeats"] == 5 and len(b["steps"]) == 5
    assert b["stats"]["iops"]["n"] == 5 and b["stats"]["iops"]["cov_pct"] == pytest.approx(0.79, abs=0.01)
    iops = b["verdicts"]["iops"]
    assert iops["verdict"] == "significant" and iops["test"] == "welch" and iops["effect_name"] == "Hedges' g"
    assert iops["diff_pct"] == pytest.approx(10.0) and iops["diff_ci_low_pct"] < 10 < iops["diff_ci_high_pct"]
    assert b["verdicts"]["lat_max_us"]["test"] == "mann-whitney"            # a tail figure: ranks
    assert doc["cells"][0]["runs"][0]["verdicts"]["iops"] is None           # the baseline
    assert [m["headline"] for m in doc["metrics"]] == [True, True, True] + [False] * 12   # watts, IOPS/W, MB/s/W too


def test_overlapping_noisy_repeats_give_no_significant_difference(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "ra", repeats(c4k(0), NOISY_A))
        add_run(s, "rb", repeats(c4k(0), NOISY_B))
        c = compare_runs(s, ["ra", "rb"])
    row = c.rows[0]
    v = row.verdict(1, "iops")
    assert v is not None and v.kind == "no significant difference" and v.p is not None and v.p > 0.5
    assert v.ci_low is not None and v.ci_high is not None and v.ci_low < 0 < v.ci_high
    assert verdict_text(c, row, 1) == "no significant difference"
    assert "no significant difference" in printed(c, width=160)
    rows = list(csv.DictReader(io.StringIO(as_csv(c))))
    assert rows[1]["iops_verdict"] == "no significant difference" and rows[1]["iops_test"] == "welch"
    assert float(rows[1]["iops_p"]) > 0.5 and rows[1]["repeats"] == "5" and rows[0]["iops_verdict"] == ""
    assert float(rows[1]["iops_diff_ci_low_pct"]) < 0 < float(rows[1]["iops_diff_ci_high_pct"])


@pytest.mark.parametrize(("a", "b"), [([100_000.0], [110_000.0]), (TEN_A[:3], [110_000.0]),
                                      ([100_000.0], TEN_B[:3])], ids=["1-vs-1", "3-vs-1", "1-vs-3"])
def test_a_single_run_on_either_side_cannot_be_judged(db: sessionmaker[Session], a: list[float],
                                                      b: list[float]) -> None:
    with db() as s:
        add_run(s, "ra", repeats(c4k(100), a))
        add_run(s, "rb", repeats(c4k(100), b))
        c = compare_runs(s, ["ra", "rb"])
    row = c.rows[0]
    for m in ("iops", "mb_s", "lat_mean_us", "lat_max_us"):
        v = row.verdict(1, m)
        assert v is not None and v.kind == "cannot be judged" and v.p is None and v.ci_low is None
    assert row.diff(1, "iops") == pytest.approx((sum(b) / len(b) / (sum(a) / len(a)) - 1) * 100)
    assert verdict_text(c, row, 1) == CANNOT_JUDGE == "single run: cannot judge"
    text = printed(c, width=100)
    assert CANNOT_JUDGE in text and f"{row.diff(1, 'iops'):+.1f}%" in text       # next to the bare %
    got = json.loads(as_json(c))["cells"][0]["runs"][1]["verdicts"]["iops"]
    assert got["verdict"] == "cannot be judged" and got["p"] is None and got["n_a"] == len(a)
    assert got["reason"] == "single runs: a difference cannot be judged"


def test_a_missing_cell_has_no_verdict(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "ra", repeats(c4k(100), TEN_A) + repeats(c4k(0), TEN_A))
        add_run(s, "rb", repeats(c4k(100), TEN_B))
        c = compare_runs(s, ["ra", "rb"])
    missing = c.rows[1]
    assert missing.label == "4K random write 100% 1T16Q (4k-random)"
    assert missing.samples[1] is None and missing.repeats(1) == 0
    assert missing.verdict(1, "iops") is None and verdict_text(c, missing, 1) == "-"
    assert missing.entries[1].values["iops"] is None
    doc = json.loads(as_json(c))
    assert doc["cells"][1]["runs"][1]["verdicts"]["iops"] is None and doc["cells"][1]["runs"][1]["step"] is None
    assert "None" not in printed(c) and "nan" not in as_csv(c).lower()


def test_a_run_in_progress_is_judged_on_the_repeats_it_has(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "ra", repeats(c4k(100), TEN_A))
        cells = repeats(c4k(100), TEN_B)
        add_run(s, "rb", [*cells[:3], *((cell, None) for cell, _ in cells[3:])], state="RUNNING")
        c = compare_runs(s, ["ra", "rb"])
    row = c.rows[0]
    assert c.partial(1) and row.repeats(1) == 3 and row.samples[1] is not None and row.samples[1].planned == 5
    v = row.verdict(1, "iops")
    assert v is not None and v.n_b == 3 and v.kind == "significant"
    assert row.entries[1].values["iops"] == pytest.approx(sum(TEN_B[:3]) / 3)


def _net_run(s: Session, rid: str, gbps: dict[tuple[int, str], list[float]]) -> None:
    """A network run whose cells (MTU, path mode) ran once per value, as repeat groups."""
    topo = {"target": "tgt", "initiators": ["ini0"], "tool": "fio", "paths": ["a", "b"]}
    cells = [{"op_mode": "stock", "profile": "seq-128k-read", "mtu": mtu, "paths": mode, "role": "initiator",
              "tool": "fio", "net_paths": ["a", "b"] if mode == "multi" else ["a"],
              **({"repeat": k + 1} if len(vals) > 1 else {})}
             for (mtu, mode), vals in gbps.items() for k in range(len(vals))]
    add_run(s, rid, [(cell, None) for cell in cells], suite="net", topology=topo, kind="net")
    values = [v for vals in gbps.values() for v in vals]
    for i, (cell, g) in enumerate(zip(cells, values, strict=True)):
        per_path = {"ini0.a": {"host": "ini0", "role": "initiator", "path": "a", "mtu": cell["mtu"], "gbps": g}}
        s.add(NetGroup(run_id=rid, seq=i, name=f"seq-128k-read.mtu{cell['mtu']}.{cell['paths']}",
                       cell={k: v for k, v in cell.items() if k != "role"}, hosts=["tgt", "ini0"], starts={},
                       skew_ms=1.0, window_start=10.0, window_end=14.0,
                       total={"initiator_gbps": g, "target_gbps": g, "initiator_iops": 100.0 * g},
                       per_path=per_path, per_host={}, failures=[], complete=True, created_at=1.0))
    s.commit()


def test_network_runs_compare_their_repeat_groups(db: sessionmaker[Session]) -> None:
    with db() as s:
        _net_run(s, "na", {(9000, "multi"): [9.0, 9.1, 8.9, 9.05], (1500, "multi"): [5.0]})
        _net_run(s, "nb", {(9000, "multi"): [9.9, 10.0, 9.8, 9.95], (1500, "multi"): [5.5]})
        c = compare_runs(s, ["na", "nb"])
    assert c.network and [r.label for r in c.rows] == [
        "4K random 70/30 1T16Q MTU 9000 multipath (seq-128k-read)",
        "4K random 70/30 1T16Q MTU 1500 multipath (seq-128k-read)"]
    multi, single = c.rows
    assert multi.repeats(0) == 4 and math.isclose(multi.entries[0].values["gbps"] or 0, 9.0125)
    v = multi.verdict(1, "gbps")
    assert v is not None and v.kind == "significant" and v.diff is not None and v.diff > 0
    assert verdict_text(c, multi, 1) == "significantly better"
    assert verdict_text(c, single, 1) == CANNOT_JUDGE and single.diff(1, "gbps") == pytest.approx(10.0)
    text = printed(c, width=120)
    assert "significantly better" in text and CANNOT_JUDGE in text and "None" not in text
    assert all(len(line) <= 100 for line in printed(c, width=100).splitlines())
