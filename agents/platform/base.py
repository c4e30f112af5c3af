"""The agent platform's interface (:class:`Platform`) and how a platform runs a host command (:data:`Run`): the
implementations import this, never the package that picks one (:mod:`agents.platform`)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from labcontract.facts import BlockDevice, DeclaredDut, HostFacts
from labcontract.interlock import ObservedState
from labcontract.protocol import HealthCheck

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
