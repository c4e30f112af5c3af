"""Tests for labcontract.fioresult against output of the installed fio, plus pure math tests.

The fio runs (about 1 s each, all started at once) mirror what labcontract.fiojob renders:
total-latency percentiles at 50:90:95:99:99.9:99.99 and json+ histogram bins.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from labcontract.errors import FioError
from labcontract.fioresult import (
    PERCENTILE_POINTS,
    TAIL_BEYOND,
    LatencyStats,
    StepMetrics,
    bin_percentiles,
    latency_bins,
    parse_fio_output,
    percentile_key,
    percentiles_from_bins,
    pool_mean_stddev,
    summary_row,
)

FIO = shutil.which("fio")
needs_fio = pytest.mark.skipif(FIO is None, reason="fio is not installed")

COMMON = [
    "--ioengine=libaio",
    "--iodepth=4",
    "--bs=4k",
    "--size=32M",
    "--runtime=1",
    "--time_based",
    "--lat_percentiles=1",
    "--percentile_list=" + ":".join(f"{p:g}" for p in PERCENTILE_POINTS),
    "--output-format=json+",
]
RUNS: dict[str, list[str]] = {
    "randread": ["--name=rread", "--rw=randread", "--group_reporting"],
    "randwrite": ["--name=rwrite", "--rw=randwrite", "--group_reporting"],
    "randrw_grouped": ["--name=mix", "--rw=randrw", "--rwmixread=70", "--numjobs=2", "--group_reporting"],
    "randrw_ungrouped": ["--name=mix", "--rw=randrw", "--rwmixread=70", "--numjobs=2"],
    # fio's own read+write merge ("mixed"), the oracle for the combined numbers
    "randrw_unified": [
        "--name=uni",
        "--rw=randrw",
        "--rwmixread=70",
        "--group_reporting",
        "--unified_rw_reporting=both",
    ],
}
SINGLE_ENTRY = ("randread", "randwrite", "randrw_grouped", "randrw_unified")


def _start(name: str, args: list[str], workdir: Path, direct: bool) -> tuple[subprocess.Popen[bytes], Path]:
    target = workdir / f"{name}.img"
    with target.open("wb") as f:
        f.truncate(64 << 20)
    out = workdir / f"{name}.json"
    cmd = [FIO or "fio", *COMMON, *args, f"--direct={int(direct)}", f"--filename={target}", f"--output={out}"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out


@pytest.fixture(scope="session")
def fio_out(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Raw fio json+ text per workload; all runs go in parallel to keep the suite short."""
    if FIO is None:
        pytest.skip("fio is not installed")
    workdir = tmp_path_factory.mktemp("fio")
    results: dict[str, str] = {}
    pending = dict(RUNS)
    # direct=1 as the job files use; fall back to buffered I/O only where O_DIRECT is refused
    # (e.g. tmpfs), which does not change the shape of the output under test.
    for direct in (True, False):
        procs = {name: _start(name, args, workdir, direct) for name, args in pending.items()}
        failed: dict[str, str] = {}
        for name, (proc, out) in procs.items():
            _, err = proc.communicate(timeout=60)
            if proc.returncode == 0:
                results[name] = out.read_text()
            else:
                failed[name] = err.decode(errors="replace")
        pending = {name: RUNS[name] for name in failed}
        if not pending:
            return results
    pytest.fail(f"fio failed: {failed}")


@pytest.fixture(scope="session")
def fio_json(fio_out: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {name: json.loads(text) for name, text in fio_out.items()}


@pytest.fixture(scope="session")
def parsed(fio_out: dict[str, str]) -> dict[str, StepMetrics]:
    return {name: parse_fio_output(text, source=f"{name}.json") for name, text in fio_out.items()}


def _fio_pcts(lat: dict[str, Any]) -> dict[str, float]:
    return {percentile_key(float(k)): float(v) for k, v in lat["percentile"].items()}


def _bins(lat: dict[str, Any]) -> dict[int, int]:
    return {int(k): v for k, v in lat["bins"].items()}


def _strip_bins(doc: dict[str, Any]) -> str:
    """The same report as plain ``json`` output would give it (no histogram bins)."""
    doc = copy.deepcopy(doc)
    for job in doc["jobs"]:
        for ddir in ("read", "write", "trim"):
            for kind in ("slat_ns", "clat_ns", "lat_ns"):
                job.get(ddir, {}).get(kind, {}).pop("bins", None)
    return json.dumps(doc)


# --------------------------------------------------------------------------- pure math


def test_pool_matches_statistics_on_raw_samples() -> None:
    groups = [[1.0, 2.0, 3.0, 4.0], [10.0, 12.0], [7.0], [100.0, 101.0, 99.0, 250.0, 3.0]]
    parts = [(len(g), statistics.fmean(g), statistics.stdev(g) if len(g) > 1 else 0.0) for g in groups]
    n, mean, sd = pool_mean_stddev(parts)
    everything = [x for g in groups for x in g]
    assert n == len(everything)
    assert mean == pytest.approx(statistics.fmean(everything), rel=1e-12)
    # fio's stddev is the sample one (n - 1); pooling must reproduce it for the union
    assert sd == pytest.approx(statistics.stdev(everything), rel=1e-12)


def test_pool_hand_numbers() -> None:
    # {2, 4} and {6, 8, 10}: union mean 6, sum of squared deviations 16+4+0+4+16 = 40, n-1 = 4
    n, mean, sd = pool_mean_stddev([(2, 3.0, math.sqrt(2.0)), (3, 8.0, 2.0)])
    assert (n, mean) == (5, 6.0)
    assert sd == pytest.approx(math.sqrt(10.0), rel=1e-15)


def test_pool_edge_cases() -> None:
    assert pool_mean_stddev([]) == (0, 0.0, 0.0)
    assert pool_mean_stddev([(0, 0.0, 0.0), (0, 0.0, 0.0)]) == (0, 0.0, 0.0)
    assert pool_mean_stddev([(1, 5.0, 0.0)]) == (1, 5.0, 0.0)
    # empty parts are ignored, a single part is returned unchanged
    assert pool_mean_stddev([(0, 0.0, 0.0), (4, 2.5, 1.5)]) == (4, 2.5, 1.5)
    with pytest.raises(ValueError):
        pool_mean_stddev([(-1, 1.0, 1.0)])


def test_percentiles_from_bins_rule() -> None:
    bins = {300: 9, 100: 50, 400: 1, 200: 40, 250: 0}  # unordered, with an empty bin
    assert percentiles_from_bins(bins) == {
        "p50": 100.0,  # cumulative 50 >= 50
        "p90": 200.0,  # cumulative 90 >= 90
        "p95": 300.0,
        "p99": 300.0,  # cumulative 99 >= 99
        "p99.9": 400.0,  # needs 99.9 -> 100
        "p99.99": 400.0,
    }
    assert percentiles_from_bins({}) == {}
    assert percentiles_from_bins({5: 0}) == {}
    assert percentiles_from_bins({7: 1}) == {percentile_key(p): 7.0 for p in PERCENTILE_POINTS}
    assert percentiles_from_bins(bins, points=(25, 99.5)) == {"p25": 100.0, "p99.5": 400.0}
    with pytest.raises(ValueError):
        percentiles_from_bins(bins, points=(0,))
    with pytest.raises(ValueError):
        percentiles_from_bins(bins, points=(100.5,))


def test_percentiles_from_bins_uses_fios_long_double_threshold() -> None:
    # fio tests cum >= (long double) 99.9 / 100.0 * nr. The double 99.9 is a little above
    # 99.9, so for nr = 33000 the threshold is just above 32967 and 32967 is not enough;
    # a plain double computation (99.9 / 100 * 33000 == 32967.0) would pick the first bin.
    assert 99.9 / 100 * 33000 == 32967.0
    assert percentiles_from_bins({1000: 32967, 2000: 33}, points=(99.9,)) == {"p99.9": 2000.0}
    # exactly representable case: 50 % of 2 samples is reached by the first
    assert percentiles_from_bins({1000: 1, 2000: 1}, points=(50,)) == {"p50": 1000.0}


def test_points_match_job_renderer() -> None:
    from labcontract.fiojob import PERCENTILES

    assert tuple(PERCENTILES) == PERCENTILE_POINTS


def test_models_are_strict() -> None:
    with pytest.raises(ValidationError):
        LatencyStats(min_ns=1, mean_ns=2, max_ns=3, stddev_ns=1, samples=3, percentiles_ns={"p42": 1.0})
    with pytest.raises(ValidationError):
        LatencyStats.model_validate(
            {"min_ns": 1, "mean_ns": 2, "max_ns": 3, "stddev_ns": 1, "samples": 3, "extra": 1}
        )
    stats = LatencyStats(min_ns=1, mean_ns=2, max_ns=3, stddev_ns=1, samples=3)
    with pytest.raises(ValidationError):
        stats.mean_ns = 5  # type: ignore[misc]


# --------------------------------------------------------------------------- real fio output


@needs_fio
@pytest.mark.parametrize("name", SINGLE_ENTRY)
def test_bin_percentiles_equal_fios_own(
    name: str, fio_json: dict[str, dict[str, Any]], parsed: dict[str, StepMetrics]
) -> None:
    job = fio_json[name]["jobs"][0]
    m = parsed[name]
    assert m.jobs == 1
    for ddir in ("read", "write"):
        lat = job[ddir]["lat_ns"]
        stats = getattr(m, ddir).lat
        if lat["N"] == 0:
            assert stats is None
            continue
        assert sum(_bins(lat).values()) == lat["N"]
        assert stats is not None
        asked = {percentile_key(p) for p in PERCENTILE_POINTS}
        tail = {"p99.999"} if lat["N"] >= 1_000_000 else set()
        assert set(stats.percentiles_ns) == asked | tail
        # computed from the bins, not copied: must agree exactly with fio's own numbers
        assert percentiles_from_bins(_bins(lat)) == _fio_pcts(lat)
        assert {k: v for k, v in stats.percentiles_ns.items() if k in asked} == _fio_pcts(lat)
        assert stats.samples == lat["N"]
        assert (stats.min_ns, stats.max_ns) == (lat["min"], lat["max"])
        assert stats.mean_ns == lat["mean"] and stats.stddev_ns == lat["stddev"]
        d = job[ddir]
        direction = getattr(m, ddir)
        assert (direction.ios, direction.io_bytes, direction.runtime_ms) == (
            d["total_ios"],
            d["io_bytes"],
            d["runtime"],
        )
        assert (direction.iops, direction.bw_bytes) == (d["iops"], d["bw_bytes"])


@needs_fio
def test_read_only_and_write_only(parsed: dict[str, StepMetrics]) -> None:
    r = parsed["randread"]
    assert r.fio_version.startswith("fio-") and r.errors == 0
    assert r.read.ios > 0 and r.read.lat is not None
    assert r.write.lat is None and r.write.ios == 0 and r.write.iops == 0
    assert r.combined.iops == r.read.iops
    assert r.combined.percentiles_ns == r.read.lat.percentiles_ns
    assert r.combined.lat_mean_ns == r.read.lat.mean_ns
    assert r.combined.lat_stddev_ns == r.read.lat.stddev_ns
    w = parsed["randwrite"]
    assert w.read.lat is None and w.write.lat is not None and w.write.ios > 0
    assert w.combined.lat_max_ns == w.write.lat.max_ns


@needs_fio
@pytest.mark.parametrize("name", list(RUNS))
def test_combined_is_consistent(name: str, parsed: dict[str, StepMetrics]) -> None:
    m = parsed[name]
    r, w, c = m.read, m.write, m.combined
    assert c.iops == r.iops + w.iops
    assert c.bw_bytes == r.bw_bytes + w.bw_bytes
    assert c.ios == r.ios + w.ios
    assert m.runtime_ms == max(r.runtime_ms, w.runtime_ms) > 0
    lats = [x for x in (r.lat, w.lat) if x is not None]
    n = sum(x.samples for x in lats)
    assert c.lat_mean_ns == pytest.approx(sum(x.mean_ns * x.samples for x in lats) / n, rel=1e-12)
    assert c.lat_max_ns == max(x.max_ns for x in lats)
    assert c.lat_stddev_ns is not None and c.lat_stddev_ns >= min(x.stddev_ns for x in lats) * 0.5
    assert {percentile_key(p) for p in PERCENTILE_POINTS} <= set(c.percentiles_ns)
    values = [c.percentiles_ns[percentile_key(p)] for p in PERCENTILE_POINTS]
    assert values == sorted(values)
    # a merged percentile lies between the per-direction ones
    for key, value in c.percentiles_ns.items():
        per_dir = [x.percentiles_ns[key] for x in lats]
        assert min(per_dir) <= value <= max(per_dir)


@needs_fio
def test_combined_matches_fios_mixed_report(
    fio_json: dict[str, dict[str, Any]], parsed: dict[str, StepMetrics]
) -> None:
    """unified_rw_reporting=both makes fio merge read+write itself: our combined must agree."""
    mixed = fio_json["randrw_unified"]["jobs"][0]["mixed"]
    c = parsed["randrw_unified"].combined
    assert c.ios == mixed["total_ios"]
    job = fio_json["randrw_unified"]["jobs"][0]
    if job["read"]["runtime"] == job["write"]["runtime"] == mixed["runtime"]:
        # fio derives the mixed rates from the totals over the runtime and truncates bw to an
        # integer, so the sum of the two truncated per-direction values may be 1 B/s lower each
        assert 0 <= mixed["bw_bytes"] - c.bw_bytes <= 2
        assert c.iops == pytest.approx(mixed["iops"], abs=1e-5)  # fio prints 6 decimals
    else:  # directions timed over runtimes a millisecond apart
        assert c.bw_bytes == pytest.approx(mixed["bw_bytes"], rel=5e-3)
        assert c.iops == pytest.approx(mixed["iops"], rel=5e-3)
    lat = mixed["lat_ns"]
    assert c.lat_max_ns == lat["max"]
    # fio pools full-precision values; we pool the 6-decimal printed ones
    assert c.lat_mean_ns == pytest.approx(lat["mean"], rel=1e-9)
    assert c.lat_stddev_ns == pytest.approx(lat["stddev"], rel=1e-9)
    assert {k: v for k, v in c.percentiles_ns.items() if k != "p99.999"} == _fio_pcts(lat)
    # completion latency beside the total, from its own bins: fio's own mixed clat percentiles
    clat = mixed["clat_ns"]
    assert {k: v for k, v in c.clat_percentiles_ns.items() if k != "p99.999"} == _fio_pcts(clat)
    assert c.clat_mean_ns == pytest.approx(clat["mean"], rel=1e-9)


@needs_fio
def test_merging_two_job_entries(fio_json: dict[str, dict[str, Any]], parsed: dict[str, StepMetrics]) -> None:
    jobs = fio_json["randrw_ungrouped"]["jobs"]
    m = parsed["randrw_ungrouped"]
    assert len(jobs) == 2 and m.jobs == 2
    assert m.errors == sum(j["error"] for j in jobs)
    for ddir in ("read", "write"):
        got = getattr(m, ddir)
        parts = [j[ddir] for j in jobs]
        assert got.ios == sum(p["total_ios"] for p in parts)
        assert got.io_bytes == sum(p["io_bytes"] for p in parts)
        assert got.iops == pytest.approx(sum(p["iops"] for p in parts), rel=1e-12)
        assert got.bw_bytes == sum(p["bw_bytes"] for p in parts)
        assert got.runtime_ms == max(p["runtime"] for p in parts)
        lats = [p["lat_ns"] for p in parts]
        assert got.lat is not None
        n = sum(x["N"] for x in lats)
        assert got.lat.samples == n
        assert got.lat.min_ns == min(x["min"] for x in lats)
        assert got.lat.max_ns == max(x["max"] for x in lats)
        assert got.lat.mean_ns == pytest.approx(sum(x["mean"] * x["N"] for x in lats) / n, rel=1e-12)
        expected_sd = pool_mean_stddev([(x["N"], x["mean"], x["stddev"]) for x in lats])[2]
        assert got.lat.stddev_ns == pytest.approx(expected_sd, rel=1e-12)
        assert min(x["stddev"] for x in lats) * 0.5 <= got.lat.stddev_ns
        merged: dict[int, int] = {}
        for x in lats:
            for value, count in _bins(x).items():
                merged[value] = merged.get(value, 0) + count
        assert got.lat.percentiles_ns == percentiles_from_bins(merged)
        for key, value in got.lat.percentiles_ns.items():
            per_job = [_fio_pcts(x)[key] for x in lats]
            assert min(per_job) <= value <= max(per_job)


@needs_fio
def test_plain_json_without_bins(fio_json: dict[str, dict[str, Any]]) -> None:
    single = parse_fio_output(_strip_bins(fio_json["randrw_grouped"]))
    job = fio_json["randrw_grouped"]["jobs"][0]
    assert single.read.lat is not None and single.write.lat is not None
    # one job: fio's own per-direction percentiles are used ...
    assert single.read.lat.percentiles_ns == _fio_pcts(job["read"]["lat_ns"])
    assert single.write.lat.percentiles_ns == _fio_pcts(job["write"]["lat_ns"])
    # ... but read and write percentiles cannot be merged without bins
    assert single.combined.percentiles_ns == {}
    assert math.isnan(summary_row(single)["lat_p99_us"])
    read_only = parse_fio_output(_strip_bins(fio_json["randread"]))
    assert read_only.combined.percentiles_ns == _fio_pcts(fio_json["randread"]["jobs"][0]["read"]["lat_ns"])
    multi = parse_fio_output(_strip_bins(fio_json["randrw_ungrouped"]))
    assert multi.read.lat is not None and multi.read.lat.percentiles_ns == {}
    assert multi.combined.percentiles_ns == {}


@needs_fio
def test_summary_row(parsed: dict[str, StepMetrics]) -> None:
    m = parsed["randrw_grouped"]
    row = summary_row(m)
    assert list(row) == [
        "read_iops",
        "write_iops",
        "iops",
        "read_bw_bytes",
        "write_bw_bytes",
        "bw_bytes",
        "lat_mean_us",
        "lat_max_us",
        "lat_stddev_us",
        "lat_p50_us",
        "lat_p99_us",
        "lat_p99.99_us",
    ]
    assert all(isinstance(v, float) for v in row.values())
    assert row["iops"] == row["read_iops"] + row["write_iops"]
    assert row["bw_bytes"] == row["read_bw_bytes"] + row["write_bw_bytes"]
    c = m.combined
    assert c.lat_mean_ns is not None and c.lat_max_ns is not None and c.lat_stddev_ns is not None
    assert row["lat_mean_us"] == pytest.approx(c.lat_mean_ns / 1000)
    assert row["lat_max_us"] == pytest.approx(c.lat_max_ns / 1000)
    assert row["lat_stddev_us"] == pytest.approx(c.lat_stddev_ns / 1000)
    assert row["lat_p50_us"] == pytest.approx(c.percentiles_ns["p50"] / 1000)
    assert row["lat_p99.99_us"] == pytest.approx(c.percentiles_ns["p99.99"] / 1000)


@needs_fio
def test_preamble_bytes_and_repeated_reports(fio_out: dict[str, str], parsed: dict[str, StepMetrics]) -> None:
    text = fio_out["randread"]
    expected = parsed["randread"]
    noisy = "fio: this platform does not support process shared mutexes\nwarning: something\n" + text
    assert parse_fio_output(noisy) == expected
    assert parse_fio_output(noisy.encode()) == expected
    assert parse_fio_output(text + "\nfio: trailing note\n") == expected
    # --status-interval prints one report after another; the last one is the final result
    interim = json.loads(text)
    interim["jobs"][0]["read"]["total_ios"] = 1
    assert parse_fio_output(json.dumps(interim) + "\n" + text) == expected


@needs_fio
def test_bad_output_raises_fio_error_naming_source(fio_out: dict[str, str]) -> None:
    text = fio_out["randrw_grouped"]
    doc = json.loads(text)
    no_n = copy.deepcopy(doc)
    del no_n["jobs"][0]["write"]["lat_ns"]["N"]
    trimmed = copy.deepcopy(doc)
    trimmed["jobs"][0]["trim"]["total_ios"] = 5
    cases = {
        "": "empty",
        "  \n\n": "empty",
        "fio: engine libaio not loadable\n": "no JSON",
        "garbage {not json}": "no JSON",
        "{not json}\n": "invalid JSON",
        text[: len(text) // 2]: "truncated",
        "fio: note\n[1, 2]\n{\n": "invalid JSON",
        "[1, 2]": "no JSON",
        json.dumps({"fio version": "fio-3.33", "jobs": []}): "no jobs",
        json.dumps({"jobs": doc["jobs"]}): "fio version",
        json.dumps({"fio version": "fio-3.33"}): "'jobs'",
        json.dumps(no_n): "jobs[0].write.lat_ns.N",
        json.dumps(trimmed): "trim",
    }
    for bad, fragment in cases.items():
        with pytest.raises(FioError) as info:
            parse_fio_output(bad, source="/results/step-7.json")
        assert info.value.path == "/results/step-7.json"
        assert str(info.value).startswith("/results/step-7.json: ")
        assert fragment in str(info.value), (bad[:60], str(info.value))


# --------------------------------------------------------------------------- latency_bins (stored as Result.lat_hist)


def _merge(*bins: dict[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for b in bins:
        for v, c in b.items():
            out[v] = out.get(v, 0) + c
    return out


@needs_fio
def test_latency_bins_merge_every_job_of_real_fio_output(fio_out: dict[str, str], fio_json: dict[str, Any],
                                                         parsed: dict[str, StepMetrics]) -> None:
    got = latency_bins(fio_out["randrw_ungrouped"], source="mix.json")
    assert got is not None
    total, per = got
    jobs = fio_json["randrw_ungrouped"]["jobs"]
    assert len(jobs) == 2
    for d in ("read", "write"):
        want = _merge(*(_bins(j[d]["lat_ns"]) for j in jobs))
        assert total[d] == [[v, c] for v, c in sorted(want.items()) if c > 0]
        assert sum(c for _v, c in total[d]) == sum(j[d]["lat_ns"]["N"] for j in jobs)
    assert list(per) == ["mix"] and per["mix"] == total          # one jobname: its bins are the total
    both = _merge(*({v: c for v, c in total[d]} for d in ("read", "write")))
    assert percentiles_from_bins(both) == parsed["randrw_ungrouped"].combined.percentiles_ns


@needs_fio
def test_latency_bins_of_a_read_only_job_leave_write_empty(fio_out: dict[str, str]) -> None:
    got = latency_bins(fio_out["randread"])
    assert got is not None
    total, per = got
    assert total["write"] == [] and total["read"] and per == {"rread": {"read": total["read"], "write": []}}


def _group_report() -> dict[str, Any]:
    def job(name: str, read: dict[str, int], write: dict[str, int]) -> dict[str, Any]:
        def ddir(bins: dict[str, int]) -> dict[str, Any]:
            n = sum(bins.values())
            return {"total_ios": n, "io_bytes": 4096 * n, "iops": float(n), "bw_bytes": 4096.0 * n, "runtime": 1000,
                    "lat_ns": {"N": n, "mean": 1.0, "stddev": 0.0, "min": 1.0, "max": 2.0, "bins": bins}}
        return {"jobname": name, "error": 0, "read": ddir(read), "write": ddir(write)}
    return {"fio version": "fio-3.33", "jobs": [job("w.dev0", {"1000": 3, "2000": 1}, {"5000": 2}),
                                                job("w.dev1", {"1000": 1, "3000": 4}, {})]}


def test_latency_bins_per_device_section_and_merged_total() -> None:
    text = json.dumps(_group_report())
    got = latency_bins("fio: a warning line\n" + text)
    assert got is not None
    total, per = got
    assert total == {"read": [[1000, 4], [2000, 1], [3000, 4]], "write": [[5000, 2]]}
    assert per == {"w.dev0": {"read": [[1000, 3], [2000, 1]], "write": [[5000, 2]]},
                   "w.dev1": {"read": [[1000, 1], [3000, 4]], "write": []}}
    stream = text + "\n" + text                                     # --status-interval: the last report counts
    assert latency_bins(stream) == got


def test_latency_bins_none_without_histogram_and_errors_name_the_source() -> None:
    doc = _group_report()
    del doc["jobs"][1]["read"]["lat_ns"]["bins"]
    assert latency_bins(json.dumps(doc)) is None                   # plain json output: nothing to store
    doc["jobs"][0]["read"]["lat_ns"]["bins"] = {"x": 1}
    with pytest.raises(FioError, match=r"g\.json.*jobs\[0\]\.read\.lat_ns\.bins: bin value 'x'"):
        latency_bins(json.dumps(doc), source="g.json")


# --------------------------------------------------------------------------- fio's CPU (issue 26)


def test_fios_cpu_is_kept_per_step_and_per_io(fio_json: dict[str, dict[str, Any]],
                                              parsed: dict[str, StepMetrics]) -> None:
    # Reviews of host-driven cards print the host CPU an I/O costs; fio reports usr_cpu / sys_cpu per job entry
    # (% of one CPU over the entry's runtime): added up as CPU seconds over the step.
    for name, doc in fio_json.items():
        m = parsed[name]
        assert m.cpu is not None, name
        usr = sum(j["usr_cpu"] / 100 * max(j["read"]["runtime"], j["write"]["runtime"]) / 1000 for j in doc["jobs"])
        sys_ = sum(j["sys_cpu"] / 100 * max(j["read"]["runtime"], j["write"]["runtime"]) / 1000 for j in doc["jobs"])
        assert m.cpu.usr_pct == pytest.approx(usr / (m.runtime_ms / 1000) * 100, rel=1e-9)
        assert m.cpu.sys_pct == pytest.approx(sys_ / (m.runtime_ms / 1000) * 100, rel=1e-9)
        assert m.cpu.usr_pct + m.cpu.sys_pct > 0
        assert m.cpu.us_per_io == pytest.approx((usr + sys_) * 1e6 / m.combined.ios, rel=1e-9)


def test_output_without_cpu_figures_has_none_and_absurd_ones_are_refused(fio_json: dict[str, dict[str, Any]]) -> None:
    doc = copy.deepcopy(fio_json["randread"])
    del doc["jobs"][0]["usr_cpu"]
    assert parse_fio_output(json.dumps(doc)).cpu is None
    doc = copy.deepcopy(fio_json["randread"])
    doc["jobs"][0]["sys_cpu"] = -1.0
    with pytest.raises(FioError, match="sys_cpu out of range"):
        parse_fio_output(json.dumps(doc))


@needs_fio
@pytest.mark.parametrize("name", SINGLE_ENTRY)
def test_completion_latency_is_kept_beside_the_total_from_its_own_bins(
    name: str, fio_json: dict[str, dict[str, Any]], parsed: dict[str, StepMetrics], fio_out: dict[str, str]
) -> None:
    """fio's clat_ns (what fio prints by default) is read into ``clat`` with its own bins and percentiles, equal to
    fio's; the total stays in ``lat``: the two are never mixed (completion never exceeds total on average)."""
    job, m = fio_json[name]["jobs"][0], parsed[name]
    clat_bins = latency_bins(fio_out[name], completion=True)
    assert clat_bins is not None
    for ddir in ("read", "write"):
        clat, stats = job[ddir]["clat_ns"], getattr(m, ddir).clat
        if clat["N"] == 0:
            assert stats is None
            continue
        assert stats is not None and stats.samples == clat["N"]
        assert (stats.min_ns, stats.max_ns, stats.mean_ns, stats.stddev_ns) == (
            clat["min"], clat["max"], clat["mean"], clat["stddev"])
        assert {k: v for k, v in stats.percentiles_ns.items() if k != "p99.999"} == _fio_pcts(clat)
        total = getattr(m, ddir).lat
        assert total is not None and stats.mean_ns <= total.mean_ns
        assert {ns: c for ns, c in clat_bins[0][ddir]} == {k: v for k, v in _bins(clat).items() if v > 0}
    assert m.combined.clat_mean_ns is not None and m.combined.clat_mean_ns <= (m.combined.lat_mean_ns or 0)


def test_the_99_999th_percentile_is_given_only_when_the_sample_holds_it() -> None:
    """p99.999 comes from the bins when at least TAIL_BEYOND I/Os lie beyond it (1,000,000 I/Os), never from
    fewer: below that it would be one of the largest few samples."""
    need = round(TAIL_BEYOND / 1e-5)
    assert need == 1_000_000
    held = bin_percentiles({100: need - 20, 500: 15, 9000: 5})
    assert held["p99.999"] == 500.0 and held["p99.99"] == 100.0 and held["p50"] == 100.0
    assert "p99.999" not in bin_percentiles({100: need - 21, 500: 15, 9000: 5})


def test_a_result_stored_before_completion_latency_was_kept_still_reads(parsed: dict[str, StepMetrics]) -> None:
    """A StepMetrics dump without clat fields (stored before) validates: clat None, no clat percentiles."""
    dump = parsed["randread"].model_dump(mode="json")
    for d in ("read", "write"):
        dump[d].pop("clat")
    dump["combined"].pop("clat_mean_ns")
    dump["combined"].pop("clat_percentiles_ns")
    old = StepMetrics.model_validate(dump)
    assert old.read.clat is None and old.combined.clat_mean_ns is None and old.combined.clat_percentiles_ns == {}
    assert old.combined.percentiles_ns == parsed["randread"].combined.percentiles_ns
