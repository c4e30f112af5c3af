"""Tests for labcontract.fioseries (per-second series from fio --status-interval json+ output)
and labcontract.fioresult.parse_fio_groups, against output of the installed fio plus
synthetic cumulative reports built from known latency samples.

The fio runs (all started at once, about 4.5 s together) are:

* ``mix``: randrw 70/30, numjobs=2, group_reporting, 4 s, ``--status-interval=1``;
* ``ramp``: randread, ramp_time=2 then 2 s, ``--status-interval=1`` (fio resets its counters
  when the ramp ends);
* ``groups`` / ``groups_stream``: the device-group job file (one section per device, each with
  ``new_group=1``), plain json+ for 1 s and a 2 s stream;
* ``one_group``: the same job file without ``new_group`` (fio then folds both sections into one
  entry).
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from labcontract.errors import FioError
from labcontract.fioresult import (
    PERCENTILE_POINTS,
    StepMetrics,
    parse_fio_groups,
    parse_fio_output,
    pool_mean_stddev,
)
from labcontract.fioseries import SecondSample, parse_status_stream, series_summary, split_status_stream
from tests.fiosynth import bin_value

FIO = shutil.which("fio")
PLIST = ":".join(f"{p:g}" for p in PERCENTILE_POINTS)
MIX_RUNTIME = 4

GROUP_JOB = """\
[global]
ioengine=libaio
direct={direct}
time_based=1
runtime={runtime}
group_reporting=1
lat_percentiles=1
percentile_list={plist}
rw=randread
bs=4k
iodepth=4
numjobs=2
[a-dev0]
{new_group}filename={dir}/x0.img
[a-dev1]
{new_group}filename={dir}/x1.img
"""


def _cli(name: str, extra: list[str]) -> list[str]:
    return [
        f"--name={name}",
        "--ioengine=libaio",
        "--bs=4k",
        "--iodepth=4",
        "--numjobs=2",
        "--group_reporting",
        "--time_based",
        "--lat_percentiles=1",
        f"--percentile_list={PLIST}",
        "--output-format=json+",
        *extra,
    ]


def _argv(name: str, workdir: Path, direct: bool) -> list[str]:
    d = int(direct)
    if name == "mix":
        args = _cli("mix", ["--rw=randrw", "--rwmixread=70", f"--runtime={MIX_RUNTIME}", "--status-interval=1",
                            f"--filename={workdir / 'mix.img'}", f"--direct={d}"])
    elif name == "ramp":
        args = _cli("ramp", ["--rw=randread", "--ramp_time=2", "--runtime=2", "--status-interval=1",
                             f"--filename={workdir / 'ramp.img'}", f"--direct={d}"])
    else:
        runtime = 2 if name == "groups_stream" else 1
        job = workdir / f"{name}.fio"
        job.write_text(GROUP_JOB.format(direct=d, runtime=runtime, plist=PLIST, dir=workdir,
                                        new_group="" if name == "one_group" else "new_group=1\n"))
        args = ["--output-format=json+", str(job)]
        if name == "groups_stream":
            args.insert(0, "--status-interval=1")
    return [FIO or "fio", *args, f"--output={workdir / (name + '.json')}"]


RUNS = ("mix", "ramp", "groups", "groups_stream", "one_group")


@pytest.fixture(scope="session")
def fio_out(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Raw output per run; all runs go in parallel to keep the suite short."""
    if FIO is None:
        pytest.skip("fio is not installed")
    workdir = tmp_path_factory.mktemp("fioseries")
    for img in ("mix.img", "ramp.img", "x0.img", "x1.img"):
        with (workdir / img).open("wb") as f:
            f.truncate(64 << 20)
    results: dict[str, str] = {}
    pending: Sequence[str] = RUNS
    failed: dict[str, str] = {}
    # direct=1 as the job files use; buffered I/O only where O_DIRECT is refused (tmpfs).
    for direct in (True, False):
        procs = {
            name: subprocess.Popen(_argv(name, workdir, direct), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for name in pending
        }
        failed = {}
        for name, proc in procs.items():
            _, err = proc.communicate(timeout=60)
            if proc.returncode == 0:
                results[name] = (workdir / f"{name}.json").read_text()
            else:
                failed[name] = err.decode(errors="replace")
        pending = list(failed)
        if not pending:
            return results
    pytest.fail(f"fio failed: {failed}")


@pytest.fixture(scope="session")
def mix(fio_out: dict[str, str]) -> tuple[list[SecondSample], StepMetrics]:
    return parse_status_stream(fio_out["mix"], source="mix.json")


def _docs(text: str) -> list[dict[str, Any]]:
    return [json.loads(part) for part in split_status_stream(text)]


# --------------------------------------------------------------------------- fio's format


def test_stream_format_facts(fio_out: dict[str, str]) -> None:
    text = fio_out["mix"]
    # one complete report after another, each starting at a line start, newline-separated,
    # nothing else in the file
    starts = [i for i, line in enumerate(text.splitlines()) if line.startswith("{")]
    ends = [i for i, line in enumerate(text.splitlines()) if line.startswith("}")]
    assert len(starts) == len(ends) >= MIX_RUNTIME
    assert all(e + 1 == s for e, s in zip(ends, starts[1:], strict=False))
    parts = split_status_stream(text)
    assert "\n".join(parts) + "\n" == text
    docs = [json.loads(p) for p in parts]
    # the same keys in interim and final reports
    assert all(d.keys() == docs[-1].keys() for d in docs)
    assert all(d["jobs"][0].keys() == docs[-1]["jobs"][0].keys() for d in docs)
    # cumulative: the job clock (runtime, ms) and counters only grow; elapsed is whole seconds
    runtimes = [d["jobs"][0]["read"]["runtime"] for d in docs]
    assert runtimes == sorted(runtimes) and runtimes[-1] >= MIX_RUNTIME * 1000 - 50
    ios = [d["jobs"][0]["read"]["total_ios"] for d in docs]
    assert ios == sorted(ios)
    assert all(isinstance(d["jobs"][0]["elapsed"], int) for d in docs)
    stamps = [d["timestamp_ms"] for d in docs]
    assert stamps == sorted(stamps)
    # the final report is complete: issued == completed == histogram total
    final = docs[-1]["jobs"][0]["read"]
    assert final["total_ios"] == final["lat_ns"]["N"] == sum(final["lat_ns"]["bins"].values())
    # parse_fio_output on the whole stream reads the last report: the same as the series' metrics
    assert parse_fio_output(text) == parse_status_stream(text, source="mix")[1]


# --------------------------------------------------------------------------- real series


def test_sample_count_and_clock(mix: tuple[list[SecondSample], StepMetrics]) -> None:
    samples, final = mix
    assert MIX_RUNTIME - 1 <= len(samples) <= MIX_RUNTIME + 2
    assert all(s.dt > 0 for s in samples)
    assert samples[0].t == pytest.approx(samples[0].dt)
    for prev, cur in itertools.pairwise(samples):
        assert cur.t == pytest.approx(prev.t + cur.dt)
    for s in samples[1:-1]:  # interim intervals: one status interval each
        assert 0.5 < s.dt < 1.5
    assert samples[-1].t == pytest.approx(final.runtime_ms / 1000)


def test_iops_add_up_to_final_report(mix: tuple[list[SecondSample], StepMetrics]) -> None:
    samples, final = mix
    total = math.fsum(s.iops * s.dt for s in samples)
    assert total == pytest.approx(final.combined.ios, rel=1e-9)
    reads = math.fsum(s.read_iops * s.dt for s in samples)
    assert reads == pytest.approx(final.read.ios, rel=1e-9)
    # against fio's own rate (io over runtime), within a few percent
    assert total / samples[-1].t == pytest.approx(final.combined.iops, rel=0.03)
    for s in samples:
        assert s.iops == pytest.approx(s.read_iops + s.write_iops)
        if s.iops * s.dt >= 200:   # an interval with I/O to speak of (a loaded machine can stall fio for a second)
            assert s.read_iops > s.write_iops > 0  # rwmixread=70


def test_latency_pools_back_to_final_report(mix: tuple[list[SecondSample], StepMetrics]) -> None:
    samples, final = mix
    c = final.combined
    assert c.lat_mean_ns is not None and c.lat_stddev_ns is not None and c.lat_max_ns is not None
    assert sum(s.lat_samples for s in samples) == c.ios
    weighted = math.fsum((s.lat_mean_ns or 0.0) * s.lat_samples for s in samples) / c.ios
    assert weighted == pytest.approx(c.lat_mean_ns, rel=1e-9)
    n, mean, sd = pool_mean_stddev((s.lat_samples, s.lat_mean_ns or 0.0, s.lat_stddev_ns or 0.0) for s in samples)
    assert n == c.ios
    assert mean == pytest.approx(c.lat_mean_ns, rel=1e-9)
    assert sd == pytest.approx(c.lat_stddev_ns, rel=1e-6)
    maxes = [s.lat_max_ns for s in samples]
    assert all(m is not None for m in maxes)
    top = max(m for m in maxes if m is not None)
    assert top == pytest.approx(c.lat_max_ns, rel=0.02)  # bin resolution (in fact exact: see module doc)
    for s in samples:
        assert s.lat_mean_ns is not None and s.lat_max_ns is not None
        assert s.lat_mean_ns <= s.lat_max_ns <= c.lat_max_ns


def test_series_summary_columns(mix: tuple[list[SecondSample], StepMetrics]) -> None:
    samples, _ = mix
    cols = series_summary(samples)
    assert set(cols) >= {"t", "iops", "lat_mean_us", "lat_max_us", "lat_stddev_us"}
    assert all(len(v) == len(samples) for v in cols.values())
    assert cols["t"] == [s.t for s in samples]
    assert cols["lat_mean_us"][0] == pytest.approx((samples[0].lat_mean_ns or 0) / 1000)
    assert json.loads(json.dumps(cols)) == cols


def test_ramp_time_reports_are_dropped(fio_out: dict[str, str]) -> None:
    text = fio_out["ramp"]
    docs = _docs(text)
    # fio's ramp: issued I/O counted but no latency recorded, then everything reset
    ramp = [d for d in docs if d["jobs"][0]["read"]["lat_ns"]["N"] == 0 and d["jobs"][0]["read"]["total_ios"] > 0]
    assert ramp, "expected status reports during ramp_time"
    samples, final = parse_status_stream(text, source="ramp.json")
    assert 1 <= len(samples) <= 4
    assert samples[-1].t == pytest.approx(final.runtime_ms / 1000)
    assert math.fsum(s.iops * s.dt for s in samples) == pytest.approx(final.combined.ios, rel=1e-9)
    assert final.read.lat is not None
    assert sum(s.lat_samples for s in samples) == final.read.lat.samples
    assert all(s.write_iops == 0 for s in samples)


def test_group_stream_pools_every_entry(fio_out: dict[str, str]) -> None:
    text = fio_out["groups_stream"]
    samples, final = parse_status_stream(text, source="groups_stream.json")
    assert final.jobs == 2
    assert math.fsum(s.iops * s.dt for s in samples) == pytest.approx(final.combined.ios, rel=1e-9)
    assert final.combined.lat_mean_ns is not None
    weighted = math.fsum((s.lat_mean_ns or 0.0) * s.lat_samples for s in samples) / final.combined.ios
    assert weighted == pytest.approx(final.combined.lat_mean_ns, rel=1e-9)
    groups = parse_fio_groups(split_status_stream(text)[-1])
    assert list(groups) == ["a-dev0", "a-dev1"]


# --------------------------------------------------------------------------- per-group results


def test_groups_one_entry_per_section(fio_out: dict[str, str]) -> None:
    text = fio_out["groups"]
    doc = json.loads(text)
    assert [j["jobname"] for j in doc["jobs"]] == ["a-dev0", "a-dev1"]
    assert [j["groupid"] for j in doc["jobs"]] == [0, 1]
    for j in doc["jobs"]:  # numjobs=2 folded by group_reporting: job_runtime sums the members
        assert j["job_runtime"] >= 1.9 * j["read"]["runtime"]
    groups = parse_fio_groups(text, source="groups.json")
    total = parse_fio_output(text, source="groups.json")
    assert list(groups) == ["a-dev0", "a-dev1"]
    assert all(g.jobs == 1 for g in groups.values()) and total.jobs == 2
    assert math.fsum(g.read.iops for g in groups.values()) == pytest.approx(total.read.iops, rel=1e-12)
    assert math.fsum(g.combined.iops for g in groups.values()) == pytest.approx(total.combined.iops, rel=1e-12)
    assert sum(g.combined.ios for g in groups.values()) == total.combined.ios
    assert math.fsum(g.read.bw_bytes for g in groups.values()) == pytest.approx(total.read.bw_bytes, rel=1e-12)
    # latency: pooling the groups gives the aggregate
    n, mean, sd = pool_mean_stddev(
        (g.combined.ios, g.combined.lat_mean_ns or 0.0, g.combined.lat_stddev_ns or 0.0) for g in groups.values()
    )
    assert n == total.combined.ios
    assert mean == pytest.approx(total.combined.lat_mean_ns, rel=1e-9)
    assert sd == pytest.approx(total.combined.lat_stddev_ns, rel=1e-9)
    assert max(g.combined.lat_max_ns or 0 for g in groups.values()) == total.combined.lat_max_ns
    # each group on its own equals the aggregate of a one-entry output
    for i, name in enumerate(groups):
        alone = dict(doc, jobs=[doc["jobs"][i]])
        assert groups[name] == parse_fio_output(json.dumps(alone))


def test_without_new_group_sections_fold_into_one_entry(fio_out: dict[str, str]) -> None:
    doc = json.loads(fio_out["one_group"])
    assert [j["jobname"] for j in doc["jobs"]] == ["a-dev0"]
    assert list(parse_fio_groups(fio_out["one_group"])) == ["a-dev0"]


def test_groups_reject_repeated_names(fio_out: dict[str, str]) -> None:
    doc = json.loads(fio_out["groups"])
    doc["jobs"][1]["jobname"] = doc["jobs"][0]["jobname"]
    with pytest.raises(FioError, match=r"jobs\[1\]\.jobname: 'a-dev0' repeats jobs\[0\]"):
        parse_fio_groups(json.dumps(doc), source="dup.json")


# --------------------------------------------------------------------------- synthetic reports



def _lat(samples: Sequence[int]) -> dict[str, Any]:
    if not samples:
        return {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}
    bins: dict[str, int] = {}
    for x in samples:
        key = str(bin_value(x))
        bins[key] = bins.get(key, 0) + 1
    return {
        "min": min(samples),
        "max": max(samples),
        "mean": statistics.fmean(samples),
        "stddev": statistics.stdev(samples) if len(samples) > 1 else 0.0,
        "N": len(samples),
        "bins": bins,
    }


def _direction(samples: Sequence[int], runtime_ms: int, ios: int | None = None) -> dict[str, Any]:
    n = len(samples) if ios is None else ios
    return {
        "io_bytes": n * 4096,
        "bw_bytes": n * 4096 * 1000 // max(runtime_ms, 1),
        "iops": n * 1000 / max(runtime_ms, 1),
        "runtime": runtime_ms if n else 0,
        "total_ios": n,
        "lat_ns": _lat(samples),
    }


def _report(runtime_ms: int, jobs: Mapping[str, tuple[Sequence[int], Sequence[int]]]) -> str:
    """One cumulative json+ report: per job name the read and write latencies so far."""
    doc = {
        "fio version": "fio-3.33",
        "timestamp_ms": 1_700_000_000_000 + runtime_ms,
        "jobs": [
            {"jobname": name, "groupid": i, "error": 0,
             "read": _direction(r, runtime_ms), "write": _direction(w, runtime_ms)}
            for i, (name, (r, w)) in enumerate(jobs.items())
        ],
    }
    return json.dumps(doc, indent=2)


# latencies (ns) completed in three intervals, by job and direction
INTERVALS: list[dict[str, tuple[list[int], list[int]]]] = [
    {"a": ([1000, 1200, 900, 50_000], [3000, 3100]), "b": ([800, 810], [])},
    {"a": ([1100, 1300], [2900]), "b": ([700, 20_000, 650], [5000, 5100, 4900])},
    {"a": ([950, 10_000, 1010], []), "b": ([], [])},
]
TIMES_MS = [900, 1900, 2900]


def _cumulative(upto: int) -> dict[str, tuple[list[int], list[int]]]:
    out: dict[str, tuple[list[int], list[int]]] = {}
    for interval in INTERVALS[:upto]:
        for name, (r, w) in interval.items():
            cr, cw = out.setdefault(name, ([], []))
            cr.extend(r)
            cw.extend(w)
    return out


def _stream(sep: str = "\n") -> str:
    return sep.join(_report(t, _cumulative(k + 1)) for k, t in enumerate(TIMES_MS)) + "\n"


def test_synthetic_differencing_is_exact() -> None:
    samples, final = parse_status_stream(_stream(), source="synthetic")
    assert [s.t for s in samples] == [0.9, 1.9, 2.9]
    assert [s.dt for s in samples] == pytest.approx([0.9, 1.0, 1.0])
    for s, interval in zip(samples, INTERVALS, strict=True):
        reads = [x for r, _ in interval.values() for x in r]
        writes = [x for _, w in interval.values() for x in w]
        everything = reads + writes
        assert s.read_iops == pytest.approx(len(reads) / s.dt)
        assert s.write_iops == pytest.approx(len(writes) / s.dt)
        assert s.iops == pytest.approx(len(everything) / s.dt)
        assert s.lat_samples == len(everything)
        assert s.lat_mean_ns == pytest.approx(statistics.fmean(everything), rel=1e-12)
        assert s.lat_stddev_ns == pytest.approx(statistics.stdev(everything), rel=1e-9)
    # max: exact where a part's running max grew in the interval (50000 in a's reads, then
    # 20000 in b's reads), otherwise the histogram bin of the interval's largest sample
    # (10000 in a's reads, whose max is already 50000), within half a bin: 1/128
    assert samples[0].lat_max_ns == 50_000
    assert samples[1].lat_max_ns == 20_000
    assert bin_value(10_000) != 10_000
    assert samples[2].lat_max_ns == bin_value(10_000)
    assert samples[2].lat_max_ns == pytest.approx(10_000, rel=1 / 128)
    assert final.combined.ios == sum(len(r) + len(w) for i in INTERVALS for r, w in i.values())


def test_synthetic_interval_without_io_has_no_latency() -> None:
    text = _stream() + _report(3900, _cumulative(3))
    samples, _ = parse_status_stream(text, source="synthetic")
    assert len(samples) == 4
    idle = samples[-1]
    assert (idle.iops, idle.lat_samples) == (0.0, 0)
    assert (idle.lat_mean_ns, idle.lat_max_ns, idle.lat_stddev_ns) == (None, None, None)
    assert series_summary(samples)["lat_max_us"][-1] is None


def test_single_report_is_one_interval_from_the_start() -> None:
    text = _report(2000, _cumulative(2))
    samples, final = parse_status_stream(text, source="one")
    assert len(samples) == 1
    s = samples[0]
    assert (s.t, s.dt) == (2.0, 2.0)
    assert s.lat_samples == final.combined.ios
    assert s.lat_mean_ns == pytest.approx(final.combined.lat_mean_ns, rel=1e-12)
    assert s.lat_stddev_ns == pytest.approx(final.combined.lat_stddev_ns, rel=1e-9)
    assert s.lat_max_ns == final.combined.lat_max_ns


def test_no_job_time_yet_gives_no_samples() -> None:
    empty: dict[str, tuple[list[int], list[int]]] = {"a": ([], []), "b": ([], [])}
    samples, _ = parse_status_stream(_report(0, empty), source="idle")
    assert samples == []


def test_noise_between_reports_is_skipped() -> None:
    reports = [_report(t, _cumulative(k + 1)) for k, t in enumerate(TIMES_MS)]
    text = "fio: some warning\n" + reports[0] + "\nfio: another line\n\n" + reports[1] + "\n" + reports[2]
    samples, _ = parse_status_stream(text.encode(), source="noisy")
    assert samples == parse_status_stream(_stream(), source="clean")[0]
    assert len(split_status_stream(text)) == 3


def test_truncated_last_report_is_ignored() -> None:
    full = _stream()
    cut = full[: full.rindex('"jobs"') + 20]
    samples, metrics = parse_status_stream(cut, source="cut")
    assert len(samples) == 2
    assert metrics == parse_fio_output(_report(TIMES_MS[1], _cumulative(2)))
    with pytest.raises(FioError, match="no complete JSON report"):
        parse_status_stream(_report(900, _cumulative(1))[:200], source="cut")
    with pytest.raises(FioError, match="empty output"):
        parse_status_stream(b"  \n", source="empty")


def test_corrupt_report_before_others_is_an_error() -> None:
    reports = [_report(t, _cumulative(k + 1)) for k, t in enumerate(TIMES_MS)]
    text = reports[0] + "\n" + reports[1][:300] + "\n" + reports[2] + "\n"
    with pytest.raises(FioError, match=r"report\[1\] at line \d+: invalid JSON"):
        parse_status_stream(text, source="bad")


def test_counters_going_backwards_name_the_report() -> None:
    reports = [_report(t, _cumulative(k + 1)) for k, t in enumerate(TIMES_MS)]
    text = "\n".join([reports[0], reports[2], reports[1]])
    with pytest.raises(FioError, match=r"bad: report\[2\]: jobs\[0\]\.read\.total_ios \d+ -> \d+ went backwards "
                                       r"from report\[1\]"):
        parse_status_stream(text, source="bad")
    far_back = json.loads(reports[2])
    for job in far_back["jobs"]:          # same counters, clock 2 s earlier: not the final report's clock
        for ddir in ("read", "write"):
            job[ddir]["runtime"] = 900
    with pytest.raises(FioError, match=r"runtime 2900 -> 900 ms went backwards"):
        parse_status_stream("\n".join([*reports, json.dumps(far_back)]), source="bad")
    doc = json.loads(reports[2])
    doc["jobs"][1]["write"]["total_ios"] = 1
    text = "\n".join([reports[0], reports[1], json.dumps(doc)])
    with pytest.raises(FioError, match=r"report\[2\]: jobs\[1\]\.write\.total_ios 3 -> 1 went backwards"):
        parse_status_stream(text, source="bad")


def test_ramp_reset_restarts_the_series() -> None:
    ramp = json.loads(_report(900, _cumulative(1)))
    for job in ramp["jobs"]:  # during ramp_time fio counts I/O but records no latency
        for ddir in ("read", "write"):
            job[ddir]["lat_ns"] = _lat([])
            job[ddir]["total_ios"] += 1000
    text = json.dumps(ramp) + "\n" + _stream()
    samples, _ = parse_status_stream(text, source="ramp")
    assert samples == parse_status_stream(_stream(), source="plain")[0]


def test_reports_at_the_same_job_time_merge() -> None:
    reports = [_report(t, _cumulative(k + 1)) for k, t in enumerate(TIMES_MS)]
    same_time = _report(TIMES_MS[1], _cumulative(1))  # an earlier snapshot at the same ms
    text = "\n".join([reports[0], same_time, reports[1], reports[2]])
    samples, _ = parse_status_stream(text, source="dup-t")
    assert samples == parse_status_stream(_stream(), source="plain")[0]


def test_changed_job_entries_and_missing_bins_are_errors() -> None:
    other = _report(1900, {"a": INTERVALS[0]["a"], "c": ([1], [])})
    with pytest.raises(FioError, match=r"report\[1\]: job entries \['a', 'c'\] differ"):
        parse_status_stream(_report(900, _cumulative(1)) + "\n" + other, source="x")
    docs = [json.loads(_report(t, _cumulative(k + 1))) for k, t in enumerate(TIMES_MS)]
    for doc in docs:
        for job in doc["jobs"]:
            for ddir in ("read", "write"):
                job[ddir]["lat_ns"].pop("bins", None)
    with pytest.raises(FioError, match=r"lat_ns\.bins: missing"):
        parse_status_stream("\n".join(json.dumps(d) for d in docs), source="plain-json")


def test_final_report_with_a_slightly_earlier_clock_supersedes_the_last_interim() -> None:
    """fio's final report stops a job's clock where its I/O ended; the interim report before it may
    have counted a few ms more. Seen with fio 3.33: runtime 2006 -> 2002 ms in the final report."""
    reports = [_report(t, _cumulative(k + 1)) for k, t in enumerate(TIMES_MS)]
    final = _report(TIMES_MS[-1] - 4, _cumulative(3))
    samples, metrics = parse_status_stream("\n".join([*reports, final]), source="clock")
    assert [s.t for s in samples] == [0.9, 1.9, 2.896]
    assert metrics.runtime_ms == TIMES_MS[-1] - 4
    assert math.fsum(s.iops * s.dt for s in samples) == pytest.approx(metrics.combined.ios, rel=1e-9)
