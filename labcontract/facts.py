"""Host facts an agent registers: the provenance every result carries."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from labcontract.bounds import (
    FACT_ID,
    FACT_TEXT,
    FACTS_MAX_BYTES,
    MAX_BLOCK_DEVICES,
    MAX_LINKS,
    MAX_OBSERVED,
    ByteCount,
    Count,
    FactId,
    FactPath,
    FactText,
)
from labcontract.interlock import ObservedState, observed_to_dict


class BlockDevice(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: FactId                   # kernel name: sda, nvme0n1, loop3
    path: FactPath                 # /dev/sda
    size_bytes: ByteCount
    rotational: bool | None = None
    model: FactText | None = None
    serial: FactId | None = None
    firmware: FactText | None = None
    wwn: FactId | None = None
    by_id: Annotated[tuple[FactPath, ...], Field(max_length=MAX_LINKS)] = ()   # /dev/disk/by-id/... links to it
    kind: FactId | None = None     # disk, loop, part, ...
    backing_file: FactPath | None = None  # for loop devices
    # optional (agents before issue 13 send none): the kernel driver bound to the device (nvme, sd, virtio_blk,
    # loop), its transport (pcie, sata, sas, virtio, ...) and the PCI slot of the controller it hangs off
    driver: FactId | None = None
    transport: FactId | None = None
    controller: FactId | None = None
    # optional (agents before 0.14 send none): the sizes the kernel reports (NVMe: the LBA format in use)
    logical_block_size: Count | None = None
    physical_block_size: Count | None = None


class StorageController(BaseModel):
    """A PCI mass-storage controller (class 0x01xxxx): HBA, RAID card, NVMe or virtio-blk function."""

    model_config = ConfigDict(frozen=True)

    slot: FactId                       # 0000:3b:00.0
    class_name: FactText               # "NVM Express", "SAS", "RAID", ...
    vendor_id: FactId | None = None    # "0x144d"
    device_id: FactId | None = None    # "0xa80a"
    driver: FactId | None = None       # the bound kernel driver: nvme, mpt3sas, ahci, virtio-pci
    name: FactText | None = None       # "Samsung Electronics Co Ltd NVMe SSD Controller" (lspci -mm), if known


class NetPathDecl(BaseModel):
    """A network path an agent declares (``--net-path NAME=IFACE[@PEER]``): its interface, the address
    of the far end (an initiator's target portal), and the interface's MTU and link speed (Mbit/s, as the
    kernel reports it; None when the link is down or the driver does not say) when the agent started."""

    model_config = ConfigDict(frozen=True)

    name: Annotated[str, Field(max_length=64)]
    iface: Annotated[str, Field(max_length=64)]
    peer: Annotated[str, Field(max_length=FACT_TEXT)] | None = None
    mtu: Annotated[int, Field(ge=0, le=1 << 20)] | None = None
    speed_mbit: int | None = Field(default=None, ge=1, le=10_000_000)


ParamSchemaValue = (Annotated[str, Field(max_length=1024)] | Annotated[int, Field(ge=-(1 << 63), le=1 << 63)]
                    | Annotated[float, Field(ge=-1e300, le=1e300, allow_inf_nan=False)] | bool | None)


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


class StepKindFact(BaseModel):
    """A step kind an agent runs on its platform (a start message's ``action``) and the version of what it does
    there (``agents.kinds.StepKind.command_version``)."""

    model_config = ConfigDict(frozen=True)

    action: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
    version: Annotated[int, Field(ge=1, le=1_000_000, strict=True)]    # "1" or true is not a version


class HostFacts(BaseModel):
    """Free-text facts are cut at :data:`~labcontract.bounds.FACT_TEXT` characters; the whole is refused over
    :data:`~labcontract.bounds.FACTS_MAX_BYTES` of JSON (an agent then fails at its start, saying so)."""

    model_config = ConfigDict(frozen=True)

    hostname: Annotated[str, Field(max_length=255)]
    cpu_model: FactText | None = None
    cpu_cores: Count | None = None      # physical cores
    cpu_threads: Count | None = None    # logical CPUs
    memory_bytes: ByteCount | None = None
    kernel: FactText | None = None
    os: FactText | None = None          # PRETTY_NAME of /etc/os-release; Win32_OperatingSystem.Caption on Windows
    # optional (issue 17; older agents send none, older controllers ignore it): which agent platform read these
    # facts, so that reports and comparisons tell a Linux run from a Windows run on the same hardware
    os_family: Literal["linux", "windows"] | None = None
    fio_version: FactText | None = None   # "fio-3.33"
    block_devices: Annotated[tuple[BlockDevice, ...], Field(max_length=MAX_BLOCK_DEVICES)] = ()
    metrics_address: Annotated[str, Field(max_length=FACT_TEXT)] | None = None  # "host:port" of its exporter
    net_paths: Annotated[tuple[NetPathDecl, ...], Field(max_length=64)] = ()   # declared network paths
    # Optional platform facts (issue 13; older agents send none, and a controller that does not know them
    # ignores them: protocol 5 either way). DMI strings some hosts only let root read are None.
    sys_vendor: FactText | None = None      # DMI: "Lenovo"
    product_name: FactText | None = None    # DMI: "ThinkServer RD630"
    product_version: FactText | None = None
    board_vendor: FactText | None = None
    board_name: FactText | None = None
    bios_vendor: FactText | None = None
    bios_version: FactText | None = None
    bios_date: FactText | None = None
    cpu_sockets: Count | None = None    # distinct physical package ids
    storage_controllers: Annotated[tuple[StorageController, ...], Field(max_length=256)] = ()
    # external workloads the host's administrator declared (agent --app-workloads; protocol 6): never the command
    app_workloads: Annotated[tuple[AppWorkloadFact, ...], Field(max_length=256)] = ()
    # the step kinds the agent runs on its platform, with their versions (issue 25; optional: an older agent sends
    # none and its host is not judged by them, an older controller ignores them; protocol unchanged). The scheduler
    # holds a run for a host that lacks a kind it needs, or has it at an older version, and says why
    step_kinds: Annotated[tuple[StepKindFact, ...], Field(max_length=64)] = ()

    @model_validator(mode="after")
    def _total(self) -> HostFacts:
        size = len(self.model_dump_json())
        if size > FACTS_MAX_BYTES:
            raise ValueError(f"host facts of {size} bytes (JSON), over the {FACTS_MAX_BYTES} bytes a host may "
                             "register")
        return self


# a DUT's path as a start message (DeviceRef) and a fio job file (filename) take it: no space, '=', '$', ';',
# bracket or quote (one the controller could not render made every scheduling pass raise and the controller exit)
DUT_PATH = r"^/[A-Za-z0-9/_.:+@,-]{0,511}$"


def windows_drive_path(n: int) -> str:
    """Windows disk N as the contract carries it: ``//./PhysicalDriveN`` (``/``-rooted, so it passes DUT_PATH; Win32
    reads ``//./`` as the device namespace ``\\\\.\\``). The agent's platform, the job checker and the inventory
    all write it here."""
    return f"//./PhysicalDrive{int(n)}"


class SignatureFact(BaseModel):
    """One on-disk signature as observed (labcontract.interlock.Signature)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Annotated[str, Field(max_length=64)]
    kind: Annotated[str, Field(max_length=32)]
    offset: Annotated[str, Field(max_length=64)] | None = None


class Observation(BaseModel):
    """What the interlock observed of a DUT on its host (labcontract.interlock.ObservedState, the same fields),
    typed and bounded: a malformed one made every scheduling pass of a writing step raise (TypeError)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    path: FactPath
    real_path: FactPath
    exists: bool = True
    mountpoints: Annotated[tuple[Annotated[str, Field(max_length=4096)], ...],
                           Field(max_length=MAX_OBSERVED, strict=False)] = ()
    swap: bool = False
    signatures: Annotated[tuple[SignatureFact, ...], Field(max_length=MAX_OBSERVED, strict=False)] = ()
    holders: Annotated[tuple[FactId, ...], Field(max_length=MAX_OBSERVED, strict=False)] = ()
    backs_root: bool = False
    probe_error: Annotated[str, Field(max_length=4096)] = ""
    lab_fs: bool = False

    @classmethod
    def of(cls, obs: ObservedState) -> Observation:
        """The observation of the interlock's dataclass (long texts cut: the agent's own, never refused)."""
        data = observed_to_dict(obs)
        data["probe_error"] = str(data.get("probe_error") or "")[:4096]
        for key in ("mountpoints", "holders", "signatures"):
            data[key] = list(data.get(key) or ())[:MAX_OBSERVED]
        return cls.model_validate(data, strict=False)

    def as_dict(self) -> dict[str, Any]:
        """What the store keeps (labcontract.interlock.observed_from_dict reads it back)."""
        return self.model_dump(mode="json")


class DeclaredDut(BaseModel):
    """A device an agent is allowed to run workloads on (and write to)."""

    model_config = ConfigDict(frozen=True)

    name: Annotated[str, Field(min_length=1, max_length=FACT_ID)]
    path: Annotated[str, Field(pattern=DUT_PATH)]
    kind: Literal["block", "file"]
    size_bytes: ByteCount
    model: FactText | None = None
    serial: FactId | None = None
    firmware: Annotated[str, Field(max_length=64)] | None = None     # the store's column
    by_id: FactPath | None = None
    wipe_ok: bool = False                    # its on-disk signatures may be destroyed (see labcontract.interlock)
    # the interlock's observation, refreshed with each registration
    observed: Observation | None = None
