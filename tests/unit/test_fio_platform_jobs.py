"""A fio step's job rendered and checked per platform, on Linux: the Linux job is byte for byte the one the
controller planned; a Windows agent runs the suite's engine as ``windowsaio`` on ``\\\\.\\PhysicalDriveN``
(checked, and matched against its declared DUTs ``//./PhysicalDriveN``); every other backslash form, an
engine the platform has no counterpart of and a drive that is no declared DUT are refused; a result's
provenance names the job that ran."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

import pytest
from sqlalchemy.orm import Session, sessionmaker

from agents.kinds import Host, Targets
from agents.kinds.fio import KIND, checked_job, written_duts
from agents.platform import Platform, current
from agents.platform.linux import LinuxPlatform
from agents.platform.windows import WindowsPlatform
from labcontract.errors import StepError
from labcontract.facts import DeclaredDut
from labcontract.fiojob import check_job, render_job
from labcontract.protocol import StartStep
from labcontract.suite import IoEngine, Workload
from orchestrator.kinds.common import job_provenance
from orchestrator.store.models import Artifact, Attempt, Run, Step

DRIVE_SIZE = 3840755982336


def no_commands(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"rendering a job runs no host command ({list(argv)[:3]})")


WINDOWS = WindowsPlatform(run=no_commands)
LINUX = LinuxPlatform(run=no_commands)


def drive(n: int) -> DeclaredDut:
    """A Windows DUT as WindowsPlatform.declare_dut declares it (tests/unit/test_platform_windows.py)."""
    return DeclaredDut(name=f"nvme{n}", path=f"//./PhysicalDrive{n}", kind="block", size_bytes=DRIVE_SIZE,
                       model="SAMSUNG MZQL23T8HCLS-00A07", serial=f"S64HNE0T81234{n}", firmware="GDC5602Q")


def block(path: str) -> DeclaredDut:
    return DeclaredDut(name="dut0", path=path, kind="block", size_bytes=1 << 30)


def workload(**kw: Any) -> Workload:
    return Workload.model_validate({"name": "w.4k", "rw": "randwrite", "bs": 4096, "iodepth": 32, "numjobs": 4,
                                    "runtime": 60, "footprint": "20%", **kw})


def start(w: Workload, duts: Sequence[DeclaredDut]) -> StartStep:
    return StartStep(run_id="r1", step_id="r1-s000", attempt_id="r1-s000-a1", host="h1",
                     devices=tuple(d.path for d in duts), job_name=w.name, workload=w, timeout_s=600,
                     dispatched_at=1.0)


def with_filename(text: str, filename: str) -> str:
    out, n = re.subn(r"^filename=.*$", lambda _: f"filename={filename}", text, count=1, flags=re.M)
    assert n == 1
    return out


# --------------------------------------------------------------------------- Linux: the planned job, unchanged


@pytest.mark.parametrize("paths", [
    ["/dev/loop9"],
    ["/dev/disk/by-path/pci-0000:06:00.0-nvme-1"],
    ["/dev/nvme0n1", "/dev/nvme1n1"],
])
@pytest.mark.parametrize("engine", ["libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio"])
def test_a_linux_job_is_byte_for_byte_the_planned_one(paths: list[str], engine: str) -> None:
    w = workload(ioengine=engine)
    planned = render_job(w, paths)                                    # what the controller plans
    assert render_job(w, paths, spell=LINUX.fio_filename) == planned
    duts = [block(p).model_copy(update={"name": f"dut{i}"}) for i, p in enumerate(paths)]
    job = checked_job(start(w, duts), duts, LINUX)
    assert job.text.encode() == planned.encode()
    assert [f for s in job.sections for f in s.filenames] == paths and job.written == tuple(duts)


def test_a_host_runs_on_the_current_platform_and_launches_the_planned_job(tmp_path: Path) -> None:
    w, duts = workload(), [block("/dev/loop9")]
    host = Host(name="h1", state_dir=tmp_path)
    assert host.platform is current() and host.platform.name == "linux"
    launch = KIND.launch(start(w, duts), Targets(duts=tuple(duts)), host)
    assert launch.files["job.fio"] == launch.job == render_job(w, ["/dev/loop9"])


def test_both_platforms_have_the_engine_method() -> None:
    for p in (LINUX, WINDOWS):
        assert isinstance(p, Platform) and callable(p.fio_engine)


# --------------------------------------------------------------------------- Windows


def test_a_windows_job_runs_windowsaio_on_the_physical_drive(tmp_path: Path) -> None:
    w, duts = workload(ioengine="libaio"), [drive(2)]
    text = render_job(w.model_copy(update={"ioengine": "windowsaio"}), ["//./PhysicalDrive2"],
                      spell=WINDOWS.fio_filename)
    assert "ioengine=windowsaio\n" in text and "filename=\\\\.\\PhysicalDrive2\n" in text
    [section] = check_job(text)
    assert section.filenames == ("//./PhysicalDrive2",) and section.writes
    job = checked_job(start(w, duts), duts, WINDOWS)
    assert job.text == text and job.written == (drive(2),)
    planned = render_job(w, ["//./PhysicalDrive2"])                   # the controller's plan, unchanged
    assert "ioengine=libaio\n" in planned and "filename=//./PhysicalDrive2\n" in planned
    assert job.text.replace("windowsaio", "libaio").replace("\\\\.\\", "//./") == planned
    host = Host(name="h1", state_dir=tmp_path, platform=WINDOWS)
    assert KIND.interlock(start(w, duts), Targets(duts=tuple(duts)), host).duts == (drive(2),)
    assert KIND.launch(start(w, duts), Targets(duts=tuple(duts)), host).files["job.fio"] == text


def test_a_device_group_of_two_windows_drives() -> None:
    w, duts = workload(ioengine="io_uring"), [drive(1), drive(2)]
    job = checked_job(start(w, duts), duts, WINDOWS)
    assert job.text.count("filename=") == 2 and "ioengine=windowsaio\n" in job.text
    assert "filename=\\\\.\\PhysicalDrive1\n" in job.text and "filename=\\\\.\\PhysicalDrive2\n" in job.text
    assert [s.filenames for s in job.sections] == [("//./PhysicalDrive1",), ("//./PhysicalDrive2",)]
    assert job.written == (drive(1), drive(2))
    reads = checked_job(start(workload(rw="randread"), duts), duts, WINDOWS)
    assert reads.written == () and all(not s.writes for s in reads.sections)


@pytest.mark.parametrize(("declared", "runs"), [
    ("libaio", "windowsaio"), ("io_uring", "windowsaio"), ("posixaio", "windowsaio"),
    ("windowsaio", "windowsaio"), ("sync", "sync"), ("psync", "psync"),
])
def test_the_engine_a_windows_host_runs_for_the_declared_one(declared: str, runs: str) -> None:
    assert WINDOWS.fio_engine(declared) == runs
    assert runs in WINDOWS.ioengines


def test_every_suite_engine_has_a_rule_on_each_platform() -> None:
    for engine in get_args(IoEngine):
        for p in (LINUX, WINDOWS):
            try:
                assert p.fio_engine(engine) in p.ioengines
            except StepError as e:
                assert (p.name, engine) in {("linux", "windowsaio"), ("windows", "pvsync2")}, e


def test_pvsync2_on_windows_is_refused_with_the_reason() -> None:
    with pytest.raises(StepError, match=r"pvsync2 .* no Windows counterpart.*this agent runs on Windows"):
        checked_job(start(workload(ioengine="pvsync2"), [drive(2)]), [drive(2)], WINDOWS)
    with pytest.raises(StepError, match="not an engine fio has on Windows"):
        WINDOWS.fio_engine("nbd")


def test_windowsaio_on_linux_is_refused_with_the_reason() -> None:
    duts = [block("/dev/loop9")]
    with pytest.raises(StepError, match="windowsaio is Windows' engine; this agent runs on Linux"):
        checked_job(start(workload(ioengine="windowsaio"), duts), duts, LINUX)
    with pytest.raises(StepError, match="not an engine of Linux fio"):
        LINUX.fio_engine("nbd")


def test_the_suite_and_the_checker_take_windowsaio() -> None:
    assert "windowsaio" in get_args(IoEngine)
    text = render_job(workload(ioengine="windowsaio"), "/dev/loop9")
    assert check_job(text)[0].filenames == ("/dev/loop9",)


# --------------------------------------------------------------------------- refused forms


@pytest.mark.parametrize("filename", [
    "\\\\?\\C:\\x", "\\\\?\\C\\:\\x",                                 # the Win32 file namespace
    "\\\\.\\PhysicalDrive1\\..\\x", "\\\\.\\PhysicalDrive1\\",       # a path under the drive
    "\\\\server\\share", "\\\\server\\share\\f",                      # UNC
    "C:\\x", "C\\:\\x", "\\x", "/dev/loop9\\x",                        # drive letters, a stray backslash
    "\\\\.\\PhysicalDrive", "\\\\.\\PhysicalDrive12345", "\\\\.\\PhysicalDrive01",   # no, five, zero-led digits
    "\\\\.\\physicaldrive1", "\\\\.\\PHYSICALDRIVE1", "\\\\.\\PhysicalDrive1 ", " \\\\.\\PhysicalDrive1",
    "\\\\.\\PhysicalDrive\u0661", "\\\\.\\PhysicalDrive1\\:x", "\\\\.\\CdRom0", "\\\\.\\C:", "\\\\.\\C\\:",
    "\\\\.\\GLOBALROOT\\Device\\Harddisk1\\Partition0", "//?/C:/x", "\\\\\\.\\PhysicalDrive1",
    "\\\\.\\\\PhysicalDrive1", "\\\\.\\PhysicalDrive1\\\\", "\\\\.\\PhysicalDrive${N}",
])
def test_every_other_backslash_form_is_refused(filename: str) -> None:
    text = with_filename(render_job(workload(), "/dev/loop9"), filename)
    with pytest.raises(StepError, match="job file refused: line 2"):
        check_job(text)


def test_the_contract_path_is_validated_before_it_is_spelled() -> None:
    for bad in ("\\\\.\\PhysicalDrive2", "PhysicalDrive2", "//./PhysicalDrive2\nrw=write"):
        with pytest.raises(StepError, match="not a plain absolute path"):
            render_job(workload(), bad, spell=WINDOWS.fio_filename)


@pytest.mark.parametrize(("spelled", "why"), [
    ("\\\\server\\share", "not a plain absolute path"),
    ("\\\\.\\PhysicalDrive3", "reads back as '//./PhysicalDrive3', not as the DUT '//./PhysicalDrive2'"),
    ("/dev/loop9\nexec_prerun=x", "not a plain absolute path"),
    ("${LAB_DUT}", "reads back as"),
])
def test_a_spelling_the_checker_would_refuse_is_refused_at_render(spelled: str, why: str) -> None:
    with pytest.raises(StepError, match=re.escape(why)):
        render_job(workload(), "//./PhysicalDrive2", spell=lambda _: spelled)


def test_a_spelling_with_a_final_newline_does_not_read_back() -> None:
    # refused as a path before it is rendered: the path check ends in \Z (a final newline passed a '$')
    with pytest.raises(StepError, match="not a plain absolute path"):
        render_job(workload(), "/dev/loop9", spell=lambda p: p + "\n")


def test_a_leading_zero_drive_does_not_read_back_as_its_dut() -> None:
    with pytest.raises(StepError, match=re.escape("reads back as '//./PhysicalDrive2'")):
        render_job(workload(), "//./PhysicalDrive02", spell=WINDOWS.fio_filename)


def test_a_job_naming_a_drive_that_is_not_a_declared_dut_is_refused() -> None:
    text = render_job(workload(ioengine="windowsaio"), "//./PhysicalDrive3", spell=WINDOWS.fio_filename)
    sections = check_job(text)
    assert sections[0].filenames == ("//./PhysicalDrive3",)
    with pytest.raises(StepError, match=re.escape("opens //./PhysicalDrive3, not a declared DUT this step names "
                                                 "(//./PhysicalDrive2)")):
        written_duts(sections, [drive(2)])
    assert written_duts(sections, [drive(2), drive(3)]) == (drive(3),)
    group = render_job(workload(), ["//./PhysicalDrive2", "//./PhysicalDrive3"], spell=WINDOWS.fio_filename)
    with pytest.raises(StepError, match=re.escape("opens //./PhysicalDrive3")):
        written_duts(check_job(group), [drive(2)])


# --------------------------------------------------------------------------- provenance: the job that ran


def test_provenance_names_the_job_the_attempt_ran(env: tuple[Any, Any, Any, sessionmaker[Session]]) -> None:
    db = env[3]
    planned = render_job(workload(), ["//./PhysicalDrive2"])
    ran = checked_job(start(workload(), [drive(2)]), [drive(2)], WINDOWS).text
    sha = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in (("planned", planned), ("ran", ran))}
    with db.begin() as s:
        run = Run(id="r1", suite_name="s", suite_source="s.yaml", suite_text="", suite_sha256="ab" * 32, host="h1",
                  device="//./PhysicalDrive2", devices=["//./PhysicalDrive2"], state="RUNNING", submitted_at=1.0)
        for i in range(3):
            step = Step(id=f"r1-s{i:03d}", seq=i, round=0, kind="measure", name=f"m{i}", cell={}, workload=None,
                        job_text=planned, state="RUNNING")
            step.attempts.append(Attempt(id=f"{step.id}-a1", number=1, host="h1", device="//./PhysicalDrive2",
                                         state="RUNNING", timeout_s=60))
            run.steps.append(step)
        s.add(run)
    with db.begin() as s:
        stored = {"r1-s001-a1": sha["planned"], "r1-s002-a1": sha["ran"]}
        for att_id, digest in stored.items():      # pending, as the end event adds them before the result
            s.add(Artifact(attempt_id=att_id, name="job.fio", sha256=digest, size=1, path=f"x/{digest}"))
        provs = [job_provenance(s, att, att.step) for att in (s.get(Attempt, f"r1-s{i:03d}-a1") for i in range(3))
                 if att is not None]
    assert provs == [{"job_sha256": sha["planned"]},                  # no job.fio stored: the plan
                     {"job_sha256": sha["planned"]},                  # Linux: the job that ran is the plan
                     {"job_sha256": sha["ran"], "planned_job_sha256": sha["planned"]}]
