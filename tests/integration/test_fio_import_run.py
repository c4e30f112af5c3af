"""An engineer's job file imported (``labctl suite import``) and run for real on the embedded lab's loop DUT: the job
fio ran is the one planned, and fio's own account of its options (json+ "job options") is the original job file's,
option by option (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labcontract.fiojobfile import fio_size
from labcontract.fioseries import split_status_stream
from orchestrator.queries import RunDetail
from tests.conftest import LabHandle

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MIX = ROOT / "examples" / "jobfiles" / "lab-mix.fio"


def imported_run(lab: LabHandle, jobfile: Path, out: Path) -> RunDetail:
    res = lab.labctl("suite", "import", str(jobfile), "--dut", "dut0", "--output", str(out))
    assert res.returncode == 0, res.stderr
    sub = lab.labctl("submit", str(out), "--host", lab.host, "--device", "dut0")
    assert sub.returncode == 0, sub.stderr
    return lab.wait_run(sub.stdout.split()[-1], timeout=120)


def fio_job_options(lab: LabHandle, detail: RunDetail, step_name: str) -> tuple[dict[str, str], str]:
    """fio's "job options" of the step's final report, and the job file fio ran."""
    step = next(st for st in detail.steps if st.name == step_name)
    arts = {a.name: a for a in step.attempts[-1].artifacts}
    raw = (lab.lab.root / "artifacts" / arts["fio.json"].path).read_bytes()
    ran = (lab.lab.root / "artifacts" / arts["job.fio"].path).read_text()
    assert ran == step.job_text                                  # the job fio ran is the planned one
    report = json.loads(split_status_stream(raw)[-1])
    (job,) = [j for j in report["jobs"] if j["jobname"] == step_name]
    return {**report["global options"], **job["job options"]}, ran


def test_an_imported_job_file_runs_as_written(lab: LabHandle, tmp_path: Path) -> None:
    d = imported_run(lab, MIX, tmp_path / "lab-mix.yaml")
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert [st.name for st in d.steps] == ["8k-7030", "seq-read"]          # the file's order (stonewall)
    mix, ran = fio_job_options(lab, d, "8k-7030")
    # lab-mix.fio: ioengine=libaio direct=1 size=16m time_based runtime=2; rw=randrw rwmixwrite=30 bs=8K
    # iodepth=8 numjobs=2 -- as fio itself reports the options it ran with
    assert (mix["ioengine"], mix["direct"], mix["time_based"], mix["runtime"]) == ("libaio", "1", "1", "2")
    assert fio_size(mix["size"]) == 16 << 20 and fio_size(mix["bs"]) == 8192
    assert (mix["rw"], mix["rwmixread"], mix["iodepth"], mix["numjobs"]) == ("randrw", "70", "8", "2")
    assert f"filename={lab.duts['dut0'].path}" in ran
    res = d.results[d.steps[0].id]
    assert res.read_iops and res.write_iops
    assert 0.55 < res.read_iops / (res.read_iops + res.write_iops) < 0.85        # a 70/30 mix, as fio ran it
    seq, _ = fio_job_options(lab, d, "seq-read")
    assert (seq["rw"], fio_size(seq["bs"]), seq["iodepth"]) == ("read", 128 << 10, "4")
    assert d.results[d.steps[1].id].iops and not d.results[d.steps[1].id].write_iops


def test_an_imported_job_file_with_the_extended_options_runs_as_written(lab: LabHandle, tmp_path: Path) -> None:
    """lab-skew.fio: bssplit, zipf, rate_iops, compressible and dedupable buffers, offset_increment, cpus_allowed;
    then verified, rate-capped writes at an offset; then io_uring with fixedbufs. fio reports each option as the
    job file wrote it, and the rate caps held."""
    d = imported_run(lab, ROOT / "examples" / "jobfiles" / "lab-skew.fio", tmp_path / "lab-skew.yaml")
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert [st.name for st in d.steps] == ["oltp-skew", "verify-write", "uring-fixed"]
    skew, _ = fio_job_options(lab, d, "oltp-skew")
    assert {k: skew[k] for k in ("bssplit", "random_distribution", "rate_iops", "buffer_compress_percentage",
                                 "dedupe_percentage", "cpus_allowed", "rwmixread", "numjobs", "refill_buffers")} == {
        "bssplit": "4k/70:16k/20:64k/10", "random_distribution": "zipf:1.2", "rate_iops": "2000",
        "buffer_compress_percentage": "50", "dedupe_percentage": "10", "cpus_allowed": "0", "rwmixread": "70",
        "numjobs": "2", "refill_buffers": "1"}
    assert fio_size(skew["offset_increment"]) == 8 << 20 and fio_size(skew["size"]) == 8 << 20
    res = d.results[d.steps[0].id]
    assert res.iops and res.iops <= 2 * 2 * 2000 * 1.1        # 2 jobs, reads and writes each capped at 2000 IOPS
    verify, _ = fio_job_options(lab, d, "verify-write")
    assert (verify["verify"], verify["offset"], fio_size(verify["rate"])) == ("crc32c", "50%", 32 << 20)
    vres = d.results[d.steps[1].id]
    assert vres.write_bw_bytes and vres.write_bw_bytes <= (32 << 20) * 1.3     # fio evens the rate out over time
    assert vres.read_iops                      # fio read the blocks back to verify them (and found them good)
    uring, _ = fio_job_options(lab, d, "uring-fixed")
    assert (uring["ioengine"], uring["fixedbufs"], uring["iodepth"]) == ("io_uring", "1", "16")
    assert d.results[d.steps[2].id].iops
