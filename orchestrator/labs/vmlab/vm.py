"""One VM of the lab: its hardware (NICs, an emulated NVMe controller with namespaces, a virtio-scsi disk), its QEMU
process (in the lab's network namespace), its QMP monitor and its SSH.

The hardware a storage lab cares about, emulated by QEMU:

- an NVMe controller (``-device nvme``) with its own serial, in an NVMe subsystem, with one ``nvme-ns`` device per
  namespace (a sparse file each, kept across reboots and power losses); QEMU 7.2 names every controller's model
  "QEMU NVMe Ctrl" and its firmware after QEMU's version (docs/vmlab.md lists what else it does and does not do);
- a virtio-scsi disk with UNMAP (``discard=unmap``), with its own serial;
- NICs on the lab's segments (virtio-net), each with its own MAC and address, given to the guest through
  ``fw_cfg`` (guest/vmlab-config applies them at boot).

Power loss is a SIGKILL of QEMU (:meth:`Vm.kill`); a drive pulled is a QMP ``device_del`` of the NVMe controller
(:meth:`Vm.qmp`); a clock that is off is the RTC's base (``rtc_offset_s``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from labcontract.errors import ServiceError
from orchestrator.labs.vmlab.image import Image
from orchestrator.labs.vmlab.net import Network

CONNECT_TIMEOUT_S = 30        # a starved TCG guest can take this long to send its SSH banner
SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
               "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-o", "ServerAliveInterval=10",
               "-o", "ServerAliveCountMax=6")
# ssh's own messages (exit 255) for a connection that failed before any command reached the guest
CONNECT_FAILURES = ("during banner exchange", "kex_exchange_identification", "port 22: Connection timed out")


@dataclass(frozen=True)
class Nic:
    segment: str             # net.SEGMENTS' name: mgmt, a, b
    address: str             # with its prefix: 10.80.0.11/24
    mac: str
    mtu: int = 1500


@dataclass(frozen=True)
class NvmeNamespace:
    nsid: int
    size_bytes: int


@dataclass(frozen=True)
class VmSpec:
    """What a VM is: its name, NICs (the first on ``mgmt``), disks and clock."""

    name: str
    index: int                                  # its number in the lab: MACs, taps and addresses derive from it
    nics: tuple[Nic, ...]
    nvme: tuple[NvmeNamespace, ...] = ()        # one controller with these namespaces (none: no controller)
    scsi_bytes: int = 0                         # a virtio-scsi disk of this size (0: none)
    memory_mib: int = 1024
    rtc_offset_s: int = 0                       # the guest's clock this far from the host's at boot

    @property
    def address(self) -> str:
        """The management address (SSH, the broker)."""
        return self.nics[0].address.split("/")[0]

    @property
    def nvme_serial(self) -> str:
        return f"VMLAB{self.index:02d}NVME"

    @property
    def scsi_serial(self) -> str:
        return f"VMLAB{self.index:02d}SCSI"

    def tap(self, i: int) -> str:
        return f"vm{self.index}n{i}"


@dataclass
class Vm:
    spec: VmSpec
    dir: Path
    image: Image
    net: Network
    key: Path                                   # the lab's SSH private key
    accel: str = "tcg"
    cpu: str = "max"                            # the CPU model under TCG
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    boots: list[float] = field(default_factory=list)    # seconds from start to SSH, per boot

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def console(self) -> Path:
        return self.dir / "console.log"

    @property
    def qmp_socket(self) -> Path:
        return self.dir / "qmp.sock"

    def prepare(self, authorized_key: str, hosts: Sequence[tuple[str, str]]) -> None:
        """The VM's disks (made once: kept across reboots and power losses) and its fw_cfg identity."""
        self.dir.mkdir(parents=True, exist_ok=True)
        overlay = self.dir / "root.qcow2"
        if not overlay.exists():
            res = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(self.image.root), "-F", "raw",
                                  str(overlay)], capture_output=True, text=True)
            if res.returncode != 0:
                raise ServiceError(f"qemu-img create for {self.name}: {res.stderr.strip()}")
        for ns in self.spec.nvme:
            self._sparse(self.dir / f"nvme-ns{ns.nsid}.img", ns.size_bytes)
        if self.spec.scsi_bytes:
            self._sparse(self.dir / "scsi0.img", self.spec.scsi_bytes)
        cfg = self.dir / "fw_cfg"
        cfg.mkdir(exist_ok=True)
        (cfg / "hostname").write_text(self.name + "\n")
        lines = ["127.0.0.1 localhost", f"127.0.1.1 {self.name}", *(f"{a} {n}" for n, a in hosts)]
        (cfg / "hosts").write_text("\n".join(lines) + "\n")
        (cfg / "authorized_keys").write_text(authorized_key.strip() + "\n")
        for i, nic in enumerate(self.spec.nics):
            (cfg / f"network{i}").write_text(
                f"[Match]\nMACAddress={nic.mac}\n\n[Link]\nMTUBytes={nic.mtu}\n\n[Network]\nAddress={nic.address}\n"
                "LinkLocalAddressing=no\nIPv6AcceptRA=no\n")

    @staticmethod
    def _sparse(path: Path, size: int) -> None:
        if not path.exists():
            with path.open("wb") as fh:
                fh.truncate(size)

    def argv(self) -> list[str]:
        s, d = self.spec, self.dir
        accel = ["-accel", "kvm", "-cpu", "host"] if self.accel == "kvm" else ["-accel", "tcg,tb-size=256",
                                                                              "-cpu", self.cpu]
        argv = ["qemu-system-x86_64", "-name", s.name, "-machine", "q35", *accel, "-smp", "1", "-m", str(s.memory_mib),
                "-display", "none", "-nodefaults", "-no-user-config",
                "-kernel", str(self.image.kernel), "-initrd", str(self.image.initrd),
                "-append", "console=ttyS0 root=/dev/vda rw quiet systemd.show_status=0",
                "-drive", f"file={d / 'root.qcow2'},if=virtio,format=qcow2,discard=unmap",
                "-serial", f"file:{self.console}", "-qmp", f"unix:{self.qmp_socket},server=on,wait=off",
                "-rtc", "base=" + datetime.fromtimestamp(time.time() + s.rtc_offset_s, UTC).strftime(
                    "%Y-%m-%dT%H:%M:%S") + ",clock=host"]
        for i, nic in enumerate(s.nics):
            argv += ["-netdev", f"tap,id=net{i},ifname={s.tap(i)},script=no,downscript=no",
                     "-device", f"virtio-net-pci,netdev=net{i},mac={nic.mac}"]
        for entry in sorted((d / "fw_cfg").iterdir()):
            argv += ["-fw_cfg", f"name=opt/storagelab/{entry.name},file={entry}"]
        if s.nvme:
            # behind a PCIe root port, so that the controller can be pulled (QMP device_del nvme0): a bus of
            # nvme-ns devices does not hot-unplug in QEMU 7.2
            argv += ["-device", "pcie-root-port,id=rp0,chassis=1,slot=1",
                     "-device", f"nvme-subsys,id=subsys0,nqn=nqn.2026-11.lab.storage:{s.name}",
                     "-device", f"nvme,id=nvme0,serial={s.nvme_serial},subsys=subsys0,bus=rp0"]
            for ns in s.nvme:
                argv += ["-drive", f"file={d / f'nvme-ns{ns.nsid}.img'},if=none,id=nsdrv{ns.nsid},format=raw,"
                                   "discard=unmap",
                         "-device", f"nvme-ns,id=ns{ns.nsid},drive=nsdrv{ns.nsid},nsid={ns.nsid},bus=nvme0"]
        if s.scsi_bytes:
            argv += ["-device", "virtio-scsi-pci,id=scsi0",
                     "-drive", f"file={d / 'scsi0.img'},if=none,id=sd0,format=raw,discard=unmap",
                     "-device", f"scsi-hd,drive=sd0,bus=scsi0.0,serial={s.scsi_serial}"]
        return argv

    def start(self) -> None:
        """Boot (again): QEMU in the lab's namespace; its taps made there on the first boot."""
        if self.popen is not None and self.popen.poll() is None:
            raise ServiceError(f"VM {self.name} is already running")
        for i, nic in enumerate(self.spec.nics):
            if self.spec.tap(i) not in self.net.taps:
                self.net.add_tap(self.spec.tap(i), nic.segment)
        with contextlib.suppress(FileNotFoundError):
            self.qmp_socket.unlink()
        log = (self.dir / "qemu.log").open("ab")
        self.popen = subprocess.Popen(self.net.exec(self.argv()), stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """Power loss: QEMU killed, nothing flushed or shut down in the guest."""
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=30)

    def stop(self, timeout: float = 60) -> None:
        """A clean power-off (ACPI), then power loss if the guest does not go in ``timeout``."""
        if not self.alive():
            return
        with contextlib.suppress(OSError, ServiceError):
            self.qmp("system_powerdown")
        assert self.popen is not None
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    # --- SSH -----------------------------------------------------------------------------------------------------

    def ssh_argv(self, command: str, *, connect_timeout: int | None = None) -> list[str]:
        options = list(SSH_OPTIONS)
        if connect_timeout is not None:
            options[options.index(f"ConnectTimeout={CONNECT_TIMEOUT_S}")] = f"ConnectTimeout={connect_timeout}"
        return self.net.exec(["ssh", "-i", str(self.key), *options, f"root@{self.spec.address}", command])

    def ssh(self, command: str, *, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``command`` (a shell line) run as root on the VM. A connection that failed before the command was sent
        (a TCG guest starved of CPU answers its banner late) is tried again, up to three times: the command never
        ran, so running it then is running it once."""
        for _ in range(3):
            res = subprocess.run(self.ssh_argv(command), capture_output=True, text=True, timeout=timeout)
            if res.returncode != 255 or not any(m in res.stderr for m in CONNECT_FAILURES):
                break
        if check and res.returncode != 0:
            raise ServiceError(f"{self.name}: {command[:200]!r} exited {res.returncode}: "
                               f"{(res.stderr or res.stdout).strip()[-800:]}")
        return res

    def sync_clock(self, *, timeout: float = 60) -> float:
        """Set the guest's clock to this machine's (the guests have no route to a time server): the guest waits on
        its SSH channel, this side writes its time the moment the guest says it is ready, the guest sets it. Good to
        the channel's one-way delay (milliseconds), where a boot from the RTC is good to a second. Returns the
        correction applied, in seconds."""
        script = ("import sys, time\nprint('ready', flush=True)\nt = float(sys.stdin.readline())\n"
                  "before = time.time()\ntime.clock_settime(time.CLOCK_REALTIME, t)\nprint(t - before, flush=True)\n")
        proc = subprocess.Popen(self.ssh_argv(f"python3 -c {shlex.quote(script)}"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            if proc.stdout.readline().strip() != "ready":
                raise ServiceError(f"{self.name}: the clock could not be set: {proc.communicate(timeout=10)[1][-400:]}")
            proc.stdin.write(f"{time.time():.6f}\n")
            proc.stdin.flush()
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        if proc.returncode != 0:
            raise ServiceError(f"{self.name}: the clock could not be set: {err.strip()[-400:]}")
        return float(out.strip())

    def answers(self) -> bool:
        try:
            # one short try: a guest still booting answers no SYN, and the boot is timed to this poll
            return subprocess.run(self.ssh_argv("true", connect_timeout=5), capture_output=True,
                                  timeout=20).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def wait_ssh(self, timeout: float) -> float:
        """Seconds from the start of this boot until SSH answers (ServiceError past ``timeout``, or when QEMU
        exits)."""
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if not self.alive():
                raise ServiceError(f"VM {self.name}: QEMU exited ({self.popen.returncode if self.popen else '-'}); "
                                   f"{self.tail()}")
            if self.answers():
                took = time.monotonic() - self.started_at
                self.boots.append(took)
                return took
            time.sleep(1)
        raise ServiceError(f"VM {self.name}: no SSH after {timeout:.0f}s; console: {self.tail()}")

    def tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.console.read_text(errors="replace").splitlines()[-lines:])
        return "(no console output)"

    def wait_gone(self, timeout: float) -> None:
        """Until SSH no longer answers (a reboot under way)."""
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if not self.answers():
                return
            time.sleep(1)
        raise ServiceError(f"VM {self.name} still answers after {timeout:.0f}s")

    # --- QMP -----------------------------------------------------------------------------------------------------

    def qmp(self, command: str, **arguments: Any) -> Any:
        """One QMP command on the VM's monitor; its ``return``, or ServiceError with QEMU's error."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(str(self.qmp_socket))
            stream = sock.makefile("rwb")
            _read_reply(stream)                               # the greeting
            for cmd in ({"execute": "qmp_capabilities"}, {"execute": command, "arguments": arguments}):
                stream.write(json.dumps(cmd).encode() + b"\n")
                stream.flush()
                reply = _read_reply(stream)
                if "error" in reply:
                    raise ServiceError(f"QMP {cmd['execute']} on {self.name}: {reply['error'].get('desc')}")
            return reply.get("return")

    def describe(self) -> str:
        return shlex.join(self.argv())


def _read_reply(stream: Any) -> dict[str, Any]:
    """The next line that is not an asynchronous event."""
    while True:
        line = stream.readline()
        if not line:
            raise ServiceError("QMP: the monitor closed the connection")
        msg: dict[str, Any] = json.loads(line)
        if "event" not in msg:
            return msg
