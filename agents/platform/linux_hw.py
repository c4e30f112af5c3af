"""Linux platform facts a review lists beside its figures: DMI, CPU sockets, PCI storage controllers, block drivers.

Moved from ``agents.hwfacts`` into the Linux platform (:mod:`agents.platform.linux`);
same rules as :mod:`agents.platform.linux_sysfs`: read-only, from ``/sys`` and ``/proc`` under ``sys_root``; the
one command, ``lspci -mm -s SLOT`` (a controller's human name), runs only on the real root, only if lspci is
installed, with a timeout. Anything the host does not expose (a VM has no DMI, some DMI files are root-only)
is ``None`` so the reports show "unknown" rather than a guess.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
from typing import Any

from agents.platform.common import PLACEHOLDERS
from labcontract.facts import StorageController

__all__ = ["DMI_FIELDS", "block_driver", "cpu_sockets", "dmi_facts", "storage_controllers"]

DMI_DIR = "/sys/class/dmi/id"
DMI_FIELDS = ("sys_vendor", "product_name", "product_version", "board_vendor", "board_name",
              "bios_vendor", "bios_version", "bios_date")
# firmware placeholders that name nothing: shown as unknown, not as a vendor
_PLACEHOLDERS = PLACEHOLDERS
PCI_DIR = "/sys/bus/pci/devices"
PCI_SLOT = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
LSPCI_TIMEOUT = 5.0
MAX_CONTROLLERS = 256     # labcontract.facts.HostFacts bound
# PCI class 0x01 (mass storage) subclasses, as lspci names them
_SUBCLASS = {0x00: "SCSI", 0x01: "IDE", 0x02: "Floppy", 0x03: "IPI", 0x04: "RAID", 0x05: "ATA", 0x06: "SATA",
             0x07: "SAS", 0x08: "Non-Volatile memory", 0x09: "UFS", 0x80: "Mass storage"}
# block devices with no device/ directory: the kernel driver their name stands for
_VIRTUAL_DRIVERS = (("loop", "loop"), ("dm-", "device-mapper"), ("md", "md"), ("nbd", "nbd"), ("rbd", "rbd"))


def _under(sys_root: str, path: str) -> str:
    return os.path.join(sys_root, path.lstrip("/"))


def _attr(path: str) -> str | None:
    """A sysfs attribute, stripped; None if missing, unreadable (root-only DMI files) or empty."""
    try:
        with open(path, "rb") as f:
            text = f.read(4096).decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None
    text = text.strip().strip("\x00").strip()
    return text or None


def _link_name(path: str) -> str | None:
    """The basename of a symlink's target (a ``driver`` link), None if there is no link."""
    try:
        return os.path.basename(os.readlink(path)) or None
    except OSError:
        return None


def dmi_facts(sys_root: str = "/") -> dict[str, str | None]:
    """The DMI strings of :data:`DMI_FIELDS` (server vendor and model, board, BIOS); placeholders are None."""
    out: dict[str, str | None] = {}
    for key in DMI_FIELDS:
        value = _attr(_under(sys_root, f"{DMI_DIR}/{key}"))
        out[key] = None if value is None or value.lower() in _PLACEHOLDERS else value
    return out


def cpu_sockets(cpuinfo: str, sys_root: str = "/") -> int | None:
    """Distinct ``physical id`` values of /proc/cpuinfo, else of the sysfs CPU topology; None if neither says."""
    ids = set(re.findall(r"^physical id\s*:\s*(\S+)", cpuinfo, re.MULTILINE))
    if not ids:
        pattern = _under(sys_root, "/sys/devices/system/cpu/cpu[0-9]*/topology/physical_package_id")
        ids = {v for v in (_attr(p) for p in glob.glob(pattern)) if v is not None and v != "-1"}
    return len(ids) or None


def _lspci_name(slot: str, lspci: str) -> str | None:
    """``vendor device`` from ``lspci -mm -s SLOT`` (fields: slot, class, vendor, device, ...)."""
    try:
        proc = subprocess.run([lspci, "-mm", "-s", slot], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=LSPCI_TIMEOUT, check=False)
        words = shlex.split(proc.stdout.strip().splitlines()[0]) if proc.returncode == 0 and proc.stdout.strip() \
            else []
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    if len(words) < 4:
        return None
    return " ".join(w for w in words[2:4] if w) or None


def storage_controllers(sys_root: str = "/", *, lspci: str | None = "lspci") -> tuple[StorageController, ...]:
    """PCI functions of class 0x01xxxx with their bound driver; named by lspci on the real root only (a fake
    tree's slots are not this machine's)."""
    pci = _under(sys_root, PCI_DIR)
    try:
        slots = sorted(e for e in os.listdir(pci) if PCI_SLOT.match(e))
    except OSError:
        return ()
    tool = shutil.which(lspci) if lspci and os.path.abspath(sys_root) == "/" else None
    out = []
    for slot in slots:
        d = os.path.join(pci, slot)
        cls = _attr(os.path.join(d, "class")) or ""
        try:
            code = int(cls, 16)
        except ValueError:
            continue
        if code >> 16 != 0x01:
            continue
        sub, prog = (code >> 8) & 0xFF, code & 0xFF
        name = "NVM Express" if sub == 0x08 and prog == 0x02 else _SUBCLASS.get(sub, f"mass storage 0x{sub:02x}")
        out.append(StorageController(slot=slot, class_name=name, vendor_id=_attr(os.path.join(d, "vendor")),
                                     device_id=_attr(os.path.join(d, "device")),
                                     driver=_link_name(os.path.join(d, "driver")),
                                     name=_lspci_name(slot, tool) if tool else None))
        if len(out) == MAX_CONTROLLERS:
            break
    return tuple(out)


def _transport(driver: str | None, device_dir: str, real: str) -> str | None:
    """How the device is attached, when sysfs says so cheaply: NVMe's own ``transport`` attribute, the
    virtio bus, or the ATA / SAS / USB hop in the device's sysfs path."""
    if driver == "virtio_blk":
        return "virtio"
    nvme = _attr(os.path.join(device_dir, "transport"))
    if nvme is not None:
        return nvme                       # pcie, tcp, rdma, fc, loop
    parts = real.split(os.sep)
    if any(re.fullmatch(r"ata\d+", p) for p in parts):
        return "sata"
    if any(p.startswith(("end_device-", "sas_")) for p in parts):
        return "sas"
    if any(re.fullmatch(r"usb\d+", p) for p in parts):
        return "usb"
    return None


def block_driver(attr_dir: str, name: str) -> dict[str, Any]:
    """``driver``, ``transport`` and ``controller`` (PCI slot) of the block device whose disk-level sysfs
    directory is ``attr_dir``: the driver bound to ``device/`` (sd, virtio_blk) or to its parent (an NVMe
    namespace's ``device`` is the controller, the PCI function has the ``nvme`` driver); a device with no
    ``device/`` (loop, dm, md) is named by its driver."""
    device_dir = os.path.join(attr_dir, "device")
    if not os.path.isdir(device_dir):
        driver = next((drv for prefix, drv in _VIRTUAL_DRIVERS if name.startswith(prefix)), None)
        return {"driver": driver, "transport": None, "controller": None}
    driver = _link_name(os.path.join(device_dir, "driver")) or _link_name(os.path.join(device_dir, "device",
                                                                                       "driver"))
    real = os.path.realpath(device_dir)
    slots = [p for p in real.split(os.sep) if PCI_SLOT.match(p)]
    return {"driver": driver, "transport": _transport(driver, device_dir, real),
            "controller": slots[-1] if slots else None}
