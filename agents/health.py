"""The agent's health checks, sent with heartbeats (the controller counts them; see
``orchestrator.runs.health``): the agent's own self-test, every DUT present and reading back the same
identity, and SMART / NVMe critical warnings (Windows: the disk's health status and reliability counters)
clear where the host can tell. How a DUT and its SMART state are read is the platform's
(:meth:`agents.platform.Platform.device_checks`, :meth:`agents.platform.Platform.smart_check`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from agents.platform import Run, current
from labcontract.facts import DeclaredDut
from labcontract.protocol import HealthCheck

__all__ = ["Run", "device_checks", "run_checks", "self_test", "smart_check"]


def self_test(host: str, state_dir: Path, fio_binary: str) -> HealthCheck:
    """The agent can do its job: its state directory takes a write, and fio is there to run."""
    problems = []
    probe = state_dir / ".health-probe"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with open(probe, "w") as f:
            f.write("ok\n")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except OSError as e:
        problems.append(f"state dir {state_dir} not writable ({e.strerror or e})")
    if shutil.which(fio_binary) is None:
        problems.append(f"fio binary {fio_binary!r} not found")
    return HealthCheck(check="agent", target=host, ok=not problems, detail="; ".join(problems) or "ok")


def device_checks(dut: DeclaredDut) -> list[HealthCheck]:
    """The DUT is there (a block device with a size, or the file) with the size it was declared with, and
    reads back its serial (:func:`agents.platform.common.device_checks`)."""
    return current().device_checks(dut)


def smart_check(dut: DeclaredDut, run: Run | None = None) -> HealthCheck | None:
    """The platform's SMART / reliability check of a block DUT (its host commands through ``run`` when
    given); None when the host has no way to tell."""
    platform = current() if run is None else current().with_run(run)
    return platform.smart_check(dut)


def run_checks(host: str, state_dir: Path, fio_binary: str, duts: Sequence[DeclaredDut]) -> tuple[HealthCheck, ...]:
    """The quick checks (milliseconds), run with every heartbeat; SMART runs apart (:func:`smart_check`)."""
    checks = [self_test(host, state_dir, fio_binary)]
    for dut in duts:
        checks += device_checks(dut)
    return tuple(checks)
