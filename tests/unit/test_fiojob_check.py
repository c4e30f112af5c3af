"""The rendered job file, parsed back (what the agent's interlock judges): only the options render_job emits,
every job's filename(s) and whether it writes; render_job itself refuses values that could open an option."""

from __future__ import annotations

from typing import Any

import pytest

from labcontract.errors import FioError
from labcontract.fiojob import DUT_PLACEHOLDER, JobSection, check_job, render_job
from labcontract.suite import Workload, builtin_suites, load_suite

INJECTION = "1%\nexec_prerun=touch X\n[evil]\nfilename=/dev/loop7\nrw=write\n;%"


def wl(**kw: Any) -> Workload:
    return Workload.model_validate({"name": "p", "rw": "read", "bs": 4096, **kw})


def test_every_builtin_suite_renders_to_a_job_the_check_accepts() -> None:
    for name in builtin_suites():
        for w in load_suite(name).workloads:
            for devs in (["/dev/loop3"], ["/dev/loop3", "/dev/disk/by-path/pci-0000:00:1f.2-ata-1"]):
                sections = check_job(render_job(w, devs))
                assert [f for s in sections for f in s.filenames] == devs
                assert all(s.writes == (w.rw not in ("read", "randread")) for s in sections)


def test_sections_filenames_and_writes() -> None:
    assert check_job(render_job(wl(), "/dev/loop3")) == (JobSection("p", ("/dev/loop3",), "read"),)
    assert check_job(render_job(wl(rw="randwrite"), "/dev/loop3"))[0].writes
    assert check_job(render_job(wl(rw="randrw", rwmixread=100), "/dev/loop3"))[0].writes   # not a pure read
    assert check_job(render_job(wl(), DUT_PLACEHOLDER))[0].filenames == (DUT_PLACEHOLDER,)


def test_a_colon_in_a_device_path_is_escaped_and_read_back() -> None:
    job = render_job(wl(), "/dev/disk/by-path/pci-0000:00:1f.2")
    assert "filename=/dev/disk/by-path/pci-0000\\:00\\:1f.2\n" in job
    assert check_job(job)[0].filenames == ("/dev/disk/by-path/pci-0000:00:1f.2",)


def test_the_footprint_injection_is_refused_by_the_check() -> None:
    # what the unchecked footprint made of the job file before (the workload is refused earlier today)
    job = render_job(wl(), "/dev/loop3").replace("group_reporting=1", f"size={INJECTION}\ngroup_reporting=1")
    with pytest.raises(FioError, match=r"line 7: '1%' is not|size=|exec_prerun"):
        check_job(job)
    evil = render_job(wl(), "/dev/loop3") + "\n[evil]\nfilename=/dev/loop7\nrw=write\n"
    assert check_job(evil)[1] == JobSection("evil", ("/dev/loop7",), "write")     # seen: the agent refuses loop7


@pytest.mark.parametrize(("extra", "message"), [
    ("exec_prerun=touch /tmp/x", "option 'exec_prerun' is not allowed"),
    ("exec_postrun=touch /tmp/x", "option 'exec_postrun' is not allowed"),
    ("write_iolog=/etc/passwd", "option 'write_iolog' is not allowed"),
    ("ioengine=external", "ioengine='external' is not a valid value"),
    ("verify_backlog=8", "option 'verify_backlog' is not allowed"),
    ("include /etc/fio.job", "is not an option of a rendered job"),
    ("; a comment", "is not an option of a rendered job"),
    ("# a comment", "is not an option of a rendered job"),
    ("size=$mb_memory", "size='$mb_memory' is not a valid value"),
    ("bs=${BS}", "is not a valid value"),
    ("rw=trim", "rw='trim' is not a valid value"),
    ("iodepth=1 ", "is not a valid value"),
    ("numjobs=1", "option numjobs set twice in one section"),
])
def test_unknown_or_dangerous_options_are_refused(extra: str, message: str) -> None:
    job = render_job(wl(), "/dev/loop3") + extra + "\n"
    with pytest.raises(FioError, match="job file refused: line [0-9]+: .*" + message.replace("$", r"\$")
                       .replace("(", r"\(").replace("{", r"\{").replace("}", r"\}")):
        check_job(job)


@pytest.mark.parametrize(("filename", "message"), [
    ("/dev/loop3:/dev/loop7", "names several files"),
    ("${HOME}/x", "not a plain absolute path"),
    ("relative.img", "not a plain absolute path"),
    ("/dev/loop3 ", "not a plain absolute path"),
])
def test_filenames_are_single_plain_absolute_paths(filename: str, message: str) -> None:
    job = render_job(wl(), "/dev/loop3").replace("filename=/dev/loop3", f"filename={filename}")
    with pytest.raises(FioError, match=message):
        check_job(job)


def test_structure_is_checked() -> None:
    job = render_job(wl(), "/dev/loop3")
    with pytest.raises(FioError, match="holds no job"):
        check_job(job.split("\n\n")[0])
    with pytest.raises(FioError, match=r"\[global\] must be the first section"):
        check_job(job + "[global]\n")
    with pytest.raises(FioError, match="before any section"):
        check_job("rw=read\n" + job)
    with pytest.raises(FioError, match="names no filename"):
        check_job(job.replace("filename=/dev/loop3\n", ""))
    with pytest.raises(FioError, match="over 65536"):
        check_job(job + "\n" * 70000)


@pytest.mark.parametrize("device", ["/dev/loop3\n[evil]", "/dev/lo op", "dev/loop3", "/dev/$X", "/dev/x;y"])
def test_render_refuses_a_device_path_that_is_not_plain(device: str) -> None:
    with pytest.raises(FioError, match="not a plain absolute path"):
        render_job(wl(), device)


def test_render_refuses_an_unchecked_value_defence_in_depth() -> None:
    # a Workload built without validation (model_construct) still cannot open an option
    w = Workload.model_construct(**{**wl().model_dump(), "footprint": INJECTION})
    with pytest.raises(FioError, match="refusing to render size="):
        render_job(w, "/dev/loop3")
    w = Workload.model_construct(**{**wl().model_dump(), "ioengine": "libaio\nexec_prerun=x"})
    with pytest.raises(FioError, match="refusing to render ioengine="):
        render_job(w, "/dev/loop3")
