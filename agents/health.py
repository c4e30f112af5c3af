"""The agent's health checks, sent with heartbeats (the controller counts them; see
``orchestrator.health``): the agent's own self-test, every DUT present and reading back the same
identity, and SMART / NVMe critical warnings clear where the tools are installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from labcontract.errors import ConfigError
from labcontract.facts import DeclaredDut
from labcontract.protocol import HealthCheck

from .facts import declare_dut

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]
TOOL_TIMEOUT_S = 20


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)


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
    reads back its serial. A size of its own is the one identity a loop device or a file has: the loop
    number a DUT left may be taken at once by another process's file, and that is not the DUT."""
    try:
        now = declare_dut(dut.path, ())
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


def nvme_critical_warning(text: str) -> tuple[bool, str]:
    """``nvme smart-log DEV -o json`` -> (clear?, detail)."""
    data = json.loads(text)
    warn = int(data.get("critical_warning", 0))
    spare, used = data.get("avail_spare"), data.get("percent_used")
    detail = f"critical_warning=0x{warn:02x} avail_spare={spare}% percent_used={used}%"
    return warn == 0, detail


def smartctl_health(text: str) -> tuple[bool, str]:
    """``smartctl -H -j DEV`` -> (passed?, detail)."""
    data = json.loads(text)
    passed = bool(data.get("smart_status", {}).get("passed", False))
    return passed, "SMART overall-health " + ("PASSED" if passed else "FAILED")


def smart_check(dut: DeclaredDut, run: Run = _run) -> HealthCheck | None:
    """NVMe smart-log or smartctl health for a block DUT whose tool is installed; None otherwise."""
    if dut.kind != "block" or os.path.basename(dut.path).startswith(("loop", "ram", "zram")):
        return None
    if "nvme" in os.path.basename(dut.path) and shutil.which("nvme"):
        cmd, judge = ["nvme", "smart-log", dut.path, "-o", "json"], nvme_critical_warning
    elif shutil.which("smartctl"):
        cmd, judge = ["smartctl", "-H", "-j", dut.path], smartctl_health
    else:
        return None
    try:
        proc = run(cmd)
        if os.geteuid() != 0 and proc.returncode & (0b110 if cmd[0] == "smartctl" else ~0):
            # an unprivileged agent: the SMART/admin passthrough needs root; not a failing device
            return HealthCheck(check="smart", target=dut.path, ok=True, detail="unknown (needs root)")
        ok, detail = judge(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        return HealthCheck(check="smart", target=dut.path, ok=False, detail=f"{' '.join(cmd)}: {e}")
    return HealthCheck(check="smart", target=dut.path, ok=ok, detail=detail)


def run_checks(host: str, state_dir: Path, fio_binary: str, duts: Sequence[DeclaredDut]) -> tuple[HealthCheck, ...]:
    """The quick checks (milliseconds), run with every heartbeat; SMART runs apart (:func:`smart_check`)."""
    checks = [self_test(host, state_dir, fio_binary)]
    for dut in duts:
        checks += device_checks(dut)
    return tuple(checks)
