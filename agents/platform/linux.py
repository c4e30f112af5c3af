"""The Linux platform: sysfs/procfs facts and device identity, a ``sh`` wrapper in a session of its own for a
step's process, ``/proc/PID/stat`` start ticks to re-adopt it, process-group signals, ``nvme`` / ``smartctl``
health. The sysfs readers are :mod:`agents.platform.linux_sysfs` and :mod:`agents.platform.linux_hw`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from agents.platform.base import Run, run_command
from agents.platform.common import device_checks, fio_version
from agents.platform.linux_hw import cpu_sockets, dmi_facts, storage_controllers
from agents.platform.linux_sysfs import (
    declare_path,
    list_block_devices,
    os_pretty_name,
    parse_cpuinfo,
    parse_meminfo_total,
    read_text,
    under,
)
from labcontract import interlock
from labcontract.engines import LINUX_IOENGINES, engine_for
from labcontract.facts import BlockDevice, DeclaredDut, HostFacts
from labcontract.protocol import HealthCheck

__all__ = ["WRAPPER", "LinuxPlatform", "nvme_critical_warning", "proc_start_ticks", "smartctl_health"]

# the step's process runs under this shell so that its exit code is recorded even when the agent is away
# (and reads the host's CPU counters just before and just after it: labcontract.hostcpu)
WRAPPER = ('grep "^cpu" /proc/stat >host-cpu.start 2>/dev/null; "$@" >fio.stdout 2>fio.stderr; echo $? >rc.tmp; '
           'grep "^cpu" /proc/stat >host-cpu.end 2>/dev/null; mv rc.tmp rc')
def proc_start_ticks(pid: int) -> int | None:
    """Start time of a process (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


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


@dataclass(frozen=True)
class LinuxPlatform:
    """The Linux agent platform. ``sys_root`` points the sysfs/procfs readers at a fake tree (tests);
    ``lspci`` names controllers (None: not at all); ``run`` runs the SMART tools."""

    sys_root: str = "/"
    lspci: str | None = "lspci"
    run: Run = run_command
    name: str = field(default="linux", init=False)
    default_ioengine: str = field(default="libaio", init=False)
    ioengines: frozenset[str] = field(default=LINUX_IOENGINES, init=False)

    def with_run(self, run: Run) -> LinuxPlatform:
        return replace(self, run=run)

    # ------------------------------------------------------------------ facts and devices
    def host_facts(self, *, hostname: str | None = None, fio_binary: str = "fio") -> HostFacts:
        """CPU, memory, kernel, OS, fio, block devices, and the platform a review lists (DMI server/board/BIOS,
        sockets, PCI storage controllers: :mod:`agents.platform.linux_hw`)."""
        cpuinfo = read_text(under(self.sys_root, "/proc/cpuinfo")) or ""
        cpu_model, processors, cores = parse_cpuinfo(cpuinfo)
        threads = processors or os.cpu_count()
        meminfo = read_text(under(self.sys_root, "/proc/meminfo"))
        return HostFacts(
            hostname=hostname if hostname is not None else socket.gethostname(),
            cpu_model=cpu_model,
            cpu_threads=threads,
            cpu_cores=cores or threads,
            memory_bytes=parse_meminfo_total(meminfo) if meminfo is not None else None,
            kernel=os.uname().release,
            os=os_pretty_name(self.sys_root),
            os_family=self.name,
            fio_version=fio_version(fio_binary),
            block_devices=self.block_devices(),
            cpu_sockets=cpu_sockets(cpuinfo, self.sys_root),
            storage_controllers=storage_controllers(self.sys_root, lspci=self.lspci),
            **dmi_facts(self.sys_root),
        )

    def block_devices(self) -> tuple[BlockDevice, ...]:
        return list_block_devices(self.sys_root)

    def declare_dut(self, name: str, path: str, devices: Sequence[BlockDevice], *,
                    spec: str | None = None) -> DeclaredDut:
        return declare_path(spec or path, name, path, devices, sys_root=self.sys_root)

    def fio_filename(self, path: str) -> str:
        """fio separates several files with ':', so a colon in a path is escaped (fio HOWTO, ``filename``)."""
        return path.replace(":", "\\:")

    def fio_engine(self, declared: str) -> str:
        """The declared engine as is, if Linux fio has it (``windowsaio`` is refused: a Windows engine)."""
        return engine_for(self.name, declared)

    def observe_dut(self, path: str) -> interlock.ObservedState:
        """:func:`labcontract.interlock.observe` (mountinfo, sysfs, wipefs / blkid, lsblk), unchanged."""
        return interlock.observe(path)

    # ------------------------------------------------------------------ process supervision
    def start_detached(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """``argv`` under the ``sh`` wrapper (:data:`WRAPPER`) in a session of its own: an agent restart leaves
        it running, and the wrapper records its exit code in ``rc``."""
        return subprocess.Popen(
            ["/bin/sh", "-c", WRAPPER, "lab-step", *argv],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True, env=dict(env),
        )

    def start_token(self, pid: int) -> int | None:
        return proc_start_ticks(pid)

    def alive(self, pid: int, token: object) -> bool:
        return token is not None and proc_start_ticks(pid) == token

    def _signal_group(self, pgid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)

    def terminate(self, pid: int, token: object) -> None:
        """SIGTERM to the process group (the wrapper's session: the wrapper and fio)."""
        self._signal_group(pid, signal.SIGTERM)

    def kill(self, pid: int, token: object) -> None:
        self._signal_group(pid, signal.SIGKILL)

    def boot_id(self) -> str:
        try:
            return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            return ""

    # ------------------------------------------------------------------ health
    def device_checks(self, dut: DeclaredDut) -> list[HealthCheck]:
        return device_checks(self, dut)

    def smart_check(self, dut: DeclaredDut) -> HealthCheck | None:
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
            proc = self.run(cmd)
            if os.geteuid() != 0 and proc.returncode & (0b110 if cmd[0] == "smartctl" else ~0):
                # an unprivileged agent: the SMART/admin passthrough needs root; not a failing device
                return HealthCheck(check="smart", target=dut.path, ok=True, detail="unknown (needs root)")
            ok, detail = judge(proc.stdout)
        except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError, TypeError) as e:
            return HealthCheck(check="smart", target=dut.path, ok=False, detail=f"{' '.join(cmd)}: {e}")
        return HealthCheck(check="smart", target=dut.path, ok=ok, detail=detail)
