"""The spine end to end: real redis-server, controller and agent processes, fio on a loop DUT."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from labcontract.fioresult import parse_fio_output
from labcontract.fioseries import split_status_stream
from orchestrator.store.models import Run
from tests.conftest import QUICK_SUITE, LabHandle

pytestmark = pytest.mark.integration


def test_suite_runs_and_results_are_stored_with_artifacts(lab: LabHandle) -> None:
    run_id = lab.submit(QUICK_SUITE)
    d = lab.wait_run(run_id)
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert [st.state for st in d.steps] == ["SUCCEEDED", "SUCCEEDED"]
    for step in d.steps:
        (att,) = step.attempts                      # exactly one attempt each
        res = d.results[step.id]
        assert res.attempt_id == att.id
        assert res.runtime_ms >= 900
        m = res.metrics
        for key in ("p50", "p90", "p95", "p99", "p99.9", "p99.99"):
            assert key in m["combined"]["percentiles_ns"]
        assert res.lat_mean_ns and res.lat_max_ns and res.lat_stddev_ns and res.lat_p99_ns
        assert res.lat_max_ns >= res.lat_p99_ns >= res.lat_mean_ns * 0.1
        # artifacts: stored, content matches the recorded sha256, and re-parses to the same result
        arts = {a.name: a for a in att.artifacts}
        assert {"fio.json", "job.fio", "fio.stderr"} <= set(arts)
        for a in arts.values():
            data = (lab.lab.root / "artifacts" / a.path).read_bytes()
            assert hashlib.sha256(data).hexdigest() == a.sha256 and len(data) == a.size
        raw = (lab.lab.root / "artifacts" / arts["fio.json"].path).read_bytes()
        assert parse_fio_output(raw).combined.iops == pytest.approx(res.iops)
        # fio runs with --status-interval=1: fio.json is a stream of cumulative reports, the last the final one
        assert json.loads(split_status_stream(raw)[-1])["jobs"][0]["job options"]["bs"] == \
            step.job_text.split("bs=")[1].split()[0]
        # the job fio ran is byte for byte the one the controller planned
        ran = (lab.lab.root / "artifacts" / arts["job.fio"].path).read_text()
        assert ran == step.job_text
        assert arts["job.fio"].sha256 == res.provenance["job_sha256"]
        assert f"filename={lab.duts['dut0'].path}" in ran
        # overhead timestamps are all recorded, in order
        assert att.dispatched_at <= att.fio_started_at <= att.fio_ended_at <= att.ended_at  # type: ignore[operator]
    mixed = d.results[d.steps[1].id]
    assert mixed.read_iops > 0 and mixed.write_iops > 0
    assert mixed.iops == pytest.approx(mixed.read_iops + mixed.write_iops)
    prov = mixed.provenance
    assert prov["host"]["hostname"] == lab.host and prov["host"]["fio_version"].startswith("fio-")
    assert prov["host"]["cpu_cores"] >= 1 and prov["host"]["memory_bytes"] > 0 and prov["host"]["kernel"]
    assert prov["device"]["path"] == lab.duts["dut0"].path and prov["device"]["size_bytes"] == 128 << 20


def test_cli_reads_runs_hosts_and_results(lab: LabHandle) -> None:
    run_id = lab.submit(QUICK_SUITE, runtime=1)
    lab.wait_run(run_id)
    runs = lab.labctl("runs", check=True).stdout
    assert run_id in runs and "SUCCEEDED" in runs
    show = lab.labctl("run", "show", run_id[:12], check=True).stdout
    assert "4k-randread" in show and "8k-randrw" in show and "avg lat us" in show
    assert "fio-3" in show and lab.duts["dut0"].path in show
    hosts = lab.labctl("hosts", check=True).stdout
    assert lab.host in hosts and "up" in hosts and f"dut0={lab.duts['dut0'].path}" in hosts
    report = Path(lab.labctl("run", "report", run_id, check=True).stdout.strip())
    text = report.read_text()
    assert run_id in text and "fio.json" in text and "| 4k-randread | SUCCEEDED |" in text


def test_cli_submit_prints_run_id_and_waits(lab: LabHandle, tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(QUICK_SUITE)
    res = lab.labctl("submit", str(f), "--host", lab.host, "--device", "dut0", "--runtime", "1", "--wait")
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.splitlines()[0].strip()
    assert lab.detail(run_id).run.state == "SUCCEEDED"


def test_bad_submissions_are_refused_with_every_problem_and_nothing_dispatched(
        lab: LabHandle, tmp_path: Path) -> None:
    with lab.sessions() as s:
        before = s.scalar(select(func.count()).select_from(Run))
    bad = tmp_path / "bad.yaml"
    bad.write_text("suite: bad\nprofiles:\n  - {name: a, rw: randrw, bs: 4q, rwmixread: 150, iodepth: 0,"
                   " colour: blue}\n")
    res = lab.labctl("submit", str(bad), "--host", "nohost", "--device", "dut9")
    assert res.returncode == 1
    err = res.stderr
    assert err.startswith(f"error: {bad}: 5 problems in submission")
    for fragment in ("profiles[0].bs: not a size: '4q'", "profiles[0].rwmixread: 150 is out of range",
                     "profiles[0].iodepth: 0 is out of range", "profiles[0].colour: unknown key",
                     "--host: unknown host 'nohost'"):
        assert f"{bad}: {fragment}" in err, err
    good = tmp_path / "good.yaml"
    good.write_text(QUICK_SUITE)
    res = lab.labctl("submit", str(good), "--host", lab.host, "--device", "/dev/sdz")
    assert res.returncode == 1 and "--device: '/dev/sdz' is not a declared DUT of host" in res.stderr
    res = lab.labctl("suite", "validate", str(bad), str(good))
    assert res.returncode == 1 and "good.yaml: ok: suite quick, 2 cells" in res.stdout
    assert "bad.yaml: 4 problems in suite" in res.stderr
    with lab.sessions() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == before
    assert lab.redis().llen(f"agent.{lab.host}") == 0


def test_suite_render_prints_the_job_files(lab: LabHandle, tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(QUICK_SUITE)
    res = lab.labctl("suite", "render", str(f), "--device", "/dev/nvme0n1", check=True)
    assert res.stdout.count("[global]") == 2
    assert "filename=/dev/nvme0n1" in res.stdout and "rwmixread=70" in res.stdout
    assert "filename=${LAB_DUT}" in lab.labctl("suite", "render", str(f), check=True).stdout
