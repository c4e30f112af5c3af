"""sysbench output parsers (on outputs captured from real runs: tests/fixtures/apps/) and AppSpec refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agents.apps import AppSpec
from agents.apps.sysbench import failure_reason, histogram_percentile, parse_histogram, parse_interval, parse_run
from labcontract.errors import AppStepError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "apps"


def test_parse_run_read_write() -> None:
    fig = parse_run((FIX / "sysbench_rw_2t.out").read_text())
    m = fig.metrics
    assert m["tps"] == 797.58 and m["transactions"] == 2397
    assert m["qps"] == 15967.88 and m["queries"] == 47989
    assert m["errors"] == 3 and m["errors_per_s"] == 1.0
    assert m["reconnects"] == 0 and m["reconnects_per_s"] == 0.0
    assert (m["lat_min_ms"], m["lat_avg_ms"], m["lat_max_ms"]) == (1.37, 2.50, 14.84)
    assert m["threads"] == 2 and fig.seconds == pytest.approx(3.0049)
    # p99 from the histogram is sysbench's own "99th percentile: 5.99" to its rounding
    assert m["lat_p99_ms"] == pytest.approx(5.99, abs=0.01)
    assert m["lat_avg_ms"] <= m["lat_p95_ms"] <= m["lat_p99_ms"] <= m["lat_max_ms"]
    assert fig.series["tps"] == [806.05, 788.28, 799.98]
    assert fig.series["qps"][0] == 16142.07
    assert fig.series["lat_p99_ms"] == [5.77, 5.28, 6.79]
    assert fig.series["errors_per_s"] == [0.0, 1.0, 2.0]
    assert sum(n for _, n in fig.histogram) == 2397


def test_series_from_intervals_read_live() -> None:
    """A long run's output is kept only as its tail: the series come from the lines read while it ran."""
    text = (FIX / "sysbench_rw_2t.out").read_text()
    lines = text.splitlines()
    intervals = [iv for x in lines if (iv := parse_interval(x)) is not None]
    tail = "\n".join(lines[lines.index("Latency histogram (values are in milliseconds)"):])
    fig = parse_run(tail, intervals)
    assert fig.series["tps"] == [806.05, 788.28, 799.98] and fig.metrics["tps"] == 797.58
    assert fig.metrics["threads"] == 2


def test_parse_run_point_select() -> None:
    fig = parse_run((FIX / "sysbench_ps_4t.out").read_text())
    assert fig.metrics["tps"] == fig.metrics["qps"] == 30867.70
    assert fig.metrics["threads"] == 4
    assert fig.metrics["lat_p99_ms"] == pytest.approx(0.23, abs=0.005)
    assert fig.series["tps"] == [31030.10]


def test_no_report_is_refused() -> None:
    text = (FIX / "sysbench_noconn.out").read_text()
    with pytest.raises(AppStepError, match="no final report"):
        parse_run(text)
    assert "unable to connect to MySQL server" in failure_reason(text, 1)
    with pytest.raises(AppStepError):
        parse_run((FIX / "sysbench_prepare.out").read_text())


def test_interval_line() -> None:
    iv = parse_interval("[ 12s ] thds: 32 tps: 806.05 qps: 16142.07 (r/w/o: 11303.75/3224.22/1614.11) "
                        "lat (ms,95%): 5.77 err/s: 0.50 reconn/s: 1.00")
    assert iv is not None
    assert (iv.t, iv.threads, iv.tps, iv.qps, iv.lat_pct, iv.lat_ms, iv.errors_per_s, iv.reconnects_per_s) == (
        12, 32, 806.05, 16142.07, 95, 5.77, 0.5, 1.0)
    assert parse_interval("Threads started!") is None


def test_histogram_percentile() -> None:
    hist = [(1.0, 90), (2.0, 5), (3.0, 4), (10.0, 1)]
    assert histogram_percentile(hist, 90) == 1.0
    assert histogram_percentile(hist, 95) == 2.0
    assert histogram_percentile(hist, 99) == 3.0
    assert histogram_percentile(hist, 100) == 10.0
    assert histogram_percentile([], 99) is None
    assert parse_histogram("no histogram here") == []


def _spec(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "attempt_id": "a1", "run_id": "r1",
        "app": {"kind": "sysbench", "phase": "run", "point": 4, "sysbench": {"tables": 2, "table_size": 1000}},
        "duts": [{"name": "d0", "path": "/dev/loop9", "kind": "block", "size_bytes": 1 << 29}],
        "state_dir": "/var/lib/storagelab"}
    spec.update(over)
    return spec


def test_appspec_accepts() -> None:
    s = AppSpec.model_validate_json(AppSpec.model_validate(_spec()).model_dump_json())
    assert s.app.point == 4 and s.duts[0].name == "d0" and s.binaries.sysbench is None


@pytest.mark.parametrize(("over", "why"), [
    ({"extra": 1}, "Extra inputs"),
    ({"duts": [{"name": "d0", "path": "/a", "kind": "block", "size_bytes": 1},
               {"name": "d1", "path": "/b", "kind": "block", "size_bytes": 1}]}, "exactly one DUT"),
    ({"duts": []}, "at least 1"),
    ({"duts": [{"name": "d0", "path": "dev/loop0", "kind": "block", "size_bytes": 1}]}, "pattern"),
    ({"duts": [{"name": "../x", "path": "/dev/loop0", "kind": "block", "size_bytes": 1}]}, "pattern"),
    ({"state_dir": "relative"}, "pattern"),
    ({"run_id": "r1; rm -rf /"}, "pattern"),
    ({"app": {"kind": "sysbench", "phase": "run", "point": 0, "sysbench": {}}}, "names its point"),
    ({"app": {"kind": "sysbench", "phase": "run", "point": 10000, "sysbench": {}}}, "less than or equal"),
    ({"external": {"name": "x", "command": ["/bin/true"], "timeout_s": 5}}, "no external declaration"),
    ({"app": {"kind": "external", "phase": "run", "external": {"workload": "w"}}}, "declaration"),
    ({"app": {"kind": "external", "phase": "run", "external": {"workload": "w"}},
      "external": {"name": "other", "command": ["/bin/true"], "timeout_s": 5}}, "the declaration is"),
    ({"app": {"kind": "external", "phase": "run", "external": {"workload": "w"}},
      "external": {"name": "w", "command": [], "timeout_s": 5}}, "at least 1"),
    ({"binaries": {"sysbench": "sysbench"}}, "pattern"),
])
def test_appspec_refusals(over: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        AppSpec.model_validate(_spec(**over))
