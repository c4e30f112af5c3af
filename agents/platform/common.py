"""What every platform does the same way: ``fio --version``, the DUT health checks built on a platform's own
``declare_dut``, and the typed, bounded reading of values from command output (untrusted input)."""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

from labcontract.errors import ConfigError, Problem
from labcontract.facts import DeclaredDut
from labcontract.protocol import HealthCheck

if TYPE_CHECKING:
    from agents.platform.base import Platform

__all__ = ["MAX_TEXT", "PLACEHOLDERS", "device_checks", "fio_version", "read_int", "read_text"]

FIO_VERSION_TIMEOUT = 10.0            # seconds
# firmware placeholders that name nothing (DMI on Linux, CIM on Windows): shown as unknown, not as a vendor
PLACEHOLDERS = frozenset({"to be filled by o.e.m.", "default string", "not specified", "none", "n/a", "o.e.m.",
                          "system product name", "system manufacturer", "0123456789"})
MAX_TEXT = 256                        # a model, serial, firmware, OS name: longer is not a value but a fault


def fio_version(fio_binary: str = "fio") -> str | None:
    """``fio --version`` stripped (``"fio-3.33"``); ``None`` if fio is missing or fails."""
    try:
        proc = subprocess.run(
            [fio_binary, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=FIO_VERSION_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    lines = proc.stdout.strip().splitlines()
    return lines[0].strip() if lines else None


def device_checks(platform: Platform, dut: DeclaredDut) -> list[HealthCheck]:
    """The DUT is there (a block device with a size, or the file) with the size it was declared with, and
    reads back its serial. A size of its own is the one identity a loop device or a file has: the loop
    number a DUT left may be taken at once by another process's file, and that is not the DUT."""
    try:
        now = platform.declare_dut(os.path.basename(dut.path.rstrip("/")) or dut.name, dut.path, (), spec=dut.path)
    except ConfigError as e:
        return [HealthCheck(check="present", target=dut.path, ok=False, detail=e.message)]
    if dut.size_bytes and now.size_bytes != dut.size_bytes:
        return [HealthCheck(check="present", target=dut.path, ok=False,
                            detail=f"{dut.path} has size {now.size_bytes} bytes; declared with {dut.size_bytes} "
                                   "(another device on its path?)")]
    checks = [HealthCheck(check="present", target=dut.path, ok=True, detail=f"{now.size_bytes} bytes")]
    if dut.kind == "block":
        checks.append(HealthCheck(check="serial", target=dut.path, ok=True, detail=now.serial or "no serial",
                                  observed=now.serial))
    return checks


def read_text(obj: dict[str, object], key: str, where: str, problems: list[Problem],
              max_len: int = MAX_TEXT) -> str | None:
    """``obj[key]`` as a stripped string (None when absent, null or blank); anything else, or a string longer
    than ``max_len``, is a problem (named by ``where.key``) and None."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append(Problem(f"{where}.{key}", f"expected a string, got {type(value).__name__}"))
        return None
    if len(value) > max_len:
        problems.append(Problem(f"{where}.{key}", f"a string of {len(value)} characters (at most {max_len})"))
        return None
    text = value.strip().strip("\x00").strip()
    if any(ord(c) < 32 for c in text):
        problems.append(Problem(f"{where}.{key}", "holds control characters"))
        return None
    return text or None


def read_int(obj: dict[str, object], key: str, where: str, problems: list[Problem], *, lo: int, hi: int,
             required: bool = False) -> int | None:
    """``obj[key]`` as an integer in ``[lo, hi]``: a JSON integer or a string of decimal digits (PowerShell
    writes some numbers as strings, e.g. ``DeviceId``); a bool, a fraction, anything else is a problem."""
    value = obj.get(key)
    if value is None:
        if required:
            problems.append(Problem(f"{where}.{key}", "missing"))
        return None
    if isinstance(value, str) and value.strip().isascii() and value.strip().lstrip("-").isdigit() \
            and len(value.strip()) <= 20:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(Problem(f"{where}.{key}", f"expected an integer, got {str(value)[:40]!r}"))
        return None
    if not lo <= value <= hi:
        problems.append(Problem(f"{where}.{key}", f"{value} is out of range [{lo}, {hi}]"))
        return None
    return value
