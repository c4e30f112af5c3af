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

import sys

from agents.platform.base import PLATFORM_METHODS, Platform, Run, run_command

__all__ = ["PLATFORM_METHODS", "Platform", "Run", "current", "for_name", "platform_name", "run_command"]

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
