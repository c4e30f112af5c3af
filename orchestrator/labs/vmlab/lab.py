"""A lab of virtual hosts on one machine: N VMs of the cached guest image on the namespace's segments, reached over
SSH with a key made for the lab, described to Ansible by an inventory.

Acceleration: KVM when it boots a kernel here, else TCG (software emulation). Nested KVM hangs at boot on some
machines (this project's CI is one), so :func:`choose_accel` boots the guest kernel once under KVM and takes
TCG when it has not started within the probe's time; the choice and its reason are kept in the cache and said
by every lab (``VmLab.accel``). Under TCG a VM boots to SSH in about a minute and its I/O figures are no
measure of anything: a TCG guest's IOPS are not a performance figure of the lab.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from labcontract.errors import ServiceError
from orchestrator.labs.vmlab.image import Image
from orchestrator.labs.vmlab.net import SEGMENTS, Network
from orchestrator.labs.vmlab.vm import CONNECT_TIMEOUT_S, SSH_OPTIONS, Nic, NvmeNamespace, Vm, VmSpec

log = logging.getLogger(__name__)

PROBE_S = 20.0            # KVM must have started the kernel by then
BOOT_S = 600.0            # a VM's boot to SSH, under TCG on a loaded 2-CPU machine
SEG = {s.name: s for s in SEGMENTS}


def mac(index: int, nic: int) -> str:
    return f"52:54:00:4c:{index:02x}:{nic:02x}"


def nic(index: int, n: int, segment: str) -> Nic:
    return Nic(segment=segment, address=SEG[segment].address(10 + index), mac=mac(index, n))


def controller_spec(index: int, name: str = "ctl") -> VmSpec:
    """The controller host: the broker, the controller, the web service, Prometheus."""
    return VmSpec(name=name, index=index, nics=(nic(index, 0, "mgmt"),), memory_mib=1024)


def agent_spec(index: int, name: str, *, namespaces: int = 2, namespace_bytes: int = 1 << 30,
               scsi_bytes: int = 512 << 20, rtc_offset_s: int = 0) -> VmSpec:
    """A DUT host: an NVMe controller with ``namespaces`` namespaces and a virtio-scsi disk."""
    return VmSpec(name=name, index=index, nics=(nic(index, 0, "mgmt"),),
                  nvme=tuple(NvmeNamespace(i + 1, namespace_bytes) for i in range(namespaces)),
                  scsi_bytes=scsi_bytes, memory_mib=1024, rtc_offset_s=rtc_offset_s)


def network_spec(index: int, name: str, *, scsi_bytes: int = 0) -> VmSpec:
    """A network-test host: the management NIC and one NIC on each data path (a, b)."""
    return VmSpec(name=name, index=index, nics=(nic(index, 0, "mgmt"), nic(index, 1, "a"), nic(index, 2, "b")),
                  scsi_bytes=scsi_bytes, memory_mib=1024)


def choose_accel(image: Image, cache: Path, *, timeout: float = PROBE_S) -> tuple[str, str]:
    """``("kvm" | "tcg", why)``: KVM when it starts the guest kernel within ``timeout``, kept per QEMU and kernel."""
    qemu = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    key = f"{qemu} {image.kernel.resolve()}"
    memo = cache / "accel.json"
    with contextlib.suppress(OSError, ValueError, KeyError):
        seen = json.loads(memo.read_text())
        if seen["key"] == key:
            return str(seen["accel"]), str(seen["why"])
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        accel, why = "tcg", "no usable /dev/kvm"
    else:
        accel, why = _probe_kvm(image, cache, timeout)
    memo.write_text(json.dumps({"key": key, "accel": accel, "why": why}))
    return accel, why


def _probe_kvm(image: Image, cache: Path, timeout: float) -> tuple[str, str]:
    console = cache / "kvm-probe.log"
    console.unlink(missing_ok=True)
    argv = ["qemu-system-x86_64", "-machine", "q35", "-accel", "kvm", "-cpu", "host", "-m", "256", "-display", "none",
            "-nodefaults", "-no-user-config", "-no-reboot", "-kernel", str(image.kernel),
            "-append", "console=ttyS0 panic=-1", "-serial", f"file:{console}"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    until = time.monotonic() + timeout
    booted = False
    while time.monotonic() < until and proc.poll() is None:
        with contextlib.suppress(OSError):
            booted = "Linux version" in console.read_text(errors="replace")
        if booted:
            break
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
    out = (proc.communicate()[0] or "").strip().splitlines()
    if booted:
        return "kvm", "KVM boots the guest kernel here"
    detail = out[-1] if out else f"no kernel output within {timeout:.0f}s"
    return "tcg", f"KVM did not boot the guest kernel ({detail}; nested virtualization): TCG"


@dataclass
class VmLab:
    """The VMs of ``specs`` on a network namespace of their own, their files under ``root``."""

    root: Path
    image: Image
    specs: Sequence[VmSpec]
    accel: str = "tcg"
    accel_why: str = ""
    name: str = field(default_factory=lambda: f"vmlab-{uuid.uuid4().hex[:6]}")
    net: Network = field(init=False)
    vms: dict[str, Vm] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.net = Network(self.name)
        self.key = self.root / "ssh" / "id_ed25519"

    def start(self, *, timeout: float = BOOT_S) -> dict[str, float]:
        """Make the network and the key, boot every VM at once and wait for each one's SSH: seconds per VM."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.key.parent.mkdir(mode=0o700, exist_ok=True)
        if not self.key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", self.name, "-f", str(self.key)],
                           check=True)
        self.net.create()
        hosts = [(s.name, s.address) for s in self.specs]
        for spec in self.specs:
            vm = Vm(spec, self.root / spec.name, self.image, self.net, self.key, accel=self.accel)
            vm.prepare(self.key.with_suffix(".pub").read_text(), hosts)
            self.vms[spec.name] = vm
        for vm in self.vms.values():
            vm.start()
        log.info("VM lab %s: %d VMs booting (%s: %s)", self.name, len(self.vms), self.accel, self.accel_why)
        with ThreadPoolExecutor(len(self.vms)) as pool:
            futures = {name: pool.submit(vm.wait_ssh, timeout) for name, vm in self.vms.items()}
            return {name: f.result() for name, f in futures.items()}

    def __getitem__(self, name: str) -> Vm:
        return self.vms[name]

    def reboot(self, name: str, *, timeout: float = BOOT_S) -> float:
        """A clean reboot from inside the guest; seconds until SSH answers again."""
        vm = self.vms[name]
        vm.ssh("systemctl reboot", check=False, timeout=30)
        vm.wait_gone(120)
        vm.started_at = time.monotonic()
        return vm.wait_ssh(timeout)

    def power_cycle(self, name: str, *, timeout: float = BOOT_S, wait: bool = True) -> float | None:
        """Power lost (QEMU killed) and restored: the same disks, a cold boot."""
        vm = self.vms[name]
        vm.kill()
        vm.start()
        return vm.wait_ssh(timeout) if wait else None

    def exec(self, argv: Sequence[str], *, timeout: float = 3600, env: Mapping[str, str] | None = None,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        """``argv`` run on this machine inside the lab's namespace (ansible-playbook, ssh...)."""
        res = subprocess.run(self.net.exec(argv), capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, **(env or {})})
        if check and res.returncode != 0:
            raise ServiceError(f"{' '.join(argv)[:200]} exited {res.returncode}: "
                               f"{(res.stdout + res.stderr).strip()[-2000:]}")
        return res

    def inventory(self, path: Path, groups: Mapping[str, Iterable[str]],
                  host_vars: Mapping[str, Mapping[str, Any]] | None = None,
                  group_vars: Mapping[str, Any] | None = None) -> Path:
        """An Ansible inventory of the VMs (root over SSH with the lab's key) in ``groups``."""
        # a polling ssh gives up after 30 s (a boot poll after 5 s) and tries again; a play's connection has one
        # chance: a TCG guest on a busy machine can take longer than Ansible's default 10 s to finish a handshake
        args = " ".join(SSH_OPTIONS).replace(f"ConnectTimeout={CONNECT_TIMEOUT_S}",
                                             f"ConnectTimeout={PLAY_CONNECT_TIMEOUT}")
        ssh = {"ansible_user": "root", "ansible_ssh_private_key_file": str(self.key),
               "ansible_ssh_common_args": args, "ansible_timeout": PLAY_CONNECT_TIMEOUT,
               "ansible_python_interpreter": "/usr/bin/python3"}
        hv = host_vars or {}
        children = {g: {"hosts": {h: {"ansible_host": self.vms[h].spec.address, **hv.get(h, {})} for h in members}}
                    for g, members in groups.items()}
        doc = {"all": {"vars": {**ssh, **(group_vars or {})}, "children": children}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def pause(self) -> None:
        """Every VM's CPUs stopped (QMP ``stop``): a lab not in use costs this machine nothing while another works.
        Its guests' clocks stand still too, so a controller there sees its agents late once resumed."""
        for vm in self.vms.values():
            if vm.alive():
                vm.qmp("stop")

    def resume(self) -> None:
        for vm in self.vms.values():
            if vm.alive():
                vm.qmp("cont")

    def stop(self) -> None:
        for vm in self.vms.values():
            vm.kill()
        self.net.delete()

    def cleanup(self) -> None:
        """Stop, and remove the VMs' disks (the cached image stays)."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


WHEELS = "/srv/storagelab/wheels"          # the image's wheelhouse (image.py): the guests have no route out
OFFLINE_VARS = {"lab_packages_update_cache": False,
                "lab_controller_pip_extra_args": f"--no-index --find-links {WHEELS}",
                "lab_agent_pip_extra_args": f"--no-index --find-links {WHEELS}",
                # a service's first start under TCG imports its Python in emulation: on a busy machine the web
                # service took over the role's default 60 s to answer (the wait ends as soon as it answers)
                "lab_service_ready_timeout": 600,
                # an agent beats every 3 s; a TCG guest just booted on a busy machine (the VM tier beside make test)
                # missed 10 s of them: its retried step was LOST again and the power-loss test's run failed
                "lab_controller_heartbeat_timeout": 30,
                # a network step's process imports its Python in emulation before the cell's common start: 1.5 s
                # was too short (its tools started 0.25-0.44 s late, the cell's skew over the 100 ms limit)
                "lab_controller_net_start_lead": 8}
# a play's connection (Mitogen's: the SSH handshake, then the guest's Python started and sent Mitogen's core) took over
# 60 s to a starved guest (a second site.yml beside make test: "Connection timed out", 2026-11-29)
PLAY_CONNECT_TIMEOUT = 180
NVME_MODEL = "QEMU NVMe Ctrl"              # QEMU 7.2 names every emulated controller so
SCSI_MODEL = "QEMU HARDDISK"


def nvme_by_id(serial: str, nsid: int) -> str:
    """The udev by-id link of namespace ``nsid`` of a QEMU NVMe controller of serial ``serial``."""
    return f"/dev/disk/by-id/nvme-{NVME_MODEL.replace(' ', '_')}_{serial}_{nsid}"


def scsi_by_id(serial: str) -> str:
    """The udev by-id link of a QEMU SCSI disk of serial ``serial``."""
    return f"/dev/disk/by-id/scsi-0QEMU_{SCSI_MODEL.replace(' ', '_')}_{serial}"


def site_inventory(lab: VmLab, path: Path, *, controller: str = "ctl",
                   group_vars: Mapping[str, Any] | None = None,
                   groups: Mapping[str, Iterable[str]] | None = None,
                   host_vars: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """The inventory site.yml deploys the lab with (docs/deployment.md): ``controller`` in group ``controller``,
    every other VM in ``agents`` with its NVMe namespaces declared as DUTs (``nvme0``, ``nvme1``... by their by-id
    paths, purge by Format NVM and OP by namespace allowed) and its SCSI disk (``scsi0``), the wheelhouse of the
    image instead of PyPI. A network host (a NIC on each data path) declares no DUT: its disk, if any, is the LUN it
    exports. ``groups`` and ``host_vars`` add to it (the network tests' ``targets``, ``initiators``, ``nics``)."""
    hv: dict[str, dict[str, Any]] = {
        controller: {"lab_controller_web_bind": lab[controller].spec.address,
                     "lab_controller_web_cookie_secure": False}}
    agents = [name for name in lab.vms if name != controller]
    for name in agents:
        spec = lab[name].spec
        duts = [{"name": f"nvme{ns.nsid - 1}", "path": nvme_by_id(spec.nvme_serial, ns.nsid),
                 "serial": spec.nvme_serial, "model": NVME_MODEL, "interface": "nvme",
                 "capacity_bytes": ns.size_bytes, "allow": ["purge", "op_mode"], "purge_methods": ["nvme_format"],
                 "op_methods": ["nvme_ns"]} for ns in spec.nvme]
        if spec.scsi_bytes and len(spec.nics) == 1:
            duts.append({"name": "scsi0", "path": scsi_by_id(spec.scsi_serial), "serial": spec.scsi_serial,
                         "model": SCSI_MODEL, "interface": "scsi", "capacity_bytes": spec.scsi_bytes,
                         "allow": ["purge"], "purge_methods": ["blkdiscard"]})
        hv[name] = {"duts": duts, "metrics_address": f"{spec.address}:9464",
                    **({"driver_module": "nvme"} if duts else {})}
    for name, extra in (host_vars or {}).items():
        hv[name] = {**hv.get(name, {}), **extra}
    all_groups = {"controller": [controller], "agents": agents, **{g: list(m) for g, m in (groups or {}).items()}}
    return lab.inventory(path, all_groups, hv, {**OFFLINE_VARS, **(group_vars or {})})


def data_nics(vm: Vm, peer: Vm, mtu: int) -> list[dict[str, Any]]:
    """A network host's data paths as the inventory declares them (``nics``: name, the interface the guest's kernel
    named, address, MTU, and the peer's address on the same path), asked of the guest itself."""
    doc = json.loads(vm.ssh("ip -j addr show").stdout)
    names = {f"{a['local']}/{a['prefixlen']}": link["ifname"] for link in doc for a in link.get("addr_info", [])}
    return [{"name": nic.segment, "iface": names[nic.address], "address": nic.address, "mtu": mtu,
             "peer": other.address.split("/")[0]}
            for nic, other in zip(vm.spec.nics[1:], peer.spec.nics[1:], strict=True)]


def lab_specs(n: int) -> list[VmSpec]:
    """``labctl lab up --vms N``: the controller host ``ctl`` and ``N - 1`` agent hosts ``nvme1``... each with an
    NVMe controller of two namespaces and a virtio-scsi disk."""
    return [controller_spec(0), *(agent_spec(i, f"nvme{i}") for i in range(1, n))]

