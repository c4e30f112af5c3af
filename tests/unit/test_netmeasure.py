"""Parsing of the libiscsi tools' and fio's real outputs (captured in tests/fixtures/net/ from
the namespace lab, docs/network-tests.md) and rendering of the per-path nbd job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.netmeasure import (
    FioPathResult,
    FioRun,
    NetMeasureError,
    NetPathTarget,
    Sample,
    fio_path_result,
    fio_samples,
    methodology_workloads,
    parse_iscsi_ls,
    parse_iscsi_perf,
    parse_readcapacity16,
    path_failures,
    path_section,
    render_nbd_job,
    split_reports,
)
from labcontract.errors import LabError, StepError
from labcontract.fioresult import parse_fio_groups
from labcontract.suite import Workload, load_suite

NET = Path(__file__).resolve().parents[1] / "fixtures" / "net"
IQN = "iqn.2026-11.lab.storagelab:netlab-15db04"
TARGETS = [NetPathTarget("ini0.a", "198.18.128.1", IQN, mtu=1500), NetPathTarget("ini0.b", "198.18.128.5", IQN,
                                                                                   mtu=1500)]


def fixture(name: str) -> str:
    return (NET / name).read_text()


# --------------------------------------------------------------------------- iSCSI tools


def test_iscsi_ls_lists_target_portal_and_luns() -> None:
    (t,) = parse_iscsi_ls(fixture("iscsi-ls.txt"))
    assert t.iqn == IQN
    assert t.portal == "198.18.128.1:3260,1"
    assert t.luns == {0: "STORAGE_ARRAY_CONTROLLER", 1: "DIRECT_ACCESS (Size:255M)"}


def test_iscsi_ls_of_nothing_is_empty() -> None:
    assert parse_iscsi_ls("") == []


def test_readcapacity16_gives_block_size_and_count() -> None:
    cap = parse_readcapacity16(fixture("iscsi-readcapacity16.txt"))
    assert (cap.block_size, cap.blocks, cap.bytes) == (512, 524288, 256 * 1024 * 1024)


def test_readcapacity16_without_fields_raises_a_project_error() -> None:
    with pytest.raises(LabError, match="RETURNED LOGICAL BLOCK ADDRESS"):
        parse_readcapacity16("iscsi_connect failed\n")


@pytest.mark.parametrize("name", ["iscsi-perf-seq.txt", "iscsi-perf-random.txt"])
def test_iscsi_perf_counts_whole_seconds_only(name: str) -> None:
    r = parse_iscsi_perf(fixture(name), path="ini0.a", mtu=9000)
    assert r.transfer_bytes == 131072
    assert len(r.per_second_ios) == 3 and r.seconds == 3.0      # the 0.5 s before SIGINT is not counted
    assert r.ios == sum(r.per_second_ios)
    assert r.bytes == r.ios * 131072
    assert r.gbps == pytest.approx(r.bytes * 8 / 1e9 / 3)
    assert 0.25 < r.gbps < 0.3                                   # one 300 Mbit/s path
    assert r.iops == pytest.approx(r.ios / 3)
    assert (r.path, r.mtu) == ("ini0.a", 9000)


def test_iscsi_perf_without_samples_raises() -> None:
    head = fixture("iscsi-perf-seq.txt").split("infinite runtime")[0]
    with pytest.raises(NetMeasureError, match="no per-second lines"):
        parse_iscsi_perf(head)
    with pytest.raises(NetMeasureError, match="transfer size"):
        parse_iscsi_perf("iscsi_connect failed")


def test_target_urls() -> None:
    t = TARGETS[1]
    assert t.iscsi_url == f"iscsi://198.18.128.5:3260/{IQN}/1"
    assert t.nbd_uri == "nbd://198.18.128.5:10809"


# --------------------------------------------------------------------------- job rendering


def test_render_has_one_new_group_section_per_path() -> None:
    w = methodology_workloads(runtime=5)[0].model_copy(update={"iodepth": 8})
    assert render_nbd_job(w, TARGETS) == fixture("fio-failure-job.fio")   # what the real run used


def test_render_methodology_random_25() -> None:
    w = methodology_workloads(runtime=30, ramp_time=5)[1]
    job = render_nbd_job(w, TARGETS[:1])
    for line in ("ioengine=nbd", "rw=randrw", "bs=64k", "rwmixread=100", "percentage_random=25",
                 "runtime=30", "ramp_time=5", "[block-64k.ini0.a]", "uri=nbd://198.18.128.1:10809"):
        assert line in job.splitlines()
    assert "direct=" not in job and "filename=" not in job


def test_render_any_125_pattern_from_the_builtin_suite() -> None:
    suite = load_suite("pattern-125")
    assert len(suite.workloads) == 128
    w = next(w for w in suite.workloads if w.rwmixread == 75 and w.bs == 8192 and w.percentage_random == 50)
    job = render_nbd_job(w, TARGETS).splitlines()
    assert {"rw=randrw", "bs=8k", "rwmixread=75", "percentage_random=50", "numjobs=4", "iodepth=16"} <= set(job)
    assert job.count("new_group=1") == 2


def test_render_footprint_becomes_size() -> None:
    w = Workload(name="x", rw="read", bs=4096, footprint=str(64 << 20))
    assert "size=64m" in render_nbd_job(w, TARGETS).splitlines()


# --------------------------------------------------------------------------- fio reports


def failure_results() -> dict[str, FioPathResult]:
    meta = json.loads(fixture("fio-failure-meta.json"))
    w = methodology_workloads(runtime=5)[0]
    return {t.key: fio_path_result(t, path_section(w, t.key), fixture(f"fio-failure-{t.key}.json"),
                                   meta["paths"][t.key]["returncode"], meta["t0_ms_approx"]) for t in TARGETS}


def test_status_stream_splits_into_reports() -> None:
    reports = split_reports(fixture("fio-failure-ini0.a.json"))
    assert len(reports) == 6                 # 5 status reports + the final one
    stamps = [r["timestamp_ms"] for r in reports]
    assert stamps == sorted(stamps)


def test_a_report_cut_by_a_kill_is_dropped() -> None:
    text = fixture("fio-failure-ini0.a.json")
    cut = text[: len(text) - 200]
    assert len(split_reports(cut)) == 5
    assert split_reports("fio: some warning\n") == []


def test_path_results_from_a_run_with_a_failed_path() -> None:
    res = failure_results()
    a, b = res["ini0.a"], res["ini0.b"]
    assert a.completed and not b.completed and b.returncode is None
    assert a.metrics.runtime_ms >= 4900 and a.gbps > 0.27
    assert len(a.samples) == 6 and len(b.samples) == 2
    per_s = a.per_second_gbps()
    assert all(g > 0.27 for _, g in per_s[1:-1])
    # each final report agrees with parse_fio_groups on the same text
    assert parse_fio_groups(fixture("fio-failure-ini0.a.json"))["seq-128k-read.ini0.a"] == a.metrics


def test_path_failure_is_located_in_time() -> None:
    (f,) = path_failures(failure_results())
    assert f.path == "ini0.b" and f.survivors == ("ini0.a",)
    assert 1.5 <= f.stopped_at_s <= 2.6            # link went down 2.5 s after the start
    assert f.carried_on_s > 2.5
    assert 0.27 < f.survivor_gbps < 0.3


def test_no_failure_when_every_path_carries_on() -> None:
    s = tuple(Sample(t, int(t * 1e6), int(t)) for t in (1.0, 2.0, 3.0))
    ok = failure_results()["ini0.a"]
    res = {"a": FioPathResult("a", 1500, ok.metrics, s, True, 0), "b": FioPathResult("b", 1500, ok.metrics, s, True, 0)}
    assert path_failures(res) == ()


def test_a_path_that_stalls_but_ends_is_a_failure() -> None:
    ok = failure_results()["ini0.a"]
    moving = tuple(Sample(t, int(t * 1e6), int(t)) for t in (1.0, 2.0, 3.0, 4.0, 5.0))
    stalled = tuple(Sample(t, min(int(t * 1e6), 2_000_000), 2) for t in (1.0, 2.0, 3.0, 4.0, 5.0))
    res = {"a": FioPathResult("a", 1500, ok.metrics, moving, True, 0),
           "b": FioPathResult("b", 1500, ok.metrics, stalled, True, 0)}
    (f,) = path_failures(res)
    assert (f.path, f.stopped_at_s, f.carried_on_s) == ("b", 2.0, 3.0)
    assert f.survivor_gbps == pytest.approx(3e6 * 8 / 1e9 / 3)


def _report(ts: int, io_bytes: int) -> dict[str, Any]:
    d = {"io_bytes": io_bytes, "total_ios": io_bytes // 4096}
    return {"timestamp_ms": ts, "jobs": [{"read": d, "write": {"io_bytes": 0, "total_ios": 0}}]}


def test_samples_carry_on_over_the_ramp_time_reset() -> None:
    reports = [_report(1000, 4096 * 10), _report(2000, 4096 * 20), _report(3000, 4096 * 5), _report(4000, 4096 * 15)]
    s = fio_samples(reports, 0.0)
    assert [x.bytes // 4096 for x in s] == [10, 20, 25, 35]
    assert [x.t for x in s] == [1.0, 2.0, 3.0, 4.0]


def test_no_report_is_a_fio_error() -> None:
    with pytest.raises(StepError, match="no fio report"):
        fio_path_result(TARGETS[0], "x", "fio: failed to connect\n", 1, 0.0)
    with pytest.raises(StepError, match="no job"):
        fio_path_result(TARGETS[0], "other", fixture("fio-failure-ini0.a.json"), 0, 0.0)


def test_run_summary_is_plain_data_with_mtu_and_failures() -> None:
    paths = failure_results()
    w = methodology_workloads(runtime=5)[0]
    run = FioRun(w.name, render_nbd_job(w, TARGETS), paths, path_failures(paths))
    summary = json.loads(json.dumps(run.summary()))
    assert summary["paths"]["ini0.a"]["mtu"] == 1500
    assert summary["failures"][0]["path"] == "ini0.b"
    assert summary["window_s"] == pytest.approx(5.0, abs=0.1)
    # the failed path counts only the bytes it moved: well under two full paths
    assert 0.3 < summary["total_gbps"] < 0.45
