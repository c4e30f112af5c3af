"""pgbench output and per-transaction log parsers, on outputs captured from real pgbench 15 runs
(tests/fixtures/apps/pgbench_*): the figures are checked against an independent exact computation."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agents.apps.pgbench import (
    EXACT_BELOW_US,
    LatencyHistogram,
    failure_reason,
    figures,
    parse_init,
    parse_progress,
    parse_summary,
    read_txlogs,
    version_number,
)
from labcontract.apps import AppResult

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "apps"


def _exact(paths: list[Path]) -> tuple[list[int], int, list[tuple[int, int]]]:
    """(sorted latencies, failed count, (latency, completion us)) the simple way: whole files in memory."""
    lats: list[int] = []
    done: list[tuple[int, int]] = []
    failed = 0
    for p in paths:
        for line in p.read_text().splitlines():
            f = line.split()
            if f[2] == "failed":
                failed += 1
                continue
            lats.append(int(f[2]))
            done.append((int(f[2]), int(f[4]) * 1_000_000 + int(f[5])))
    return sorted(lats), failed, done


def _nearest_rank(sorted_values: list[int], pct: float) -> int:
    return sorted_values[max(1, math.ceil(pct / 100 * len(sorted_values))) - 1]


def test_summary_of_a_run() -> None:
    s = parse_summary((FIX / "pgbench_run_2c.out").read_text())
    assert s == {"tps": 302.563474, "transactions": 906, "errors": 0, "lat_avg_ms": 6.582, "lat_stddev_ms": 4.234,
                 "conn_ms": 16.172, "clients": 2, "threads": 2, "scale": 1}


def test_summary_with_serialization_failures() -> None:
    s = parse_summary((FIX / "pgbench_serializable.out").read_text())
    assert s["errors"] == 903 and s["transactions"] == 304 and s["tps"] == 153.865854 and s["clients"] == 4


def test_summary_of_a_failed_start_is_empty() -> None:
    text = (FIX / "pgbench_nodb.out").read_text()
    assert parse_summary(text) == {}
    why = failure_reason(text, 1)
    assert why.startswith("pgbench failed (exit 1): ") and 'database "nosuchdb" does not exist' in why


def test_progress_lines() -> None:
    lines = [x for x in (FIX / "pgbench_run_2c.out").read_text().splitlines() if x.startswith("progress:")]
    got = [parse_progress(x) for x in lines]
    assert [(p.t, p.tps, p.lat_ms, p.failed) for p in got if p] == [
        (1.0, 345.9, 5.663, 0), (2.0, 269.1, 7.418, 0), (3.0, 288.9, 6.882, 0)]
    ser = [parse_progress(x) for x in (FIX / "pgbench_serializable.out").read_text().splitlines()]
    assert [p.failed for p in ser if p] == [452, 451]
    nan = parse_progress("progress: 5.0 s, 0.0 tps, lat NaN ms stddev NaN, 0 failed")
    assert nan is not None and nan.tps == 0.0 and nan.lat_ms is None
    assert parse_progress("number of clients: 2") is None
    assert parse_progress("starting vacuum...end.") is None


def test_init_output() -> None:
    m = parse_init((FIX / "pgbench_init.out").read_text())
    assert m == {"load_s": 0.95, "drop_tables_s": 0.0, "create_tables_s": 0.01, "client_side_generate_s": 0.48,
                 "vacuum_s": 0.26, "primary_keys_s": 0.19}


def test_version() -> None:
    assert version_number("pgbench (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)") == "15.20"
    assert version_number("postgres (PostgreSQL) 16.4") == "16.4"
    assert version_number("") == "unknown"


def test_txlog_against_exact_computation() -> None:
    paths = [FIX / "pgbench_log_2c.0", FIX / "pgbench_log_2c.1"]
    log = read_txlogs(paths, 2)
    lats, failed, done = _exact(paths)
    h = log.hist
    assert h.count == len(lats) == 796 and failed == log.failed == 0 and log.bad_lines == 0
    assert h.min_us == lats[0] and h.max_us == lats[-1] and h.sum_us == sum(lats)
    for pct in (50, 95, 99, 100):
        got = h.percentile_us(pct)
        assert got is not None
        assert abs(got - _nearest_rank(lats, pct)) <= max(1.0, _nearest_rank(lats, pct) / 1024), pct
    # the per-second series: two seconds from the earliest start, summing to every completed transaction
    t0 = min(d - lat for lat, d in done)
    assert log.t0_us == t0
    assert len(log.tps) == 2 and sum(log.tps) == 796
    first = [lat for lat, d in done if d - t0 < 1_000_000]
    assert log.tps[0] == len(first)
    assert log.lat_avg_ms[0] == pytest.approx(sum(first) / len(first) / 1000)


def test_txlog_with_failures_and_figures() -> None:
    paths = [FIX / "pgbench_log_ser.0", FIX / "pgbench_log_ser.1"]
    log = read_txlogs(paths, 2)
    lats, failed, _ = _exact(paths)
    assert log.failed == failed == 903 and log.hist.count == len(lats) == 304
    summary = parse_summary((FIX / "pgbench_serializable.out").read_text())
    metrics, series = figures(summary, log, 2)
    assert metrics["errors"] == 903 and metrics["transactions"] == 304
    assert metrics["lat_avg_ms"] == pytest.approx(sum(lats) / len(lats) / 1000)
    assert metrics["lat_p95_ms"] <= metrics["lat_p99_ms"] <= metrics["lat_max_ms"] == lats[-1] / 1000
    assert sum(series["tps"]) == 304
    AppResult(tool="pgbench", metrics=metrics, series=series)        # names and values fit the contract


def test_txlog_odd_lines(tmp_path: Path) -> None:
    p = tmp_path / "pgbench_log.1"
    p.write_text("0 1 1500 0 1700000000 500000\n"
                 "garbage\n"
                 "\n"
                 "0 2 skipped 0 1700000000 600000\n"
                 "0 3 serialization 0 1700000000 700000\n"
                 "0 4 2500 0 1700000009 0\n"            # long after the end: counted in the last second
                 + "0 5 " + "9" * 600 + " 0 1700000000 1\n")
    log = read_txlogs([p], 3)
    assert log.hist.count == 2 and log.skipped == 1 and log.failed == 1 and log.bad_lines == 2
    assert log.t0_us == 1_700_000_000_498_500
    assert log.tps == [1.0, 0.0, 1.0] and log.lat_avg_ms == [1.5, 0.0, 2.5]
    assert read_txlogs([], 3).hist.count == 0


def test_txlog_line_without_newline_is_bounded(tmp_path: Path) -> None:
    p = tmp_path / "pgbench_log.2"
    p.write_text("0 1 1500 0 1700000000 500000\n" + "7" * (1 << 20) + "\n0 2 1000 0 1700000000 900000")
    log = read_txlogs([p], 1)
    assert log.hist.count == 2 and log.bad_lines == 1 and log.tps == [2.0]


def test_histogram_is_bounded_and_precise() -> None:
    h = LatencyHistogram()
    for us in range(1, 2_000_000, 7):
        h.add(us)
    assert len(h.buckets) < EXACT_BELOW_US + 12 * 512
    p99 = h.percentile_us(99)
    assert p99 is not None and abs(p99 - 0.99 * 2_000_000) / 2_000_000 < 0.002
    assert LatencyHistogram().percentile_us(99) is None
