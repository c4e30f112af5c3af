"""What a step kind is (:class:`StepKind`), what it may know of its host (:class:`Host`), what it launches
(:class:`Launch`), its targets and interlock, and the registry's functions (:func:`register`, :func:`get`). The
package ``agents.kinds`` loads the kinds and re-exports these: a kind module imports them from here, never from the
package that imports it (docs of the registry: ``agents/kinds/__init__.py``)."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, get_args

from agents.labfs import lab_filesystem_on
from agents.platform import Platform, current
from labcontract import interlock
from labcontract.apps import AppStart
from labcontract.engines import OS_NAMES
from labcontract.errors import DeviceRefused, StepError
from labcontract.facts import DeclaredDut, NetPathDecl, StepKindFact
from labcontract.live import AppLive, DeviceLive
from labcontract.protocol import StartStep
from labcontract.registry import Registry
from labcontract.stepkinds import AgentStepKindName

if TYPE_CHECKING:
    from agents.attempt import Attempt
    from agents.workloads import Workload, Workloads
    from labcontract.suite import Workload as FioWorkload

__all__ = ["Host", "Interlock", "Launch", "LiveFigures", "LiveSource", "StepKind", "Targets", "actions",
           "all_artifacts", "find_dut", "get", "interlock_refusal", "platform_refusal", "register", "resolve_duts",
           "same_device"]


def same_device(a: str, b: str) -> bool:
    """Whether two paths name one device (symlinks such as /dev/disk/by-id resolved). A Windows device-namespace
    path (``//./PhysicalDriveN``) names a device only exactly: it has no symlinks to resolve."""
    if a.startswith("//./") or b.startswith("//./"):
        return a == b
    return a == b or os.path.realpath(a) == os.path.realpath(b)


@dataclass(frozen=True)
class Host:
    """What a kind may know of the agent's host and configuration (never anything from the wire)."""

    name: str
    state_dir: Path
    duts: tuple[DeclaredDut, ...] = ()
    net_paths: tuple[NetPathDecl, ...] = ()
    manage_mtu: bool = False
    fio: str = "fio"                          # the fio binary (resolved by the runner)
    workloads: Workloads | None = None        # external workload declarations (--app-workloads)
    app_mount_root: Path | None = None        # where application steps mount DUTs (--app-mount-root)
    platform: Platform = field(default_factory=current)   # the OS it runs on (fio's engine and filenames)


@dataclass(frozen=True)
class Targets:
    """What a start message names, resolved against the host's declarations."""

    duts: tuple[DeclaredDut, ...] = ()
    net_paths: tuple[NetPathDecl, ...] = ()
    external: Workload | None = None          # the declared external workload an app step names
    app: AppStart | None = None               # an app step's part as it is run (declared defaults filled in)


@dataclass(frozen=True)
class Launch:
    """The files a kind writes into the attempt directory and the argv it runs there. ``job`` is the text
    whose sha256 goes to the controller (``StepStarted.job_sha256``)."""

    files: Mapping[str, str]
    argv: tuple[str, ...]
    job: str


@dataclass(frozen=True)
class LiveFigures:
    """A kind's part of a running attempt's live status."""

    devices: tuple[DeviceLive, ...] = ()
    expected_s: float = 0.0
    app: AppLive | None = None


class LiveSource(Protocol):
    """What a kind reads a running attempt's live figures from (``agents.live.LiveReader``)."""

    def fio_devices(self, attempt: Attempt, msg: StartStep, w: FioWorkload) -> tuple[DeviceLive, ...]: ...

    def app_live(self, attempt: Attempt, now: float | None = None) -> AppLive | None: ...


@dataclass(frozen=True)
class Interlock:
    """The destructive operation of a start on its DUTs, for the interlock (``operation`` None: none).
    ``lab_fs``: DUT names whose filesystem signature is one this lab made (it may be remade / written)."""

    operation: str | None
    duts: tuple[DeclaredDut, ...] = ()
    lab_fs: frozenset[str] = field(default_factory=frozenset)


class StepKind(ABC):
    """One step kind on the agent. Subclasses set :attr:`action`, :attr:`artifacts` and implement
    :meth:`launch`; the defaults fit a kind that runs on the declared DUTs a message names."""

    action: ClassVar[str]
    command_version: ClassVar[int] = 1
    process: ClassVar[str] = ""                   # what the logs call its process ("" : the action)
    artifacts: ClassVar[tuple[str, ...]] = ("fio.stderr",)
    tails: ClassVar[tuple[str, ...]] = ("fio.stderr",)   # artifacts sent as their last MiB when longer
    # its cleanup may take minutes (a DB server's clean shutdown): run in a thread of its own, the end reported
    # once it is done, so that the agent's heartbeats never wait for it
    slow_cleanup: ClassVar[bool] = False
    # it changes what the interlock observes of its DUTs (mounts, filesystems): the agent registers again, with
    # fresh observations, just before reporting its end, so the controller never judges the next step on a
    # DUT it saw mounted by this one
    refresh_observations: ClassVar[bool] = False
    # its DUTs' health (NVMe smart-log / smartctl) is read before its launch and after its end
    # (agents.drivehealth): what a drive says it wrote, its temperature and errors around the step
    reads_health: ClassVar[bool] = False
    # the host's power is read from its BMC while its process runs, when the agent has one declared
    # (agents.power): what reports divide IOPS and MB/s by
    samples_power: ClassVar[bool] = False
    # the live status's phases of its steps (labcontract.stepkinds) that the exporter shows even while none runs
    # (lab_step_phase 0); a phase not named here has its series only while one of its steps runs
    exported_phases: ClassVar[tuple[str, ...]] = ()
    # the agent platforms (Platform.name) it runs on: a start on another is refused (platform_refusal)
    platforms: ClassVar[frozenset[str]] = frozenset({"linux", "windows"})

    # --- targets and checks ---------------------------------------------------------------

    def targets(self, msg: StartStep, host: Host) -> tuple[Targets, str]:
        """The targets ``msg`` names and why it is refused ("" when it is not). Default: the declared DUTs
        of ``msg.devices`` (at least one, none twice), through the interlock (:meth:`interlock`)."""
        duts, refused = resolve_duts(msg, host)
        if refused:
            return Targets(duts=tuple(duts)), refused
        targets = Targets(duts=tuple(duts))
        try:
            lock = self.interlock(msg, targets, host)
        except StepError as e:
            return targets, str(e)
        return targets, interlock_refusal(lock, host) or ""

    def interlock(self, msg: StartStep, targets: Targets, host: Host) -> Interlock:
        """What the step does to its DUTs (StepError: the request itself is wrong). Default: reads only."""
        return Interlock(None)

    # --- the process ----------------------------------------------------------------------

    @abstractmethod
    def launch(self, msg: StartStep, targets: Targets, host: Host) -> Launch:
        """The files and argv of the attempt (StepError when it cannot be made: nothing is created)."""

    def cleanup(self, attempt_dir: Path) -> list[str]:
        """Release what the attempt's process may have left (idempotent); what was done, one line each."""
        return []

    def live(self, reader: LiveSource, attempt: Attempt, msg: StartStep) -> LiveFigures:
        """The kind's part of the live status of a running attempt. Default: none."""
        return LiveFigures()


_REGISTRY: Registry[StepKind] = Registry("step kind", lambda action, known: StepError(
    f"action {str(action)[:40]!r} has no step kind on this agent (known: {', '.join(known)})"))


def register(kind: StepKind) -> StepKind:
    """Register ``kind`` for its action; an action registered twice is a programming error."""
    action = getattr(kind, "action", "")
    if not isinstance(action, str) or not action:
        raise ValueError(f"step kind {type(kind).__name__} names no action")
    return _REGISTRY.add(action, kind)


def get(action: str) -> StepKind:
    """The kind of ``action``; StepError (refused, with the known actions) for an action without one."""
    return _REGISTRY.get_or_fail(action)


def platform_refusal(kind: StepKind, platform: str) -> str | None:
    """Why ``kind`` is not started on an agent whose platform is ``platform`` (None: it runs there)."""
    if platform in kind.platforms:
        return None
    where = " and ".join(OS_NAMES.get(p, p) for p in sorted(kind.platforms)) or "no"
    return f"step kind {kind.action} runs on {where} agents only (docs/windows.md)"


def exported_phases() -> tuple[str, ...]:
    """Every kind's ``exported_phases``, in the order of the step kinds (labcontract.stepkinds)."""
    named = {p for kind in _REGISTRY.values() for p in kind.exported_phases}
    return tuple(p for p in get_args(AgentStepKindName) if p in named)


def actions() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def announced(platform: str) -> tuple[StepKindFact, ...]:
    """The kinds this agent runs on ``platform`` with their versions, as its Register's facts announce them."""
    return tuple(StepKindFact(action=action, version=kind.command_version)
                 for action, kind in sorted(_REGISTRY.items()) if platform_refusal(kind, platform) is None)


def all_artifacts() -> tuple[str, ...]:
    """Every artifact name of every kind (an attempt whose start record is unreadable)."""
    return tuple(dict.fromkeys(name for k in _REGISTRY.values() for name in k.artifacts))


# --- helpers shared by kinds ----------------------------------------------------------------

def find_dut(device: str, host: Host) -> DeclaredDut:
    """The declared DUT ``device`` names (its name, path or by-id link; a symlink to it resolved)."""
    for dut in host.duts:
        if device in (dut.path, dut.name, dut.by_id):
            return dut
    if device.startswith("/"):
        for dut in host.duts:
            if same_device(device, dut.path):
                return dut
    declared = ", ".join(d.path for d in host.duts) or "none"
    raise DeviceRefused(host.name, device, f"not a declared DUT of this host (declared: {declared})")


def resolve_duts(msg: StartStep, host: Host) -> tuple[list[DeclaredDut], str]:
    """The declared DUTs ``msg.devices`` names and why the request is refused ("" when it is not)."""
    duts, refusals = [], []
    for device in msg.devices:
        try:
            duts.append(find_dut(device, host))
        except DeviceRefused as e:
            refusals.append(str(e))
    if refusals or not duts:
        return duts, "; ".join(refusals) or "no device named"
    if len({d.path for d in duts}) != len(duts):
        return duts, "a device is named twice in one step"
    return duts, ""


def interlock_refusal(lock: Interlock, host: Host, duts: Sequence[DeclaredDut] | None = None) -> str | None:
    """The safety interlock on the host at start: ``lock.operation`` on ``lock.duts`` is refused on a device that
    is mounted, in use, carries a signature (unless wipe_ok, or a filesystem this lab made: ``lock.lab_fs``) or
    backs the root fs. None: allowed (or nothing destructive)."""
    targets = list(lock.duts if duts is None else duts)
    if lock.operation is None or not targets:
        return None
    declared = [interlock.DeclaredDut(name=d.name, path=d.path, wipe_ok=d.wipe_ok) for d in host.duts]
    out = []
    for d in targets:
        obs = host.platform.observe_dut(d.path)
        lab_fs = d.name in lock.lab_fs or lab_filesystem_on(host.state_dir, d)
        reasons = interlock.refusal_reasons(obs.path, declared, obs, lock.operation, lab_fs=lab_fs)
        if reasons:
            out.append(interlock.refusal_message(obs.path, lock.operation, reasons))
    return "; ".join(out) or None
