"""The agent's platform layer: everything that differs between the operating systems an agent runs on.

One interface, :class:`Platform`, covers what the agent asks of the host it runs on:

* **facts** — OS, kernel or build, CPU, memory, firmware (:meth:`Platform.host_facts`);
* **devices** — enumeration and identity: model, serial, firmware, size, a stable id path
  (:meth:`Platform.block_devices`, :meth:`Platform.declare_dut`);
* **the safety interlock's view of a DUT** — mounted, signatures, in use, backs the OS
  (:meth:`Platform.observe_dut`; :mod:`labcontract.interlock` decides);
* **process supervision** — start a step's process detached in a session / process group of its own so it
  outlives an agent restart, tell whether a recorded pid is still *that* process (pid + start time), end
  it, and re-adopt it after a restart (:meth:`Platform.start_detached`, :meth:`Platform.start_token`,
  :meth:`Platform.alive`, :meth:`Platform.terminate`, :meth:`Platform.kill`, :meth:`Platform.boot_id`);
* **fio** — the default engine, the engines the host can run, the one it runs for a suite's declared engine,
  and how a DUT path is written in a job file (:attr:`Platform.default_ioengine`, :attr:`Platform.ioengines`,
  :meth:`Platform.fio_engine`, :meth:`Platform.fio_filename`);
* **health** — the DUT is present with its declared identity, and its SMART / reliability state
  (:meth:`Platform.device_checks`, :meth:`Platform.smart_check`).

:func:`current` picks the implementation by ``sys.platform``: :mod:`agents.platform.linux` (sysfs, ``sh``
wrapper, sessions) or :mod:`agents.platform.windows` (PowerShell/CIM, ``\\\\.\\PhysicalDriveN``,
``windowsaio``, detached process groups). The Windows one runs its commands through an injectable
:data:`Run` so that it is unit-tested on Linux against stored command outputs (``tests/fixtures/windows``).

The facts and DUT declarations are the contract's models (:class:`labcontract.facts.HostFacts`,
:class:`labcontract.facts.DeclaredDut`), whatever the platform: a result carries the host's ``os`` and
``os_family`` so that reports and comparisons can tell a Linux run from a Windows run on the same hardware.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from labcontract.facts import BlockDevice, DeclaredDut, HostFacts
from labcontract.interlock import ObservedState
from labcontract.protocol import HealthCheck

__all__ = ["PLATFORM_METHODS", "Platform", "Run", "current", "for_name", "platform_name", "run_command"]

COMMAND_TIMEOUT_S = 20.0
# A command's output is read up to this size: anything longer is refused as a whole (never cut and parsed)
MAX_OUTPUT_BYTES = 4 << 20

Run = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]
"""How a platform runs a host command (argv, no shell) and gets its exit code and text output; tests pass
one that answers from stored outputs."""


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """The default :data:`Run`: no shell, no stdin, a timeout, text decoded leniently."""
    return subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", timeout=COMMAND_TIMEOUT_S, check=False)


@runtime_checkable
class Platform(Protocol):
    """What the agent needs from the operating system it runs on (see the module docstring)."""

    @property
    def name(self) -> str:
        """``linux`` or ``windows``: what the facts carry as ``HostFacts.os_family``."""
        ...

    @property
    def default_ioengine(self) -> str:
        """fio's engine on this platform when a suite names none (``libaio``, ``windowsaio``)."""
        ...

    @property
    def ioengines(self) -> frozenset[str]:
        """The engines this platform's fio builds have."""
        ...

    def with_run(self, run: Run) -> Platform:
        """The same platform running its host commands through ``run`` (tests: stored outputs)."""
        ...

    # ------------------------------------------------------------------ facts and devices
    def host_facts(self, *, hostname: str | None = None, fio_binary: str = "fio") -> HostFacts:
        """The facts the agent registers with (its ``os`` and ``os_family`` included)."""
        ...

    def block_devices(self) -> tuple[BlockDevice, ...]:
        """Whole disks (and attached loop devices on Linux), each with its identity, in a stable order."""
        ...

    def declare_dut(self, name: str, path: str, devices: Sequence[BlockDevice], *,
                    spec: str | None = None) -> DeclaredDut:
        """A device under test at ``path`` (the ``--dut`` value ``spec`` already split into NAME and PATH by
        the caller; ``devices`` as :meth:`block_devices` gave them, or empty); raises
        :class:`labcontract.errors.ConfigError` (source ``--dut``, key ``spec``) with the reason it is not
        usable."""
        ...

    def fio_filename(self, path: str) -> str:
        """``path`` (a DUT's contract path) as fio's ``filename=`` takes it on this platform."""
        ...

    def fio_engine(self, declared: str) -> str:
        """The engine this host runs for a suite's ``declared`` engine (so that one suite runs on Linux and on
        Windows hosts of the same hardware); :class:`labcontract.errors.FioError` naming the engine and the
        platform when it has no counterpart here."""
        ...

    def observe_dut(self, path: str) -> ObservedState:
        """The DUT at ``path`` as the safety interlock judges it (:func:`labcontract.interlock.refusal_reasons`):
        exists, mount points, signatures, holders, whether it backs the OS; a probe that failed is its
        ``probe_error`` (refused), never an exception. Linux: :func:`labcontract.interlock.observe`; Windows:
        ``Get-Disk`` / ``Get-Partition`` (:mod:`agents.platform.windows_interlock`)."""
        ...

    # ------------------------------------------------------------------ process supervision
    def start_detached(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``cwd`` detached from the agent (own session / process group), its output going
        to ``fio.stdout`` / ``fio.stderr`` and its exit code to ``rc`` (written via ``rc.tmp``) in ``cwd``."""
        ...

    def start_token(self, pid: int) -> int | None:
        """An opaque start time of process ``pid`` (None: no such live process): with the pid, the identity
        a restarted agent re-adopts a process by (a pid alone may be reused)."""
        ...

    def alive(self, pid: int, token: object) -> bool:
        """Whether ``pid`` is still the process that had start ``token``."""
        ...

    def terminate(self, pid: int, token: object) -> None:
        """Ask the process (and its group) to end; nothing when it is no longer that process."""
        ...

    def kill(self, pid: int, token: object) -> None:
        """End the process (and its group) at once; nothing when it is no longer that process."""
        ...

    def boot_id(self) -> str:
        """This boot's id ("" if unknown): monotonic clock readings compare only within one boot."""
        ...

    # ------------------------------------------------------------------ health
    def device_checks(self, dut: DeclaredDut) -> list[HealthCheck]:
        """The DUT is present, with its declared size, and reads back its serial."""
        ...

    def smart_check(self, dut: DeclaredDut) -> HealthCheck | None:
        """SMART / reliability state of a block DUT; None when the host has no way to tell."""
        ...


PLATFORM_METHODS = ("with_run", "host_facts", "block_devices", "declare_dut", "fio_filename", "fio_engine",
                    "observe_dut", "start_detached", "start_token", "alive", "terminate", "kill", "boot_id",
                    "device_checks", "smart_check")
"""Every method of :class:`Platform` (conformance tests check each implementation has them all)."""

_CURRENT: Platform | None = None


def for_name(name: str) -> Platform:
    """The platform named ``name`` (``linux`` or ``windows``), with its default command runner."""
    if name == "linux":
        from agents.platform.linux import LinuxPlatform

        return LinuxPlatform()
    if name == "windows":
        from agents.platform.windows import WindowsPlatform

        return WindowsPlatform()
    raise ValueError(f"no agent platform {name!r} (linux, windows)")


def platform_name(system: str | None = None) -> str:
    """The platform name for ``sys.platform`` (or ``system``): an agent runs on Linux and Windows only."""
    system = sys.platform if system is None else system
    if system.startswith("linux"):
        return "linux"
    if system in ("win32", "cygwin"):
        return "windows"
    raise ValueError(f"the agent runs on Linux and Windows, not on {system!r}")


def current() -> Platform:
    """The platform the agent runs on, by ``sys.platform`` (one instance per process)."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = for_name(platform_name())
    return _CURRENT
