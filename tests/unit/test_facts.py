"""agents.facts: host facts, block devices from a fake sysfs tree, and --dut declarations.

Nothing here creates loop devices or opens a block device: the only real device nodes
touched are ``stat()``-ed.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from agents.facts import collect_host_facts, declare_dut, fio_version, list_block_devices
from labcontract.errors import ConfigError
from labcontract.facts import BlockDevice, HostFacts, StorageController

# --------------------------------------------------------------------------- fake tree

NVME_MODEL = "Samsung SSD 980 PRO 1TB"
NVME_SERIAL = "S5GXNF0R123456"
SATA_MODEL = "ST4000NM0035-1V4"
SATA_SERIAL = "ZC1ABCDE"

CPUINFO_BLOCK = """processor\t: {n}
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz
physical id\t: {phys}
siblings\t: 4
core id\t\t: {core}
cpu cores\t: 2
flags\t\t: fpu vme de pse
"""


def _write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def _link(link: Path, target: str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def _vpd_pg80(serial: str) -> bytes:
    data = f"{serial:>20}".encode()
    return bytes([0x00, 0x80]) + len(data).to_bytes(2, "big") + data


@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    block = root / "sys" / "block"

    # NVMe namespace: attributes as the kernel pads them.
    nvme = block / "nvme0n1"
    _write(nvme / "size", "1953525168\n")
    _write(nvme / "queue" / "rotational", "0\n")
    _write(nvme / "queue" / "logical_block_size", "4096\n")     # the namespace's LBA format in use
    _write(nvme / "queue" / "physical_block_size", "4096\n")
    _write(nvme / "wwid", "eui.002538b111b22c33\n")
    _write(nvme / "device" / "model", NVME_MODEL + " " * 17 + "\n")
    _write(nvme / "device" / "serial", NVME_SERIAL + "      \n")
    _write(nvme / "device" / "firmware_rev", "5B2QGXA7\n")

    # SATA disk behind libata/SCSI: rev instead of firmware_rev, serial only in VPD 0x80.
    sda = block / "sda"
    _write(sda / "size", "7814037168\n")
    _write(sda / "queue" / "rotational", "1\n")
    _write(sda / "device" / "model", SATA_MODEL + "\n")
    _write(sda / "device" / "rev", "TN05\n")
    _write(sda / "device" / "wwid", "naa.5000c500a1b2c3d4\n")
    _write(sda / "device" / "vpd_pg80", _vpd_pg80(SATA_SERIAL))

    # Unattached loop device (no loop/ dir, size 0): skipped.
    _write(block / "loop0" / "size", "0\n")
    _write(block / "loop0" / "queue" / "rotational", "1\n")
    # Attached loop device: listed, with its backing file.
    _write(block / "loop10" / "size", "2097152\n")
    _write(block / "loop10" / "queue" / "rotational", "1\n")
    _write(block / "loop10" / "loop" / "backing_file", "/var/lib/lab/dut.img\n")
    # RAM disks: skipped.
    _write(block / "ram0" / "size", "131072\n")
    _write(block / "zram0" / "size", "8388608\n")

    by_id = root / "dev" / "disk" / "by-id"
    _link(by_id / f"nvme-{NVME_MODEL.replace(' ', '_')}_{NVME_SERIAL}", "../../nvme0n1")
    _link(by_id / "nvme-eui.002538b111b22c33", "../../nvme0n1")
    _link(by_id / f"nvme-{NVME_MODEL.replace(' ', '_')}_{NVME_SERIAL}-part1", "../../nvme0n1p1")
    _link(by_id / f"ata-{SATA_MODEL}_{SATA_SERIAL}", "../../sda")
    _link(by_id / "wwn-0x5000c500a1b2c3d4", "/dev/sda")       # absolute target
    _link(by_id / "wwn-0x5000c500a1b2c3d4-part1", "../../sda1")

    cpus = [(0, 0), (0, 0), (0, 1), (0, 1), (1, 0), (1, 0), (1, 1), (1, 1)]   # 2 sockets x 2 cores x HT
    _write(
        root / "proc" / "cpuinfo",
        "\n".join(CPUINFO_BLOCK.format(n=n, phys=p, core=c) for n, (p, c) in enumerate(cpus)),
    )
    _write(
        root / "proc" / "meminfo",
        "MemTotal:       16310748 kB\nMemFree:         1234567 kB\nMemAvailable:    9876543 kB\n",
    )
    _write(
        root / "etc" / "os-release",
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
        "ID=debian\n",
    )
    return root


def _fake_fio(tmp_path: Path, output: str, rc: int = 0) -> str:
    script = tmp_path / "fake-fio"
    script.write_text(f"#!/bin/sh\nprintf '{output}'\nexit {rc}\n")
    script.chmod(0o755)
    return str(script)


# --------------------------------------------------------------------------- real machine


def test_collect_real_host() -> None:
    facts = collect_host_facts()
    assert facts.hostname == socket.gethostname() and facts.hostname
    assert facts.memory_bytes is not None and facts.memory_bytes > 0
    assert facts.cpu_cores is not None and facts.cpu_cores >= 1
    assert facts.cpu_threads is not None and facts.cpu_threads >= facts.cpu_cores
    assert facts.kernel == os.uname().release
    if shutil.which("fio"):
        assert facts.fio_version is not None and facts.fio_version.startswith("fio-")
    else:
        assert facts.fio_version is None
    for dev in facts.block_devices:
        assert dev.path == "/dev/" + dev.name.replace("!", "/")
        assert not dev.name.startswith(("ram", "zram"))
        assert dev.kind in ("disk", "loop")
        if dev.kind == "loop":
            assert dev.backing_file
        assert all(link.startswith("/dev/disk/by-id/") for link in dev.by_id)


def test_hostname_override_and_missing_fio(tmp_path: Path) -> None:
    facts = collect_host_facts(hostname="lab-07", fio_binary=str(tmp_path / "no-such-fio"))
    assert facts.hostname == "lab-07"
    assert facts.fio_version is None


# --------------------------------------------------------------------------- fake tree


def test_host_facts_from_fake_tree(fake_root: Path, tmp_path: Path) -> None:
    facts = collect_host_facts(
        hostname="lab-07", fio_binary=_fake_fio(tmp_path, "fio-3.33\\n"), sys_root=str(fake_root)
    )
    assert facts.hostname == "lab-07"
    assert facts.cpu_model == "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"
    assert facts.cpu_threads == 8
    assert facts.cpu_cores == 4
    assert facts.memory_bytes == 16310748 * 1024
    assert facts.kernel == os.uname().release
    assert facts.os == "Debian GNU/Linux 12 (bookworm)"
    assert facts.fio_version == "fio-3.33"
    assert [d.name for d in facts.block_devices] == ["loop10", "nvme0n1", "sda"]


def test_fio_version_failures(tmp_path: Path) -> None:
    assert fio_version(str(tmp_path / "absent")) is None
    assert fio_version(_fake_fio(tmp_path, "boom\\n", rc=1)) is None
    assert fio_version(_fake_fio(tmp_path, "  fio-3.36  \\n")) == "fio-3.36"


def test_block_devices_from_fake_tree(fake_root: Path) -> None:
    devices = {d.name: d for d in list_block_devices(str(fake_root))}
    assert set(devices) == {"nvme0n1", "sda", "loop10"}

    assert devices["nvme0n1"] == BlockDevice(
        name="nvme0n1",
        path="/dev/nvme0n1",
        size_bytes=1953525168 * 512,
        rotational=False,
        model=NVME_MODEL,
        serial=NVME_SERIAL,
        firmware="5B2QGXA7",
        wwn="eui.002538b111b22c33",
        by_id=(
            f"/dev/disk/by-id/nvme-{NVME_MODEL.replace(' ', '_')}_{NVME_SERIAL}",
            "/dev/disk/by-id/nvme-eui.002538b111b22c33",
        ),
        kind="disk",
        backing_file=None,
        logical_block_size=4096,
        physical_block_size=4096,
    )
    assert devices["sda"] == BlockDevice(
        name="sda",
        path="/dev/sda",
        size_bytes=7814037168 * 512,
        rotational=True,
        model=SATA_MODEL,
        serial=SATA_SERIAL,
        firmware="TN05",
        wwn="naa.5000c500a1b2c3d4",
        by_id=(
            f"/dev/disk/by-id/ata-{SATA_MODEL}_{SATA_SERIAL}",
            "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4",
        ),
        kind="disk",
        backing_file=None,
    )
    assert devices["loop10"] == BlockDevice(
        name="loop10",
        path="/dev/loop10",
        size_bytes=2097152 * 512,
        rotational=True,
        model=None,
        serial=None,
        firmware=None,
        wwn=None,
        by_id=(),
        kind="loop",
        backing_file="/var/lib/lab/dut.img",
        driver="loop",
    )


def test_empty_tree_tolerated(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    assert list_block_devices(str(root)) == ()
    facts = collect_host_facts(hostname="h", fio_binary=str(tmp_path / "nofio"), sys_root=str(root))
    assert facts.cpu_model is None
    assert facts.memory_bytes is None
    assert facts.os is None
    assert facts.block_devices == ()
    assert facts.cpu_threads == os.cpu_count()
    assert facts.cpu_cores == facts.cpu_threads


def test_device_with_no_attributes_tolerated(tmp_path: Path) -> None:
    root = tmp_path / "bare"
    (root / "sys" / "block" / "vdb").mkdir(parents=True)
    (dev,) = list_block_devices(str(root))
    assert dev == BlockDevice(name="vdb", path="/dev/vdb", size_bytes=0, kind="disk")
    facts = collect_host_facts(hostname="h", fio_binary=str(tmp_path / "nofio"), sys_root=str(root))
    assert (facts.sys_vendor, facts.product_name, facts.bios_date, facts.cpu_sockets, facts.storage_controllers) \
        == (None, None, None, None, ())


def test_cpuinfo_without_core_ids_falls_back_to_threads(tmp_path: Path) -> None:
    root = tmp_path / "arm"
    _write(root / "proc" / "cpuinfo", "".join(f"processor\t: {n}\nBogoMIPS\t: 50.00\n\n" for n in range(4)))
    facts = collect_host_facts(hostname="h", fio_binary=str(tmp_path / "nofio"), sys_root=str(root))
    assert facts.cpu_threads == 4
    assert facts.cpu_cores == 4
    assert facts.cpu_model is None


# --------------------------------------------------------------------------- declare_dut: files


def _file(tmp_path: Path, name: str = "dut.img", size: int = 1 << 20) -> Path:
    path = tmp_path / name
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_declare_regular_file(tmp_path: Path) -> None:
    path = _file(tmp_path)
    dut = declare_dut(str(path), [])
    assert dut.name == "dut.img"
    assert dut.path == str(path.resolve())
    assert dut.kind == "file"
    assert dut.size_bytes == 1 << 20
    assert (dut.model, dut.serial, dut.firmware, dut.by_id) == (None, None, None, None)


def test_declare_named_file_through_symlink(tmp_path: Path) -> None:
    path = _file(tmp_path, size=4096)
    link = tmp_path / "alias.img"
    link.symlink_to(path)
    dut = declare_dut(f"fast={link}", [])
    assert dut.name == "fast"
    assert dut.path == str(path.resolve())
    assert dut.size_bytes == 4096


def test_declare_relative_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _file(tmp_path, "rel.img", 8192)
    monkeypatch.chdir(tmp_path)
    dut = declare_dut("rel.img", [])
    assert dut.name == "rel.img"
    assert dut.path == str((tmp_path / "rel.img").resolve())


def _dut_error(spec: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        declare_dut(spec, [])
    err = info.value
    assert err.source == "--dut"
    assert err.key == spec
    return err


def test_declare_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing.img"
    assert "does not exist" in _dut_error(str(missing)).message
    assert "does not exist" in _dut_error(f"x={missing}").message

    assert "is a directory" in _dut_error(str(tmp_path)).message

    empty = _file(tmp_path, "empty.img", 0)
    assert "empty file" in _dut_error(str(empty)).message

    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    assert "dangling symlink" in _dut_error(str(dangling)).message

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "neither a block device nor a regular file" in _dut_error(str(fifo)).message

    path = _file(tmp_path)
    assert "empty name" in _dut_error(f"={path}").message
    assert "empty path" in _dut_error("name=").message
    assert "empty path" in _dut_error("").message


def test_declare_char_device() -> None:
    if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
        pytest.skip("/dev/null is not a character device here")
    err = _dut_error("/dev/null")
    assert "character device" in err.message
    assert str(err) == "--dut: /dev/null: /dev/null is a character device, not a block device"


# --------------------------------------------------------------------------- declare_dut: block


def _some_block_node() -> Path:
    """Any block device node in /dev (only ever stat()-ed, never opened)."""
    for entry in sorted(Path("/dev").iterdir()):
        try:
            if stat.S_ISBLK(entry.stat().st_mode):
                return entry
        except OSError:
            continue
    pytest.skip("no block device node in /dev")


def test_declare_block_device_from_devices(tmp_path: Path) -> None:
    node = _some_block_node()
    device = BlockDevice(
        name=node.name,
        path=str(node),
        size_bytes=500 << 30,
        rotational=False,
        model="Lab SSD",
        serial="SN123",
        firmware="FW1",
        by_id=("/dev/disk/by-id/lab-SN123", "/dev/disk/by-id/wwn-0x1"),
        kind="disk",
    )
    dut = declare_dut(str(node), [device])
    assert dut.model_dump() == {
        "name": node.name,
        "path": str(node),
        "kind": "block",
        "size_bytes": 500 << 30,
        "model": "Lab SSD",
        "serial": "SN123",
        "firmware": "FW1",
        "by_id": "/dev/disk/by-id/lab-SN123",
        "wipe_ok": False,
        "observed": None,
    }
    # Through a symlink (as a by-id link would be): resolved, named after the link.
    link = tmp_path / "lab-SN123"
    link.symlink_to(node)
    dut = declare_dut(f"ssd={link}", [device])
    assert (dut.name, dut.path, dut.size_bytes) == ("ssd", str(node), 500 << 30)


def test_declare_block_device_via_fake_sysfs(tmp_path: Path) -> None:
    node = _some_block_node()
    rdev = node.stat().st_rdev
    root = tmp_path / "root"
    sysdir = root / "sys" / "devices" / "virtual" / "block" / node.name
    _write(sysdir / "size", "2048\n")
    _write(sysdir / "uevent", f"MAJOR={os.major(rdev)}\nMINOR={os.minor(rdev)}\nDEVNAME={node.name}\n")
    _write(sysdir / "device" / "model", "Fake Disk\n")
    _write(sysdir / "device" / "serial", "FAKE1\n")
    _write(sysdir / "device" / "firmware_rev", "1.0\n")
    _link(root / "sys" / "dev" / "block" / f"{os.major(rdev)}:{os.minor(rdev)}", str(sysdir))
    _link(root / "dev" / "disk" / "by-id" / "fake-FAKE1", f"../../{node.name}")

    dut = declare_dut(str(node), [], sys_root=str(root))
    assert dut.model_dump() == {
        "name": node.name,
        "path": str(node),
        "kind": "block",
        "size_bytes": 2048 * 512,
        "model": "Fake Disk",
        "serial": "FAKE1",
        "firmware": "1.0",
        "by_id": "/dev/disk/by-id/fake-FAKE1",
        "wipe_ok": False,
        "observed": None,
    }

    _write(sysdir / "size", "0\n")
    with pytest.raises(ConfigError, match="size 0"):
        declare_dut(str(node), [], sys_root=str(root))


def test_declare_block_device_unknown_to_sysfs(tmp_path: Path) -> None:
    node = _some_block_node()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="size is unknown"):
        declare_dut(str(node), [], sys_root=str(tmp_path / "empty"))


# --------------------------------------------------------------------------- platform: DMI, PCI, drivers


def _platform_root(tmp_path: Path) -> Path:
    """A server as sysfs shows it: DMI (one root-only file), an NVMe SSD and a SATA disk behind an AHCI
    controller, a SAS HBA with no driver bound, a NIC (not storage) and a loop device."""
    root = tmp_path / "srv"
    dmi = root / "sys" / "class" / "dmi" / "id"
    for key, value in {"sys_vendor": "LENOVO", "product_name": "ThinkServer RD630", "product_version": "Default string",
                       "board_vendor": "LENOVO", "board_name": "RD630 MB", "bios_vendor": "American Megatrends Inc.",
                       "bios_version": "A2KT41AUS", "bios_date": "03/18/2013"}.items():
        _write(dmi / key, value + "\n")
    (dmi / "board_name").chmod(0)          # root-only on some hosts: unknown, not an error
    devices = root / "sys" / "devices" / "pci0000:00"
    pci = root / "sys" / "bus" / "pci" / "devices"
    for slot, cls, ven, dev, drv in [("0000:00:1f.2", "0x010601", "0x8086", "0x1d02", "ahci"),
                                     ("0000:03:00.0", "0x010802", "0x144d", "0xa80a", "nvme"),
                                     ("0000:04:00.0", "0x010700", "0x1000", "0x0087", None),
                                     ("0000:05:00.0", "0x020000", "0x8086", "0x1521", "igb")]:
        d = devices / slot
        _write(d / "class", cls + "\n")
        _write(d / "vendor", ven + "\n")
        _write(d / "device", dev + "\n")
        if drv:
            _link(d / "driver", f"../../../bus/pci/drivers/{drv}")
        _link(pci / slot, f"../../../devices/pci0000:00/{slot}")
    # NVMe: namespace -> controller (transport attr) -> PCI function (driver nvme)
    ctrl = devices / "0000:03:00.0" / "nvme" / "nvme0"
    _write(ctrl / "transport", "pcie\n")
    _write(ctrl / "model", NVME_MODEL + "\n")
    _link(ctrl / "device", "../../../0000:03:00.0")
    nvme = ctrl / "nvme0n1"
    _write(nvme / "size", "2048\n")
    # SATA: disk -> SCSI device (driver sd) under ata3 of the AHCI function
    scsi = devices / "0000:00:1f.2" / "ata3" / "host2" / "target2:0:0" / "2:0:0:0"
    _write(scsi / "model", SATA_MODEL + "\n")
    _link(scsi / "driver", "../../../../../../../bus/scsi/drivers/sd")
    sda = scsi / "block" / "sda"
    _write(sda / "size", "4096\n")
    block = root / "sys" / "block"
    _link(block / "nvme0n1", "../devices/pci0000:00/0000:03:00.0/nvme/nvme0/nvme0n1")
    _link(nvme / "device", "..")
    _link(block / "sda", "../devices/pci0000:00/0000:00:1f.2/ata3/host2/target2:0:0/2:0:0:0/block/sda")
    _link(sda / "device", "../..")
    _write(block / "loop1" / "size", "8\n")
    _write(block / "loop1" / "loop" / "backing_file", "/srv/dut.img\n")
    _write(root / "proc" / "cpuinfo", "".join(CPUINFO_BLOCK.format(n=n, phys=n % 2, core=n // 2) for n in range(4)))
    return root


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file")
def test_platform_facts_from_fake_sysfs(tmp_path: Path) -> None:
    root = _platform_root(tmp_path)
    facts = collect_host_facts(hostname="rd630", fio_binary=str(tmp_path / "nofio"), sys_root=str(root))
    _check_platform(facts, board_name=None)


def test_platform_facts_as_root_read_every_dmi_file(tmp_path: Path) -> None:
    root = _platform_root(tmp_path)
    (root / "sys" / "class" / "dmi" / "id" / "board_name").chmod(0o444)
    facts = collect_host_facts(hostname="rd630", fio_binary=str(tmp_path / "nofio"), sys_root=str(root))
    _check_platform(facts, board_name="RD630 MB")


def _check_platform(facts: HostFacts, *, board_name: str | None) -> None:
    assert (facts.sys_vendor, facts.product_name, facts.product_version, facts.board_vendor, facts.board_name,
            facts.bios_vendor, facts.bios_version, facts.bios_date) == (
        "LENOVO", "ThinkServer RD630", None, "LENOVO", board_name, "American Megatrends Inc.", "A2KT41AUS",
        "03/18/2013")
    assert facts.cpu_sockets == 2
    assert facts.storage_controllers == (
        StorageController(slot="0000:00:1f.2", class_name="SATA", vendor_id="0x8086", device_id="0x1d02",
                          driver="ahci"),
        StorageController(slot="0000:03:00.0", class_name="NVM Express", vendor_id="0x144d", device_id="0xa80a",
                          driver="nvme"),
        StorageController(slot="0000:04:00.0", class_name="SAS", vendor_id="0x1000", device_id="0x0087"))
    devs = {d.name: (d.driver, d.transport, d.controller) for d in facts.block_devices}
    assert devs == {"nvme0n1": ("nvme", "pcie", "0000:03:00.0"), "sda": ("sd", "sata", "0000:00:1f.2"),
                    "loop1": ("loop", None, None)}
    assert {d.name: d.model for d in facts.block_devices} == {"nvme0n1": NVME_MODEL, "sda": SATA_MODEL, "loop1": None}


def test_old_registration_without_platform_facts_still_parses() -> None:
    old = {"hostname": "h", "cpu_model": "x", "block_devices": [{"name": "sda", "path": "/dev/sda", "size_bytes": 1}]}
    facts = HostFacts.model_validate(old)
    assert facts.storage_controllers == () and facts.sys_vendor is None and facts.block_devices[0].driver is None
    newer = {**old, "some_future_fact": 1}            # a newer agent's extra fact is ignored, not refused
    assert HostFacts.model_validate(newer) == facts
