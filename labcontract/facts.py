"""Host facts an agent registers: the provenance every result carries."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class BlockDevice(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str                      # kernel name: sda, nvme0n1, loop3
    path: str                      # /dev/sda
    size_bytes: int
    rotational: bool | None = None
    model: str | None = None
    serial: str | None = None
    firmware: str | None = None
    wwn: str | None = None
    by_id: tuple[str, ...] = ()    # /dev/disk/by-id/... links that resolve to this device
    kind: str | None = None        # disk, loop, part, ...
    backing_file: str | None = None  # for loop devices
    # optional (agents before issue 13 send none): the kernel driver bound to the device (nvme, sd, virtio_blk,
    # loop), its transport (pcie, sata, sas, virtio, ...) and the PCI slot of the controller it hangs off
    driver: str | None = None
    transport: str | None = None
    controller: str | None = None


class StorageController(BaseModel):
    """A PCI mass-storage controller (class 0x01xxxx): HBA, RAID card, NVMe or virtio-blk function."""

    model_config = ConfigDict(frozen=True)

    slot: str                          # 0000:3b:00.0
    class_name: str                    # "NVM Express", "SAS", "RAID", ...
    vendor_id: str | None = None       # "0x144d"
    device_id: str | None = None       # "0xa80a"
    driver: str | None = None          # the bound kernel driver: nvme, mpt3sas, ahci, virtio-pci
    name: str | None = None            # "Samsung Electronics Co Ltd NVMe SSD Controller" (lspci -mm), if known


class NetPathDecl(BaseModel):
    """A network path an agent declares (``--net-path NAME=IFACE[@PEER]``): its interface, the address
    of the far end (an initiator's target portal), and the interface's MTU and link speed (Mbit/s, as the
    kernel reports it; None when the link is down or the driver does not say) when the agent started."""

    model_config = ConfigDict(frozen=True)

    name: str
    iface: str
    peer: str | None = None
    mtu: int | None = None
    speed_mbit: int | None = Field(default=None, ge=1, le=10_000_000)


ParamSchemaValue = Annotated[str, Field(max_length=1024)] | int | float | bool | None


class AppWorkloadFact(BaseModel):
    """An external workload as the host declares it (``agents.workloads``), without its command line."""

    model_config = ConfigDict(frozen=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    timeout_s: Annotated[int, Field(ge=1, le=30 * 86400)]
    destructive: bool = False
    description: Annotated[str, Field(max_length=1024)] = ""
    params: Annotated[dict[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")],
                           Annotated[dict[Annotated[str, Field(max_length=32)], ParamSchemaValue],
                                     Field(max_length=16)]], Field(max_length=64)] = {}


class HostFacts(BaseModel):
    model_config = ConfigDict(frozen=True)

    hostname: str
    cpu_model: str | None = None
    cpu_cores: int | None = None        # physical cores
    cpu_threads: int | None = None      # logical CPUs
    memory_bytes: int | None = None
    kernel: str | None = None
    os: str | None = None               # PRETTY_NAME of /etc/os-release; Win32_OperatingSystem.Caption on Windows
    # optional (issue 17; older agents send none, older controllers ignore it): which agent platform read these
    # facts, so that reports and comparisons tell a Linux run from a Windows run on the same hardware
    os_family: Literal["linux", "windows"] | None = None
    fio_version: str | None = None      # "fio-3.33"
    block_devices: tuple[BlockDevice, ...] = ()
    metrics_address: str | None = None  # "host:port" of the agent's Prometheus exporter, as reachable
    net_paths: tuple[NetPathDecl, ...] = ()   # declared network paths (network tests)
    # Optional platform facts (issue 13; older agents send none, and a controller that does not know them
    # ignores them: protocol 5 either way). DMI strings some hosts only let root read are None.
    sys_vendor: str | None = None       # DMI: "Lenovo"
    product_name: str | None = None     # DMI: "ThinkServer RD630"
    product_version: str | None = None
    board_vendor: str | None = None
    board_name: str | None = None
    bios_vendor: str | None = None
    bios_version: str | None = None
    bios_date: str | None = None
    cpu_sockets: int | None = None      # distinct physical package ids
    storage_controllers: Annotated[tuple[StorageController, ...], Field(max_length=256)] = ()
    # external workloads the host's administrator declared (agent --app-workloads; protocol 6): never the command
    app_workloads: Annotated[tuple[AppWorkloadFact, ...], Field(max_length=256)] = ()


# a DUT's path as a start message (DeviceRef) and a fio job file (filename) take it: no space, '=', '$', ';',
# bracket or quote (one the controller could not render made every scheduling pass raise and the controller exit)
DUT_PATH = r"^/[A-Za-z0-9/_.:+@,-]{0,511}$"


def windows_drive_path(n: int) -> str:
    """Windows disk N as the contract carries it: ``//./PhysicalDriveN`` (``/``-rooted, so it passes DUT_PATH; Win32
    reads ``//./`` as the device namespace ``\\\\.\\``). The agent's platform, the job checker and the inventory
    all write it here."""
    return f"//./PhysicalDrive{int(n)}"


def _observed(v: dict[str, Any] | None) -> dict[str, Any] | None:
    """An interlock observation the controller can read back (labcontract.interlock.observed_from_dict) with
    values of their types: a malformed one made every scheduling pass of a writing step raise (TypeError)."""
    from labcontract.interlock import observed_from_dict

    if v is None:
        return v
    try:
        o = observed_from_dict(v)
    except (TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"not an interlock observation: {e}") from None
    texts = [o.path, o.real_path, o.probe_error, *o.mountpoints, *o.holders,
             *(x for sig in o.signatures for x in (sig.type, sig.kind, sig.offset or ""))]
    if not all(isinstance(t, str) for t in texts) or not all(
            isinstance(b, bool) for b in (o.exists, o.swap, o.backs_root, o.lab_fs)):
        raise ValueError("not an interlock observation: a value of the wrong type")
    return v


class DeclaredDut(BaseModel):
    """A device an agent is allowed to run workloads on (and write to)."""

    model_config = ConfigDict(frozen=True)

    name: str
    path: Annotated[str, Field(pattern=DUT_PATH)]
    kind: Literal["block", "file"]
    size_bytes: int
    model: str | None = None
    serial: str | None = None
    firmware: str | None = None
    by_id: str | None = None
    wipe_ok: bool = False                    # its on-disk signatures may be destroyed (see labcontract.interlock)
    # the interlock's observation, refreshed with each registration
    observed: Annotated[dict[str, Any] | None, AfterValidator(_observed)] = None
