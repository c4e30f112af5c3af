"""Host facts and device-under-test declarations, read from the running system through its platform.

What the facts are read from is the platform's (:mod:`agents.platform`): on Linux ``/proc``, ``/sys``,
``/etc/os-release`` and the ``/dev/disk/by-id`` symlinks (:mod:`agents.platform.linux_sysfs`, nothing ever
opens a block device), on Windows PowerShell/CIM (:mod:`agents.platform.windows`). This module keeps what
is the same everywhere (``fio --version``, the ``--dut NAME=PATH`` syntax) and the entry points the agent and
its tests call. ``sys_root`` (Linux only, default ``/``) points the Linux readers at a fake tree.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from agents.platform import Platform, current
from agents.platform.common import fio_version
from agents.platform.linux_sysfs import BY_ID_DIR
from labcontract.errors import ConfigError
from labcontract.facts import BlockDevice, DeclaredDut, HostFacts

__all__ = [
    "BY_ID_DIR",
    "collect_host_facts",
    "declare_dut",
    "fio_version",
    "list_block_devices",
]

_DUT_SOURCE = "--dut"


def _platform(sys_root: str = "/", lspci: str | None = "lspci") -> Platform:
    """The running platform; on Linux, one reading under ``sys_root`` (tests) with ``lspci``."""
    if (sys_root == "/" and lspci == "lspci") or not sys.platform.startswith("linux"):
        return current()
    from agents.platform.linux import LinuxPlatform

    return LinuxPlatform(sys_root=sys_root, lspci=lspci)


def collect_host_facts(
    *, hostname: str | None = None, fio_binary: str = "fio", sys_root: str = "/", lspci: str | None = "lspci"
) -> HostFacts:
    """The facts an agent registers with: CPU, memory, kernel, OS (and its family), fio, block devices, and the
    platform a review lists (server, board, BIOS, sockets, storage controllers)."""
    return _platform(sys_root, lspci).host_facts(hostname=hostname, fio_binary=fio_binary)


def list_block_devices(sys_root: str = "/") -> tuple[BlockDevice, ...]:
    """Whole block devices, in a stable order (Linux: ``/sys/block`` in natural name order, RAM disks and
    unattached loop devices left out)."""
    return _platform(sys_root).block_devices()


def _dut_error(spec: str, message: str) -> ConfigError:
    return ConfigError(source=_DUT_SOURCE, key=spec, message=message)


def _parse_spec(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` or ``PATH`` -> ``(name, path)``; the name defaults to the basename."""
    head, sep, tail = spec.partition("=")
    if sep and "/" not in head:
        name, path = head.strip(), tail.strip()
        if not name:
            raise _dut_error(spec, "empty name before '='; expected NAME=PATH or PATH")
    else:
        name, path = "", spec.strip()
    if not path:
        raise _dut_error(spec, "empty path; expected NAME=PATH or PATH")
    if not name:
        name = os.path.basename(path.replace("\\", "/").rstrip("/"))
        if not name:
            raise _dut_error(spec, f"cannot derive a name from {path!r}; use NAME=PATH")
    return name, path


def declare_dut(spec: str, devices: Sequence[BlockDevice], *, sys_root: str = "/") -> DeclaredDut:
    """A device under test from a ``--dut`` value: ``NAME=PATH`` or ``PATH``.

    What PATH may be is the platform's (:meth:`agents.platform.Platform.declare_dut`): on Linux a block device
    (``/dev/sdb``, or a ``/dev/disk/by-id`` link, resolved) or a regular file (a file-backed DUT); on Windows
    ``\\\\.\\PhysicalDriveN``. Details come from the matching entry of ``devices`` (see
    :func:`list_block_devices`) or from the system. Raises :class:`ConfigError` (source ``--dut``) for
    anything that is not a usable non-empty device or file.
    """
    name, path = _parse_spec(spec)
    return _platform(sys_root).declare_dut(name, path, devices, spec=spec)
