"""The fio options a suite takes beyond the basic workload (issue 28): each a suite key, validated with a clear
reason, rendered in its canonical spelling, read by the installed fio, and checked again by the agent on the rendered
job (a tampered value is refused there too); precondition rounds leave out rate caps and verification; network suites
refuse them."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agents.kinds.fio import checked_job
from agents.platform.windows import WindowsPlatform
from labcontract.errors import FioError, SuiteError
from labcontract.facts import DeclaredDut
from labcontract.fiojob import check_job, render_job
from labcontract.protocol import StartStep
from labcontract.suite import Workload, parse_suite, starts_precondition_group
from orchestrator.runs.planner import plan


def suite(**options: Any) -> str:
    body = ", ".join(f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {str(v).lower()}" for k, v in options.items())
    return f"suite: x\nprofiles:\n  - {{name: p, bs: 4k, {body}}}\n"


def workload(**options: Any) -> Workload:
    return parse_suite(suite(**{"rw": "randrw", **options}), "x.yaml").workloads[0]


@pytest.mark.parametrize(("options", "line"), [
    ({"bssplit": "4K/70:16k/20:64k/10"}, "bssplit=4k/70:16k/20:64k/10"),
    ({"bssplit": {"4k": 50, "1m": 50}}, "bssplit=4k/50:1m/50"),
    ({"random_distribution": "zipf:1.20"}, "random_distribution=zipf:1.2"),
    ({"random_distribution": "pareto:0.9"}, "random_distribution=pareto:0.9"),
    ({"random_distribution": "gauss:5"}, "random_distribution=normal:5"),
    ({"random_distribution": "zipf:0.000001"}, "random_distribution=zipf:0.000001"),
    ({"rate_iops": 5000}, "rate_iops=5000"),
    ({"rate": "100M"}, "rate=100m"),
    ({"buffer_compress_percentage": 50}, "buffer_compress_percentage=50"),
    ({"dedupe_percentage": 10}, "dedupe_percentage=10"),
    ({"offset": "10%"}, "offset=10%"),
    ({"offset": "1g"}, "offset=1g"),
    ({"offset_increment": "8m"}, "offset_increment=8m"),
    ({"cpus_allowed": "0-3, 8"}, "cpus_allowed=0-3,8"),
    ({"ioengine": "io_uring", "hipri": True}, "hipri=1"),
    ({"ioengine": "pvsync2", "hipri": True}, "hipri=1"),
    ({"ioengine": "io_uring", "fixedbufs": True}, "fixedbufs=1"),
    ({"verify": "CRC32C"}, "verify=crc32c"),
    ({"verify": "pattern", "verify_pattern": "0xAA555AA5"}, "verify_pattern=0xaa555aa5"),
])
def test_an_extended_option_renders_canonically_and_the_agent_accepts_it(options: dict[str, Any], line: str) -> None:
    w = workload(**options)
    job = render_job(w, "/dev/loop3")
    assert line in job.splitlines()
    (section,) = check_job(job)                      # the agent's checker, on the rendered text
    assert section.filenames == ("/dev/loop3",)


@pytest.mark.parametrize(("options", "reason"), [
    ({"bssplit": "4k/60:64k/30"}, "bssplit: the percentages sum to 90, not 100"),
    ({"bssplit": "4k/50:4k/50"}, "4k is listed twice"),
    ({"bssplit": "4k/50,8k/50"}, "one split for reads and writes alike"),
    ({"bssplit": "1000/100"}, "block size '1000' must be 512 bytes to 64 MiB, a multiple of 512"),
    ({"bssplit": ":".join(f"{k}k/1" for k in range(1, 66))}, "1 to 64 block sizes"),
    ({"random_distribution": "zipf:1"}, "zipf theta must be above 0, at most 100 and not 1.0"),
    ({"random_distribution": "pareto:1"}, "pareto h must be above 0 and below 1"),
    ({"random_distribution": "normal:100"}, "normal sigma must be at least 0 and below 100"),
    ({"random_distribution": "zoned:50/5:50/95"}, "fio's zoned forms are not taken"),
    ({"random_distribution": "zipf:1e3"}, "is not a number (at most 6 decimals)"),
    ({"rate_iops": 0}, "rate_iops: 0 is out of range (must be >= 1)"),
    ({"rate": "1m,2m"}, "one rate for reads and writes alike"),
    ({"rate": "$(reboot)"}, "not a size"),
    ({"buffer_compress_percentage": 101}, "buffer_compress_percentage: 101 is out of range (must be <= 100)"),
    ({"offset": "100%"}, "must be at least 0% and below 100%"),
    ({"offset": "2p"}, "over the ceiling of 1p"),
    ({"cpus_allowed": "0-99999"}, "is not a CPU number or range"),
    ({"cpus_allowed": "5-2"}, "must be CPUs 0-4095, ranges ascending"),
    ({"cpus_allowed": ",".join(map(str, range(70)))}, "at most 64 numbers or ranges"),
    ({"cpus_allowed": "0;exec_prerun=x"}, "is not a CPU number or range"),
    ({"hipri": True}, "hipri is an option of ioengine io_uring / pvsync2 (fio refuses it with libaio)"),
    ({"fixedbufs": True, "ioengine": "pvsync2"}, "fixedbufs is an option of ioengine io_uring"),
    ({"verify": "sha999"}, "verify 'sha999' is not one of fio's methods"),
    ({"verify": "pattern"}, "verify: pattern needs verify_pattern"),
    ({"verify_pattern": "0xff"}, "verify_pattern needs verify"),
    ({"verify": "meta", "verify_pattern": "'\\x01\\n[x]'"}, "is not 0x followed by hex bytes"),
    ({"verify": "md5", "norandommap": True}, "verify with norandommap: fio cannot verify blocks written twice"),
    ({"offset": "60%", "footprint": "50%"}, "offset 60% + footprint 50% run past the device's end"),
    ({"bssplit": "64m/50:4k/50", "numjobs": 64, "iodepth": 8}, "numjobs x iodepth x bs = 64 x 8 x 64m"),
])
def test_a_hostile_or_wrong_value_is_refused_with_its_reason(options: dict[str, Any], reason: str) -> None:
    with pytest.raises(SuiteError) as e:
        workload(**options)
    assert reason in str(e.value)


@pytest.mark.parametrize(("line", "tampered", "reason"), [
    ("bssplit=4k/50:8k/50", "bssplit=4k/50:8k/60", "the percentages sum to 110"),
    ("random_distribution=zipf:1.2", "random_distribution=zipf:1", "zipf theta must be above 0"),
    ("cpus_allowed=0", "cpus_allowed=0-99999", "not a CPU number or range"),
    ("cpus_allowed=0", "cpus_allowed=0\nexec_prerun=/bin/sh", "option 'exec_prerun' is not allowed"),
    ("rate_iops=10", "rate_iops=0", "each rate must be 1 to 100000000"),
    ("rate_iops=700,300", "rate_iops=700,0", "each rate must be 1 to 100000000"),
    ("rate_iops=700,300", "rate_iops=700,300,5", "is not a valid value"),     # a trim rate: not taken
    ("verify=md5", "verify=sha999", "is not one of fio's methods"),
    ("verify=md5", "verify=md5\nnorandommap=1", "verify with norandommap"),
    ("rate=1m", "rate=$(id)", "is not a valid value"),
])
def test_the_agent_checks_the_rendered_value_again(line: str, tampered: str, reason: str) -> None:
    key, value = line.split("=", 1)
    extra = {"bssplit": {}, "verify": {}, "random_distribution": {}, "cpus_allowed": {}, "rate_iops": {},
             "rate": {}}[key]
    job = render_job(workload(**{key: value, **extra}), "/dev/loop3")
    assert line in job
    with pytest.raises(FioError, match="job file refused") as e:
        check_job(job.replace(line, tampered))
    assert reason in str(e.value)


def test_a_windows_agent_refuses_an_io_uring_option_it_would_run_on_windowsaio() -> None:
    def no_commands(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise AssertionError("no host command")

    w = workload(ioengine="io_uring", fixedbufs=True)
    dut = DeclaredDut(name="nvme0", path="//./PhysicalDrive0", kind="block", size_bytes=1 << 40)
    msg = StartStep(run_id="r1", step_id="r1-s000", attempt_id="r1-s000-a1", host="h1", devices=(dut.path,),
                    job_name=w.name, workload=w, timeout_s=600, dispatched_at=1.0)
    with pytest.raises(FioError, match="fixedbufs is an option of ioengine io_uring \\(fio refuses it with "
                                       "windowsaio\\)"):
        checked_job(msg, [dut], WindowsPlatform(run=no_commands))


def test_precondition_rounds_run_at_full_load_without_verifying() -> None:
    text = ("suite: pc\nphases: {precondition: {round: 10s, max_rounds: 3}}\nprofiles:\n"
            "  - {name: p, rw: randwrite, bs: 4k, bssplit: '4k/50:64k/50', rate_iops: 100, rate: 1m, verify: md5,"
            " random_distribution: 'zipf:1.2'}\n")
    steps = plan(parse_suite(text, "pc.yaml"), ["/dev/loop3"])
    pc = next(st for st in steps if st.kind == "precondition")
    measure = next(st for st in steps if st.kind == "measure")
    for left_out in ("rate_iops=", "rate=", "verify="):
        assert left_out not in pc.job_text and left_out in measure.job_text
    for kept in ("bssplit=4k/50:64k/50", "random_distribution=zipf:1.2"):
        assert kept in pc.job_text and kept in measure.job_text
    check_job(pc.job_text)


def test_a_different_skew_or_split_is_a_different_precondition_group() -> None:
    text = ("suite: g\nphases: {precondition: {round: 10s}}\nprofiles:\n"
            "  - {name: p, rw: randwrite, bs: 4k, sweep: {random_distribution: ['zipf:1.2', 'zipf:2']}}\n")
    cells = parse_suite(text, "g.yaml").cells
    assert [c.workload.name for c in cells] == ["p.random_distribution-zipf-1.2", "p.random_distribution-zipf-2"]
    assert [starts_precondition_group(cells, i) for i in range(len(cells))] == [True, True]


def test_a_network_suite_refuses_the_extended_options() -> None:
    text = ("suite: n\nnetwork: {target: t, initiators: [i], paths: [p0]}\nprofiles:\n"
            "  - {name: p, rw: read, bs: 128k, rate_iops: 100}\n")
    with pytest.raises(SuiteError, match="rate_iops: not available in a network suite"):
        parse_suite(text, "n.yaml")


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_the_installed_fio_reads_every_rendered_extended_option(tmp_path: Path) -> None:
    dut = tmp_path / "dut.img"
    dut.write_bytes(b"")
    jobs = [
        workload(bssplit="4k/70:16k/20:64k/10", random_distribution="zipf:1.2", rate_iops=5000, rate="100m",
                 buffer_compress_percentage=50, dedupe_percentage=10, offset="10%", offset_increment="1m",
                 cpus_allowed="0", refill_buffers=True),
        workload(ioengine="io_uring", hipri=True, fixedbufs=True, verify="pattern", verify_pattern="0xaa555aa5"),
        workload(ioengine="pvsync2", hipri=True, random_distribution="pareto:0.9", verify="sha3-256"),
        workload(random_distribution="normal:5", verify="crc32c-intel"),
    ]
    for i, w in enumerate(jobs):
        job = tmp_path / f"j{i}.fio"
        job.write_text(render_job(w, str(dut)))
        res = subprocess.run(["fio", "--parse-only", str(job)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, (job.read_text(), res.stderr)


def test_an_extended_option_set_to_zero_or_false_still_needs_the_newer_agent() -> None:
    """It is serialised (only an unset option is left out), so an older agent would refuse the start."""
    from labcontract.fioextra import needed_fio_version

    for options in ({"dedupe_percentage": 0}, {"hipri": False}, {}):
        w = workload(**options)
        sent = set(w.model_dump(mode="json"))
        assert needed_fio_version([w.__dict__]) == (2 if set(options) & sent else 1)
        assert set(options) <= sent


def test_a_submission_is_refused_an_option_its_host_cannot_run(env: Any) -> None:
    """At submit: hipri / fixedbufs for a Windows host (it runs io_uring as windowsaio), an absolute offset past the
    smallest named device; both named with the host or device."""
    from labcontract.facts import HostFacts
    from labcontract.protocol import Register, Submit

    ctl, *_ = env
    for host, family, path in (("lin", "linux", "/dev/loop7"), ("win", "windows", "//./PhysicalDrive2")):
        ctl.handle_event(Register(host=host, agent_version="0.1.0", facts=HostFacts(hostname=host, os_family=family),
                                  duts=(DeclaredDut(name="dut0", path=path, kind="block", size_bytes=1 << 30),)))

    def sub(host: str, run_id: str, **options: Any) -> Any:
        return ctl.submit(Submit(run_id=run_id, suite_source="s.yaml", suite_text=suite(rw="randread", **options),
                                 host=host, devices=("dut0",), reply_to="-"))

    r = sub("win", "r1", ioengine="io_uring", fixedbufs=True)
    assert not r.ok and r.errors == ("fixedbufs: an option of ioengine io_uring, which host win (Windows) does not "
                                     "run",), r.errors
    assert sub("lin", "r2", ioengine="io_uring", fixedbufs=True).ok
    r = sub("lin", "r5", bssplit="4k/50:64m/50", footprint="32m")
    assert not r.ok and r.errors == ("profile p.bs: block size 64m is larger than the footprint 32m (33554432 of "
                                     "device dut0 (/dev/loop7)): fio would refuse the job",), r.errors
    r = sub("lin", "r3", offset="2g")
    assert not r.ok and r.errors == ("profile p.offset: offset 2g is not inside device dut0 (/dev/loop7) "
                                     "(1073741824 bytes)",), r.errors
    assert sub("lin", "r4", offset="512m").ok


@pytest.mark.parametrize(("value", "reason"), [
    ("abc", "rate_iops 'abc' is not a number of I/Os per second, nor READ,WRITE (two numbers)"),
    ("true", "rate_iops: not a value (bool)"),
    ('"0,5"', "rate_iops '0,5': each rate must be 1 to 100000000"),
    ('"1,2,3"', "is not a number of I/Os per second, nor READ,WRITE"),
    ("-4", "rate_iops: -4 is out of range (must be >= 1)"),
    ('"' + "9" * 30 + '"', "must be 1 to 24 characters"),
])
def test_a_bad_rate_iops_is_refused_with_one_reason(value: str, reason: str) -> None:
    with pytest.raises(SuiteError) as e:
        parse_suite(f"suite: s\nprofiles:\n  - {{name: p, rw: randrw, bs: 4k, rate_iops: {value}}}\n", "s.yaml")
    found = [str(p) for p in e.value.problems]
    assert len(found) == 1 and reason in found[0], found
