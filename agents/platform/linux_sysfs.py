"""Linux host facts and DUT identity from sysfs, procfs and ``/dev/disk/by-id`` (moved from :mod:`agents.facts`).

Everything here is read from ``/proc``, ``/sys``, ``/etc/os-release`` and the ``/dev/disk/by-id`` symlinks.
Nothing ever opens a block device: the only thing done to a device node is ``stat()``.

``sys_root`` (default ``/``) is prepended to every one of those paths so that tests can point the collectors
at a fake tree. Paths *reported* (``/dev/nvme0n1``, ``/dev/disk/by-id/...``) are always the paths as seen on
the host, never prefixed. :class:`agents.platform.linux.LinuxPlatform` is the one user.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Sequence

from agents.platform.linux_hw import block_driver
from labcontract.errors import ConfigError
from labcontract.facts import DUT_PATH, BlockDevice, DeclaredDut

__all__ = ["BY_ID_DIR", "declare_path", "list_block_devices", "os_pretty_name", "parse_cpuinfo",
           "parse_meminfo_total", "read_text", "under"]

BY_ID_DIR = "/dev/disk/by-id"
SECTOR_BYTES = 512                    # /sys/block/*/size is always in 512-byte sectors
_SKIPPED_PREFIXES = ("ram", "zram")   # RAM disks are never devices under test
_MAX_LINK_HOPS = 8
_DUT_SOURCE = "--dut"


# --------------------------------------------------------------------------- file helpers


def under(sys_root: str, path: str) -> str:
    """``path`` (absolute, as on the host) inside ``sys_root``."""
    return os.path.join(sys_root, path.lstrip("/"))


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except (OSError, ValueError):
        return None


def read_text(path: str) -> str | None:
    data = _read_bytes(path)
    return None if data is None else data.decode("utf-8", errors="replace")


def _read_attr(path: str) -> str | None:
    """A sysfs attribute, stripped of whitespace and NULs; ``None`` if missing or empty."""
    text = read_text(path)
    if text is None:
        return None
    text = text.strip().strip("\x00").strip()
    return text or None


def _read_int(path: str) -> int | None:
    text = _read_attr(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _first_attr(*paths: str) -> str | None:
    for path in paths:
        value = _read_attr(path)
        if value is not None:
            return value
    return None


# --------------------------------------------------------------------------- host facts


def parse_cpuinfo(text: str) -> tuple[str | None, int, int]:
    """``(model name, logical processors, physical cores)`` from /proc/cpuinfo text.

    Physical cores are the distinct ``(physical id, core id)`` pairs; 0 when the file does
    not say (some architectures and hypervisors omit them).
    """
    model: str | None = None
    processors = 0
    cores: set[tuple[str, str]] = set()
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip().lower(), value.strip())
        if fields.get("processor", "").isdigit():
            processors += 1
            if "core id" in fields:
                cores.add((fields.get("physical id", ""), fields["core id"]))
        if model is None and fields.get("model name"):
            model = fields["model name"]
    return model, processors, len(cores)


def parse_meminfo_total(text: str) -> int | None:
    match = re.search(r"^MemTotal:\s*(\d+)\s*(\w+)?", text, re.MULTILINE)
    if match is None:
        return None
    amount = int(match.group(1))
    unit = (match.group(2) or "").lower()
    return amount * 1024 if unit == "kb" else amount


def _parse_os_release(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            words = shlex.split(raw)
            value = " ".join(words)
        except ValueError:
            value = raw.strip().strip("\"'")
        values[key.strip()] = value
    return values


def os_pretty_name(sys_root: str) -> str | None:
    for candidate in ("/etc/os-release", "/usr/lib/os-release"):
        text = read_text(under(sys_root, candidate))
        if text is None:
            continue
        values = _parse_os_release(text)
        return values.get("PRETTY_NAME") or values.get("NAME") or None
    return None

# --------------------------------------------------------------------------- block devices


def _natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key putting ``loop2`` before ``loop10``."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part]


def _resolve_link(path: str, sys_root: str) -> str | None:
    """Where the host symlink ``path`` leads, resolved on the host's path space.

    Links are read inside ``sys_root`` but resolved against the host path (so a by-id
    link ``../../nvme0n1`` gives ``/dev/nvme0n1``, even in a fake tree where that node
    does not exist). ``None`` if ``path`` is not a symlink or loops.
    """
    current = path
    for hops in range(_MAX_LINK_HOPS + 1):
        real = under(sys_root, current)
        if not os.path.islink(real):
            return current if hops else None
        try:
            target = os.readlink(real)
        except OSError:
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    return None


def _by_id_index(sys_root: str) -> dict[str, list[str]]:
    """Resolved device path -> sorted ``/dev/disk/by-id/*`` links pointing at it."""
    try:
        entries = os.listdir(under(sys_root, BY_ID_DIR))
    except OSError:
        return {}
    index: dict[str, list[str]] = {}
    for entry in sorted(entries):
        link = f"{BY_ID_DIR}/{entry}"
        target = _resolve_link(link, sys_root)
        if target is not None:
            index.setdefault(target, []).append(link)
    return index


def _vpd_pg80_serial(path: str) -> str | None:
    """The unit serial number from a SCSI VPD page 0x80 dump (sysfs ``vpd_pg80``)."""
    data = _read_bytes(path)
    if data is None or len(data) < 4 or data[1] != 0x80:
        return None
    length = int.from_bytes(data[2:4], "big")
    serial = data[4 : 4 + length].decode("ascii", errors="replace").strip().strip("\x00").strip()
    return serial or None


def _block_device(
    name: str, sysdir: str, by_id: dict[str, list[str]], *, kind: str, attr_dir: str | None = None
) -> BlockDevice:
    """A :class:`BlockDevice` from its sysfs directory.

    ``attr_dir`` is where the disk-level attributes live (queue/, device/, wwid): the
    device's own directory for a whole disk, its parent disk's for a partition.
    """
    adir = attr_dir or sysdir
    dev_path = "/dev/" + name.replace("!", "/")   # cciss!c0d0 -> /dev/cciss/c0d0
    rotational = _read_attr(os.path.join(adir, "queue", "rotational"))
    return BlockDevice(
        name=name,
        path=dev_path,
        size_bytes=(_read_int(os.path.join(sysdir, "size")) or 0) * SECTOR_BYTES,
        rotational={"0": False, "1": True}.get(rotational or ""),
        model=_read_attr(os.path.join(adir, "device", "model")),
        serial=(
            _first_attr(os.path.join(adir, "device", "serial"), os.path.join(adir, "serial"))
            or _vpd_pg80_serial(os.path.join(adir, "device", "vpd_pg80"))
        ),
        firmware=_first_attr(
            os.path.join(adir, "device", "firmware_rev"), os.path.join(adir, "device", "rev")
        ),
        wwn=_first_attr(os.path.join(adir, "wwid"), os.path.join(adir, "device", "wwid")),
        by_id=tuple(sorted(by_id.get(dev_path, ()))),
        kind=kind,
        backing_file=_read_attr(os.path.join(sysdir, "loop", "backing_file")) if kind == "loop" else None,
        logical_block_size=_read_int(os.path.join(adir, "queue", "logical_block_size")),
        physical_block_size=_read_int(os.path.join(adir, "queue", "physical_block_size")),
        **block_driver(adir, name),
    )


def list_block_devices(sys_root: str = "/") -> tuple[BlockDevice, ...]:
    """Whole block devices from ``/sys/block``, in natural name order.

    RAM disks (``ram*``, ``zram*``) and loop devices with no backing file (unattached)
    are left out.
    """
    block_dir = under(sys_root, "/sys/block")
    try:
        names = os.listdir(block_dir)
    except OSError:
        return ()
    by_id = _by_id_index(sys_root)
    devices: list[BlockDevice] = []
    for name in sorted(names, key=_natural_key):
        if name.startswith(_SKIPPED_PREFIXES):
            continue
        kind = "loop" if name.startswith("loop") else "disk"
        device = _block_device(name, os.path.join(block_dir, name), by_id, kind=kind)
        if kind == "loop" and device.backing_file is None:
            continue
        devices.append(device)
    return tuple(devices)



def _sysfs_device_for(st: os.stat_result, sys_root: str, by_id: dict[str, list[str]]) -> BlockDevice | None:
    """The block device with ``st``'s device number, read via ``/sys/dev/block/MAJ:MIN``."""
    major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    link = under(sys_root, f"/sys/dev/block/{major}:{minor}")
    if not os.path.isdir(link):
        return None
    sysdir = os.path.realpath(link)
    name = os.path.basename(sysdir)
    uevent = read_text(os.path.join(sysdir, "uevent")) or ""
    match = re.search(r"^DEVNAME=(\S+)$", uevent, re.MULTILINE)
    if match:
        name = match.group(1).replace("/", "!")
    if os.path.exists(os.path.join(sysdir, "partition")):
        return _block_device(name, sysdir, by_id, kind="part", attr_dir=os.path.dirname(sysdir))
    kind = "loop" if name.startswith("loop") else "disk"
    return _block_device(name, sysdir, by_id, kind=kind)


def _dut_error(spec: str, message: str) -> ConfigError:
    return ConfigError(source=_DUT_SOURCE, key=spec, message=message)


def declare_path(spec: str, name: str, path: str, devices: Sequence[BlockDevice], *,
                 sys_root: str = "/") -> DeclaredDut:
    """A device under test named ``name`` at ``path`` (``spec`` is the ``--dut`` value errors name).

    PATH is a block device (``/dev/sdb``, or a ``/dev/disk/by-id`` link, resolved) or a regular file (a
    file-backed DUT). Block-device details come from the matching entry of ``devices`` (see
    :func:`list_block_devices`) or, failing that, from sysfs. ``sys_root`` applies to the sysfs and by-id
    lookups only; PATH itself is the real path. Raises :class:`ConfigError` (source ``--dut``) for anything that
    is not a usable non-empty block device or regular file.
    """
    given = os.path.abspath(os.path.expanduser(path))
    try:
        st = os.stat(given)
    except FileNotFoundError:
        if os.path.islink(given):
            raise _dut_error(
                spec, f"{given} is a dangling symlink (-> {os.readlink(given)})"
            ) from None
        raise _dut_error(spec, f"{given} does not exist") from None
    except OSError as exc:
        raise _dut_error(spec, f"cannot stat {given}: {exc.strerror or exc}") from None
    resolved = os.path.realpath(given)
    shown = given if resolved == given else f"{given} (-> {resolved})"
    if not re.fullmatch(DUT_PATH[1:-1], resolved):
        raise _dut_error(spec, f"{shown}: a DUT path holds only letters, digits and / _ . : + @ , - "
                               "(fio's job file and the start message take no other)")

    if stat.S_ISDIR(st.st_mode):
        raise _dut_error(
            spec, f"{shown} is a directory; a DUT is a block device or a regular file"
        )
    if stat.S_ISCHR(st.st_mode):
        hint = ""
        if re.fullmatch(r"/dev/nvme\d+", resolved):
            hint = f" ({resolved} is an NVMe controller; declare a namespace such as {resolved}n1)"
        elif re.fullmatch(r"/dev/(sg|bsg/)\S+", resolved):
            hint = " (a SCSI generic node; declare the /dev/sd* block device instead)"
        raise _dut_error(spec, f"{shown} is a character device, not a block device{hint}")
    if stat.S_ISREG(st.st_mode):
        if st.st_size == 0:
            raise _dut_error(
                spec,
                f"{shown} is an empty file; a file-backed DUT must be preallocated "
                "(e.g. truncate -s 4G or fallocate -l 4G)",
            )
        return DeclaredDut(name=name, path=resolved, kind="file", size_bytes=st.st_size)
    if not stat.S_ISBLK(st.st_mode):
        raise _dut_error(spec, f"{shown} is neither a block device nor a regular file")

    device = next(
        (d for d in devices if d.path == resolved or os.path.realpath(d.path) == resolved), None
    )
    if device is None:
        device = _sysfs_device_for(st, sys_root, _by_id_index(sys_root))
    if device is None:
        raise _dut_error(
            spec,
            f"{shown} is a block device but its size is unknown "
            f"(no sysfs entry for {os.major(st.st_rdev)}:{os.minor(st.st_rdev)})",
        )
    if device.size_bytes <= 0:
        raise _dut_error(
            spec, f"{shown} has size 0 (an unattached loop device, or no medium present)"
        )
    if given.startswith(BY_ID_DIR + "/"):
        by_id: str | None = given
    else:
        by_id = device.by_id[0] if device.by_id else None
    return DeclaredDut(
        name=name,
        path=resolved,
        kind="block",
        size_bytes=device.size_bytes,
        model=device.model,
        serial=device.serial,
        firmware=device.firmware,
        by_id=by_id,
    )
