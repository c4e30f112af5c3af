"""A long fio step's --status-interval (orchestrator.kinds.fio.status_interval): per second while its stream fits an
artifact's bound, coarser beyond, so a 6-hour step (SNIA's write saturation test) is not failed for an fio.json the
agent may not send; the per-report size it assumes is checked against the installed fio's own json+ reports."""

from __future__ import annotations

import subprocess
from pathlib import Path

from labcontract.fiojob import render_job
from labcontract.fioseries import parse_status_stream
from labcontract.protocol import ARTIFACT_MAX_BYTES, MAX_STATUS_INTERVAL_S
from labcontract.suite import load_suite
from orchestrator.kinds.fio import REPORT_BYTES_PER_DEVICE, STREAM_BUDGET_BYTES, status_interval


def test_per_second_until_the_stream_would_outgrow_its_bound() -> None:
    assert status_interval(60, 1) == 1 and status_interval(1024, 1) == 1       # every step the suites had
    six_hours = status_interval(6 * 3600, 1)
    assert six_hours == 22
    assert (6 * 3600 / six_hours) * REPORT_BYTES_PER_DEVICE <= STREAM_BUDGET_BYTES < ARTIFACT_MAX_BYTES
    assert status_interval(6 * 3600, 8) > six_hours                            # a device group's entries add up
    assert status_interval(7 * 86400, 256) == MAX_STATUS_INTERVAL_S and status_interval(0, 0) == 1


def test_the_assumed_report_size_holds_for_the_installed_fio(tmp_path: Path) -> None:
    """The write saturation workload itself (4K random write 4T32Q), 4 s with a report each second."""
    target = tmp_path / "dut.img"
    target.write_bytes(b"")
    subprocess.run(["truncate", "-s", "128M", str(target)], check=True)
    w = load_suite("snia-wsat").cells[0].workload.model_copy(update={"runtime": 4, "direct": False})
    job = tmp_path / "job.fio"
    job.write_text(render_job(w, [str(target)]))
    out = subprocess.run(["fio", "--output-format=json+", "--status-interval=1", str(job)], capture_output=True,
                         timeout=120, check=True).stdout
    samples, _metrics = parse_status_stream(out)
    assert len(samples) >= 3
    per_report = len(out) / len(samples)
    assert per_report < REPORT_BYTES_PER_DEVICE / 1.5, per_report       # room for latencies over more bins
