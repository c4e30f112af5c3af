"""Step kind ``fio``: a fio job rendered from the start message's workload, on the declared DUTs it names.

The job file is rendered here and parsed back (:func:`checked_job`): only the options ``render_job`` emits,
every filename a declared DUT this step names, and every DUT a job section writes to goes through the
interlock (``write``), whatever the workload declares.

It is rendered for the agent's platform: the engine the host runs for the suite's declared one
(:meth:`agents.platform.Platform.fio_engine`) and each DUT written as fio's filename there
(:meth:`~agents.platform.Platform.fio_filename`). On Linux that is byte for byte the job the controller
planned; on Windows it differs (``windowsaio``, ``\\\\.\\PhysicalDriveN``), and the ``job.fio`` artifact
is what ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from agents.kinds.base import Host, Interlock, Launch, LiveFigures, LiveSource, StepKind, Targets, same_device
from agents.platform import Platform
from labcontract import hostcpu
from labcontract.drivehealth import ARTIFACT as DRIVE_HEALTH
from labcontract.drivetemp import ARTIFACT as DRIVE_TEMP
from labcontract.errors import FioError
from labcontract.facts import DeclaredDut
from labcontract.fioextra import FIO_RATE_PAIR_VERSION
from labcontract.fiojob import JobSection, check_job, render_job
from labcontract.power import ARTIFACT as HOST_POWER
from labcontract.protocol import StartStep

if TYPE_CHECKING:
    from agents.attempt import Attempt


@dataclass(frozen=True)
class CheckedJob:
    """A fio job as rendered for a start, parsed back: its sections and the declared DUTs it writes."""

    text: str
    sections: tuple[JobSection, ...]
    written: tuple[DeclaredDut, ...]


def checked_job(msg: StartStep, duts: Sequence[DeclaredDut], platform: Platform) -> CheckedJob:
    """Render the job of a fio step for ``platform`` and check the very text fio will read: only the options
    render_job emits, and every filename one of ``duts`` (the declared DUTs this step names). FioError
    otherwise (also for a declared engine the platform has no counterpart of)."""
    if msg.workload is None:
        raise FioError(f"attempt {msg.attempt_id}: a fio step without a workload")
    engine = platform.fio_engine(msg.workload.ioengine)
    workload = msg.workload if engine == msg.workload.ioengine else \
        msg.workload.model_copy(update={"ioengine": engine})
    text = render_job(workload, [d.path for d in duts], spell=platform.fio_filename)
    sections = check_job(text)
    return CheckedJob(text, sections, written_duts(sections, duts))


def written_duts(sections: Sequence[JobSection], duts: Sequence[DeclaredDut]) -> tuple[DeclaredDut, ...]:
    """The declared DUTs the checked job's sections write, each once; FioError when a section opens a file that
    is none of ``duts``."""
    written: list[DeclaredDut] = []
    for sec in sections:
        for name in sec.filenames:
            dut = next((d for d in duts if same_device(name, d.path)), None)
            if dut is None:
                raise FioError(f"job file refused: job {sec.name} opens {name}, not a declared DUT this step names "
                               f"({', '.join(d.path for d in duts) or 'none'})")
            if sec.writes and dut not in written:
                written.append(dut)
    return tuple(written)


class FioKind(StepKind):
    action: ClassVar[str] = "fio"
    exported_phases: ClassVar[tuple[str, ...]] = ("precondition", "measure")
    command_version: ClassVar[int] = FIO_RATE_PAIR_VERSION   # 2: the extended options; 3: rate_iops R,W
    artifacts: ClassVar[tuple[str, ...]] = ("job.fio", "fio.json", "fio.stderr", DRIVE_HEALTH, hostcpu.START,
                                            hostcpu.END, HOST_POWER, DRIVE_TEMP)
    reads_health: ClassVar[bool] = True
    samples_power: ClassVar[bool] = True

    def interlock(self, msg: StartStep, targets: Targets, host: Host) -> Interlock:
        return Interlock("write", checked_job(msg, targets.duts, host.platform).written)

    def launch(self, msg: StartStep, targets: Targets, host: Host) -> Launch:
        job = checked_job(msg, targets.duts, host.platform).text   # as checked; on Linux the planned job
        argv = [host.fio, "--output-format=json+", "--output=fio.json"]
        if msg.status_interval_s:
            argv.append(f"--status-interval={msg.status_interval_s}")
        argv.append("job.fio")
        return Launch({"job.fio": job}, tuple(argv), job)

    def live(self, reader: LiveSource, attempt: Attempt, msg: StartStep) -> LiveFigures:
        if msg.workload is None:
            return LiveFigures()
        return LiveFigures(devices=reader.fio_devices(attempt, msg, msg.workload),
                           expected_s=float(msg.workload.expected_seconds))


KIND = FioKind()
