"""Fuzz (hypothesis, deterministic) of ``labctl suite import`` (labcontract.fioimport): random job-file-ish text and
mutations of fio's own examples. Whatever the text, only a JobFileError escapes, each call returns within 2 s, and
every suite it writes parses and renders job files holding only render_job's options (the agent's checker takes
them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from labcontract.errors import JobFileError
from labcontract.fioimport import Imported, import_jobfiles
from labcontract.fiojob import check_job, render_job
from labcontract.suite import parse_suite
from tests.fuzzing import INJECTION, OPTION_LINES, bounded, fuzz_settings, mutated_text, report_inputs

pytestmark = pytest.mark.usefixtures("report_inputs")
__all__ = ["report_inputs"]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fio"
EXAMPLES = [p.read_text() for p in sorted(FIXTURES.glob("*.fio"))]
TOKENS = [*"[]=;#$()/:,%-.\n\t 0123456789kKmMgGiIbB", "[global]\n", "[job]\n", "rw=", "randrw", "bs=", "4k", "size=",
          "runtime=", "time_based\n", "stonewall\n", "bssplit=", "random_distribution=", "zipf:", "rate_iops=",
          "verify=", "crc32c", "cpus_allowed=", "offset=", "ioengine=", "io_uring", "hipri\n", "include ", "${X}",
          "filename=", "exec_prerun=", "kb_base=1000\n", "numjobs=", "iodepth=", "rwmixwrite=", "readwrite="]
JOBFILEISH = st.lists(st.sampled_from(TOKENS), max_size=80).map("".join)


def survives(text: str) -> None:
    def run() -> Imported | None:
        try:
            return import_jobfiles([("fuzz.fio", text)], dut="nvme0")
        except JobFileError:
            return None
    result = bounded("import_jobfiles", run)
    if result is None:
        return
    suite = parse_suite(result.text, "imported.yaml")
    for w in suite.workloads[:20]:
        job = render_job(w, "/dev/disk/by-id/lab-dut0")
        for line in job.splitlines():
            assert line.startswith(("[", "filename=/dev/disk/by-id/lab-dut")) or any(
                p.fullmatch(line) for p in OPTION_LINES), f"{w.name}: job line {line!r}"
        check_job(job)


@fuzz_settings(max_examples=300)
@given(JOBFILEISH)
@example(INJECTION)
@example("[a]\nrw=randrw\nbssplit=4k/50:64k/50\nrandom_distribution=zipf:1.2\nverify=md5\nruntime=5\n")
@example("[a]\n" + "rw=read\n" * 300)
@example("[" * 5000)
def test_jobfile_text_is_a_suite_or_a_job_file_error(text: str) -> None:
    survives(text)


@fuzz_settings(max_examples=200)
@given(st.sampled_from(EXAMPLES).flatmap(mutated_text))
def test_mutated_fio_examples_are_a_suite_or_a_job_file_error(text: str) -> None:
    survives(text)
