"""``labctl suite import`` (issue 28): fio's own example job files and an engineer's become suites whose jobs, as
the agent renders and checks them, are the same workload option by option (values normalised: 4k == 4096); every
option not taken is listed with its reason; hostile or oversized job files are refused with theirs."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agents.kinds.fio import checked_job
from agents.platform.linux import LinuxPlatform
from labcontract.errors import JobFileError
from labcontract.facts import DeclaredDut
from labcontract.fioimport import Imported, import_jobfiles
from labcontract.fiojobfile import MAX_JOBFILE_BYTES, MAX_JOBS, MAX_LINE_CHARS, fio_bool, fio_seconds, fio_size
from labcontract.protocol import StartStep
from labcontract.suite import Workload, parse_suite
from orchestrator.cmd.labctl import app

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "fio"
FIO_EXAMPLES = ("ssd-test.fio", "fio-rand-read.fio", "fio-rand-RW.fio", "ssd-steadystate.fio", "surface-scan.fio")
JOBFILES = ROOT / "examples" / "jobfiles"
ENGINEER = JOBFILES / "lab-mix.fio"
DUT = DeclaredDut(name="nvme0", path="/dev/nvme0n1", kind="block", size_bytes=1 << 40)
runner = CliRunner()


def no_commands(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    raise AssertionError("rendering a job runs no host command")


LINUX = LinuxPlatform(run=no_commands)


def imported(*paths: Path, **kw: Any) -> Imported:
    return import_jobfiles([(str(p), p.read_text()) for p in paths], **kw)


# --- the same workload, option by option -------------------------------------------------------------

ALIAS = {"readwrite": "rw", "blocksize": "bs", "timeout": "runtime", "size": "footprint"}
FIO_DEFAULT = {"rw": "read", "bs": 4096, "ioengine": "psync", "direct": 0, "time_based": 0, "iodepth": 1,
               "numjobs": 1, "randrepeat": 1}
ORDERING = {"stonewall", "wait_for_previous", "kb_base"}      # the order of the profiles; how sizes were read
WRITTEN_ALWAYS = {"group_reporting", "lat_percentiles", "percentile_list", "filename"}


def normalised(key: str, value: str | None) -> tuple[str, Any]:
    """An option as fio reads it: sizes in bytes, times in seconds, flags 0/1, one name per option."""
    key = ALIAS.get(key, key)
    if key == "rwmixwrite":
        return "rwmixread", 100 - int(value or 0)
    if key == "buffered":
        return "direct", 1 - fio_bool(value)
    if key in ("bs", "rate"):
        return key, fio_size(value or "")
    if key in ("footprint", "offset", "offset_increment"):
        return key, fio_size(value or "", percent=True)
    if key == "bssplit":
        return key, [(fio_size(part.split("/")[0]), int(part.split("/")[1])) for part in (value or "").split(":")]
    if key in ("runtime", "ramp_time"):
        return key, fio_seconds(value or "")
    if key in ("time_based", "direct", "refill_buffers", "norandommap", "randrepeat", "hipri", "fixedbufs"):
        return key, int(fio_bool(value))
    if key in ("iodepth", "numjobs", "rwmixread", "percentage_random", "rate_iops", "buffer_compress_percentage",
               "dedupe_percentage"):
        return key, int(value or 0)
    return key, (value or "").strip().lower()


def job_options(text: str) -> dict[str, dict[str, tuple[int, str | None]]]:
    """Each job of a job file with its options in force (globals, then its own): key -> (line, value)."""
    jobs: dict[str, dict[str, tuple[int, str | None]]] = {}
    glob: dict[str, tuple[int, str | None]] = {}
    current: dict[str, tuple[int, str | None]] | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(";")[0].split("#")[0].strip()
        if not line:
            continue
        if line.startswith("["):
            name = line[1:-1]
            current = glob if name.startswith("global") else jobs.setdefault(name, dict(glob))
            continue
        key, sep, value = line.partition("=")
        assert current is not None
        current[key.strip()] = (n, value.strip() if sep else None)
    return jobs


def rendered_options(job: str) -> dict[str, str]:
    opts: dict[str, str] = {}
    for line in job.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            opts[k] = v
    return opts


@pytest.mark.parametrize("name", [*FIO_EXAMPLES, "lab-mix.fio", "lab-skew.fio"])
def test_an_imported_job_renders_as_the_same_workload_option_by_option(name: str) -> None:
    path = JOBFILES / name if name.startswith("lab-") else FIXTURES / name
    result = imported(path, dut="nvme0")
    suite = parse_suite(result.text, "imported.yaml")
    noted = {(n.line, n.option) for n in result.notes}
    original = job_options(path.read_text())
    assert [c.profile for c in suite.cells] == list(original)       # every job, in file order
    for cell in suite.cells:
        msg = StartStep(run_id="r1", step_id="r1-s000", attempt_id="r1-s000-a1", host="h1", devices=(DUT.path,),
                        job_name=cell.workload.name, workload=cell.workload, timeout_s=600, dispatched_at=1.0)
        job = checked_job(msg, [DUT], LINUX)                        # as the agent renders and checks it
        assert job.sections[0].filenames == (DUT.path,)
        got = {normalised(k, v)[0]: normalised(k, v)[1] for k, v in rendered_options(job.text).items()
               if k not in WRITTEN_ALWAYS}
        want: dict[str, Any] = {}
        for key, (line, value) in original[cell.profile].items():
            if (line, key) in noted or key in ORDERING:
                continue                  # listed with its reason; or ordering, which the plan's order keeps
            k, v = normalised(key, value)
            want[k] = v
        for k, v in want.items():
            assert got.get(k, FIO_DEFAULT.get(k)) == v, (cell.profile, k, got)
        for k, v in got.items():
            if k in want:
                continue
            no_runtime = k == "runtime" and any(n.section == cell.profile and "no runtime" in n.message
                                                for n in result.notes)
            assert FIO_DEFAULT.get(k) == v or no_runtime, (cell.profile, k, v)


def test_fio_examples_list_what_they_leave_with_the_reason() -> None:
    notes = [str(n) for n in imported(FIXTURES / "surface-scan.fio").notes]
    assert any("[global] thread: not taken: fio runs jobs as threads" in n for n in notes)
    assert any("line 13: [write-phase] filename: filename=datafile.tmp: the job runs on the DUT named at submit "
               "(--device)" in n for n in notes)
    assert any("[write-phase] no runtime: the job ends once it has covered its size; the suite bounds it at 7 days"
               in n for n in notes)
    steady = [str(n) for n in imported(FIXTURES / "ssd-steadystate.fio", dut="nvme0").notes]
    assert any("write_bw_log: refused: it writes files or runs commands on the agent's host" in n for n in steady)
    assert any("filename=/dev/fioa: the job runs on the DUT named at submit (--dut nvme0)" in n for n in steady)


def test_jobs_fio_runs_at_once_are_listed_as_run_one_after_another(tmp_path: Path) -> None:
    f = tmp_path / "together.fio"
    f.write_text("[global]\nbs=4k\nruntime=5\n[a]\nrw=read\n[b]\nrw=write\n[c]\nstonewall\nrw=randread\n")
    notes = [str(n) for n in imported(f).notes]
    assert any("[b] fio runs it at the same time as [a] (no stonewall between them)" in n for n in notes)
    assert not any("[c] fio runs it at the same time" in n for n in notes)


def test_globals_apply_to_later_jobs_and_the_later_value_wins(tmp_path: Path) -> None:
    f = tmp_path / "order.fio"
    f.write_text("[global]\nbs=8k\nrw=randrw\nrwmixread=60\nruntime=5\n[a]\nrwmixwrite=10\n"
                 "[global2]\niodepth=32\n[b]\nstonewall\nbs=16k\n")
    suite = parse_suite(imported(f).text, "x")
    a, b = (c.workload for c in suite.cells)
    assert (a.bs, a.rwmixread, a.iodepth) == (8192, 90, 1)
    assert (b.bs, b.rwmixread, b.iodepth) == (16384, 60, 32)


# --- fio's values ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "kb_base", "want"), [
    ("4k", 1024, 4096), ("4K", 1024, 4096), ("4ki", 1024, 4096), ("4kb", 1024, 4096), ("1m", 1024, 1 << 20),
    ("10G", 1024, 10 << 30), ("4KiB", 1024, 4000), ("1MiB", 1024, 1000 ** 2), ("4k", 1000, 4000),
    ("4KiB", 1000, 4096), ("4096", 1024, 4096), ("20%", 1024, "20%"),
])
def test_sizes_are_read_with_fios_units(text: str, kb_base: int, want: int | str) -> None:
    assert fio_size(text, kb_base=kb_base, percent=True) == want


@pytest.mark.parametrize("text", ["1.5g", "4k-16k", "4k,8k", "0x1000", "4q", "4kx", ""])
def test_a_size_fio_would_read_otherwise_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        fio_size(text)


def test_kib_under_fios_default_base_is_refused_with_the_quirk_named(tmp_path: Path) -> None:
    f = tmp_path / "kib.fio"
    f.write_text("[a]\nrw=read\nbs=4KiB\nruntime=5\n")
    with pytest.raises(JobFileError) as e:
        imported(f)
    assert "bs: refused: '4KiB' is 4000 bytes, not a multiple of 512; fio's kb_base=1024 reads KiB, MiB as " \
           "powers of 10" in str(e.value)
    f.write_text("[a]\nkb_base=1000\nrw=read\nbs=4KiB\nruntime=5\n")
    assert parse_suite(imported(f).text, "x").cells[0].workload.bs == 4096


def test_times_and_flags() -> None:
    assert [fio_seconds(t) for t in ("900", "60s", "2m", "1h", "5000ms", "1d")] == [900, 60, 120, 3600, 5, 86400]
    with pytest.raises(ValueError):
        fio_seconds("1500ms")
    assert fio_bool(None) and fio_bool("1") and not fio_bool("0")


# --- hostile and oversized job files -----------------------------------------------------------------

@pytest.mark.parametrize(("line", "reason"), [
    ("filename=$DEV", "a $VAR / ${VAR} expansion takes its value from the environment"),
    ("iodepth=${QD}", "a $VAR / ${VAR} expansion takes its value from the environment"),
    ("numjobs=$ncpus", "a $VAR / ${VAR} expansion"),
    ("size=(1024*1024)", "fio arithmetic ((...)) is not imported"),
    ("exec_prerun=rm -rf /", "refused: it writes files or runs commands on the agent's host"),
    ("write_iolog=/etc/passwd", "refused: it writes files or runs commands on the agent's host"),
    ("iodepth=99999999", "out of range (1-65536)"),
    ("cgroup=x", "refused: it writes files or runs commands"),
    ("frobnicate=1", "refused: not in storagelab's allowlist of fio options"),
])
def test_a_hostile_option_is_refused_with_its_reason_and_the_rest_imported(tmp_path: Path, line: str,
                                                                           reason: str) -> None:
    f = tmp_path / "hostile.fio"
    f.write_text(f"[job]\nrw=randread\nbs=4k\nruntime=5\n{line}\n")
    result = imported(f)
    assert result.profiles == ("job",)
    assert any(n.line == 5 and reason in n.message for n in result.notes), [str(n) for n in result.notes]
    assert "$" not in result.text.split("suite:", 1)[1] and "evil" not in result.text.split("suite:", 1)[1]


def test_include_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "secret.fio").write_text("[x]\nrw=write\n")
    f = tmp_path / "inc.fio"
    f.write_text("include secret.fio\n[job]\nrw=read\nruntime=5\n")
    result = imported(f)
    assert result.profiles == ("job",)
    assert any(n.option == "include" and "an included file is not read" in n.message for n in result.notes)


def test_nothing_importable_fails_saying_exactly_what_was_left(tmp_path: Path) -> None:
    f = tmp_path / "none.fio"
    f.write_text("[global]\nfilename=/dev/sda\n[job]\nrw=trimwrite\nbs=3\n[evil]\nrw=read\n"
                 "ioengine=external:/tmp/evil.so\n")
    with pytest.raises(JobFileError) as e:
        imported(f)
    text = str(e.value)
    assert "no job could be imported" in text
    assert "line 4: [job] rw: refused: 'trimwrite': trims are not measured" in text
    assert "line 5: [job] bs: refused: '3' is 3 bytes, not a multiple of 512" in text
    assert "[job] job not imported: its bs, rw could not be taken" in text
    assert "line 8: [evil] ioengine: refused: 'external:/tmp/evil.so' is not an engine storagelab runs" in text
    assert "[evil] job not imported: its ioengine could not be taken" in text


@pytest.mark.parametrize(("text", "reason"), [
    ("[a]\n" + "x" * (MAX_LINE_CHARS + 1) + "\n", f"over the limit of {MAX_LINE_CHARS}"),
    ("".join(f"[j{i}]\nrw=read\n" for i in range(MAX_JOBS + 1)), f"more than {MAX_JOBS} jobs in one file"),
    ("[a\nrw=read\n", "is not a section header"),
    ("[a]\nrw read\n", "is not an option"),
    ("[a]\n" + ";" * MAX_JOBFILE_BYTES + "\n", f"over the limit of {MAX_JOBFILE_BYTES} bytes"),
])
def test_a_job_file_over_a_bound_or_not_fios_format_is_refused(tmp_path: Path, text: str, reason: str) -> None:
    f = tmp_path / "big.fio"
    f.write_text(text)
    with pytest.raises(JobFileError) as e:
        imported(f)
    assert reason in str(e.value)


# --- the command ---------------------------------------------------------------------------------------

def test_labctl_suite_import_writes_a_suite_that_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)        # docs/suites.md's command, as written from the checkout's root
    out = tmp_path / "lab-mix.yaml"
    res = runner.invoke(app, ["suite", "import", "examples/jobfiles/lab-mix.fio", "tests/fixtures/fio/ssd-test.fio",
                              "--dut", "nvme0", "--output", str(out)])
    assert res.exit_code == 0, res.output
    assert "6 of 6 job(s) imported as profiles (8k-7030, seq-read, seq-read-2, rand-read, seq-write, " \
           "rand-write)" in res.stderr
    assert "[8k-7030] thread: not taken" in res.stderr
    suite = parse_suite(out.read_text(), str(out))
    assert [w.name for w in suite.workloads][:2] == ["8k-7030", "seq-read"]
    w: Workload = suite.workloads[0]
    assert (w.rw, w.bs, w.rwmixread, w.numjobs, w.iodepth, w.runtime, w.footprint, w.time_based) == \
        ("randrw", 8192, 70, 2, 8, 2, str(16 << 20), True)
    assert "# Submit: labctl submit THIS.yaml --host HOST --device nvme0" in out.read_text()
    res = runner.invoke(app, ["suite", "validate", str(out)])
    assert res.exit_code == 0, res.output


def test_labctl_suite_import_exits_1_when_nothing_is_imported(tmp_path: Path) -> None:
    f = tmp_path / "bad.fio"
    f.write_text("[job]\nioengine=rbd\nrw=randtrim\n")
    res = runner.invoke(app, ["suite", "import", str(f)])
    assert res.exit_code == 1
    assert "no job could be imported" in res.stderr and "'rbd' is not an engine storagelab runs" in res.stderr
    res = runner.invoke(app, ["suite", "import", str(tmp_path / "missing.fio")])
    assert res.exit_code == 1 and "cannot read" in res.stderr


@pytest.mark.parametrize("dut", ["nvme0; rm -rf /", "$(id)", "", "x" * 300, "-oops"])
def test_a_dut_that_is_no_name_or_path_is_refused(tmp_path: Path, dut: str) -> None:
    f = tmp_path / "j.fio"
    f.write_text("[a]\nrw=read\nruntime=5\n")
    with pytest.raises(JobFileError, match=r"--dut: .* is not a DUT name or path"):
        imported(f, dut=dut)


def test_an_option_fio_would_refuse_in_its_job_is_left_out_with_the_reason_and_the_job_kept(tmp_path: Path) -> None:
    f = tmp_path / "combo.fio"
    f.write_text("[global]\nruntime=5\n[a]\nrw=randwrite\nioengine=libaio\nhipri\nnorandommap\nverify=md5\n"
                 "[b]\nstonewall\nrw=write\nverify_pattern=0xff\n[c]\nstonewall\nrw=read\nbs=64m\nnumjobs=64\n"
                 "iodepth=64\n")
    result = imported(f)
    assert result.profiles == ("a", "b")
    notes = [str(n) for n in result.notes]
    assert any("[a] hipri refused: an option of ioengine io_uring / pvsync2, not of libaio" in n for n in notes)
    assert any("[a] verify=md5 refused: fio cannot verify with norandommap" in n for n in notes)
    assert any("[b] verify_pattern=0xff refused: it needs a verify" in n for n in notes)
    assert any("[c] job not imported: numjobs x iodepth x bs = 64 x 64 x 64m" in n for n in notes), notes
    a = parse_suite(result.text, "x").workloads[0]
    assert (a.hipri, a.verify, a.norandommap) == (None, None, True)


def test_the_import_command_docs_show_prints_what_they_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/suites.md, "Importing fio job files": the command as written from the checkout's root (here a copy of the
    job file at the same relative path, so nothing is written into the checkout), and the validate that follows."""
    doc = (ROOT / "docs" / "suites.md").read_text()
    block = doc.split("$ labctl suite import examples/jobfiles/lab-mix.fio --dut nvme0 --output lab-mix.yaml\n", 1)[1]
    shown, rest = block.split("$ labctl suite validate lab-mix.yaml\n", 1)
    (tmp_path / "examples" / "jobfiles").mkdir(parents=True)
    (tmp_path / "examples" / "jobfiles" / "lab-mix.fio").write_text(ENGINEER.read_text())
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["suite", "import", "examples/jobfiles/lab-mix.fio", "--dut", "nvme0", "--output",
                              "lab-mix.yaml"])
    assert res.exit_code == 0 and res.stderr == shown, res.stderr
    res = runner.invoke(app, ["suite", "validate", "lab-mix.yaml"])
    assert res.exit_code == 0 and res.stdout == rest.split("```", 1)[0], res.stdout


def test_a_refused_job_value_does_not_fall_back_on_the_global_one(tmp_path: Path) -> None:
    f = tmp_path / "override.fio"
    f.write_text("[global]\nrw=randrw\nbs=4k\nruntime=5\n[trims]\nrw=randtrim\n[reads]\nstonewall\nrw=read\n"
                 "[split]\nstonewall\nbs=4k,8k\n")
    result = imported(f)
    assert result.profiles == ("reads",)
    assert any(n.section == "split" and n.message == "refused: '4k,8k' is a list or range of sizes, not one size"
               for n in result.notes)
    assert any(n.section == "split" and n.message == "job not imported: its bs could not be taken"
               for n in result.notes)
    assert any(n.section == "trims" and n.message == "job not imported: its rw could not be taken"
               for n in result.notes)


def test_a_per_direction_rate_is_imported_and_a_one_sided_one_left_out(tmp_path: Path) -> None:
    f = tmp_path / "rates.fio"
    f.write_text("[global]\nruntime=5\nrw=randrw\nrwmixread=70\n[a]\nrate_iops=700,300\n[b]\nstonewall\n"
                 "rate_iops=,300\n[c]\nstonewall\nrate_iops=1000\n")
    result = imported(f)
    notes = [str(n) for n in result.notes]
    assert any("[b] rate_iops: refused: takes one rate, or one for reads and one for writes" in n
               and "a rate for one direction only or for trims is not taken" in n for n in notes), notes
    a, b, c = parse_suite(result.text, "x").workloads
    assert (a.rate_iops, b.rate_iops, c.rate_iops) == ("700,300", None, 1000)
