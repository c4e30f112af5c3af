"""Step kind ``fio``: a fio job rendered from the start message's workload, on the declared DUTs it names.

The job file is rendered here and parsed back (:func:`checked_job`): only the options ``render_job`` emits,
every filename a declared DUT this step names, and every DUT a job section writes to goes through the
interlock (``write``), whatever the workload declares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from agents.kinds import Host, Interlock, Launch, LiveFigures, StepKind, Targets, same_device
from labcontract.errors import FioError
from labcontract.facts import DeclaredDut
from labcontract.fiojob import JobSection, check_job, render_job
from labcontract.protocol import StartStep

if TYPE_CHECKING:
    from agents.live import LiveReader
    from agents.runner import Attempt


@dataclass(frozen=True)
class CheckedJob:
    """A fio job as rendered for a start, parsed back: its sections and the declared DUTs it writes."""

    text: str
    sections: tuple[JobSection, ...]
    written: tuple[DeclaredDut, ...]


def checked_job(msg: StartStep, duts: Sequence[DeclaredDut]) -> CheckedJob:
    """Render the job of a fio step and check the very text fio will read: only the options render_job
    emits, and every filename one of ``duts`` (the declared DUTs this step names). FioError otherwise."""
    if msg.workload is None:
        raise FioError(f"attempt {msg.attempt_id}: a fio step without a workload")
    text = render_job(msg.workload, [d.path for d in duts])
    sections = check_job(text)
    written: list[DeclaredDut] = []
    for sec in sections:
        for name in sec.filenames:
            dut = next((d for d in duts if same_device(name, d.path)), None)
            if dut is None:
                raise FioError(f"job file refused: job {sec.name} opens {name}, not a declared DUT this step names "
                               f"({', '.join(d.path for d in duts) or 'none'})")
            if sec.writes and dut not in written:
                written.append(dut)
    return CheckedJob(text, sections, tuple(written))


class FioKind(StepKind):
    action: ClassVar[str] = "fio"
    artifacts: ClassVar[tuple[str, ...]] = ("job.fio", "fio.json", "fio.stderr")

    def interlock(self, msg: StartStep, targets: Targets, host: Host) -> Interlock:
        return Interlock("write", checked_job(msg, targets.duts).written)

    def launch(self, msg: StartStep, targets: Targets, host: Host) -> Launch:
        job = checked_job(msg, targets.duts).text        # byte for byte the planned job, as checked
        argv = [host.fio, "--output-format=json+", "--output=fio.json"]
        if msg.status_interval_s:
            argv.append(f"--status-interval={msg.status_interval_s}")
        argv.append("job.fio")
        return Launch({"job.fio": job}, tuple(argv), job)

    def live(self, reader: LiveReader, attempt: Attempt, msg: StartStep) -> LiveFigures:
        if msg.workload is None:
            return LiveFigures()
        return LiveFigures(devices=reader.fio_devices(attempt, msg, msg.workload),
                           expected_s=float(msg.workload.expected_seconds))


KIND = FioKind()
