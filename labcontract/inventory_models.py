"""The lab inventory's models: what a host declares (its DUTs, NICs, the variables we type), a host as read, and
the inventory as a whole. :mod:`labcontract.inventory` reads an inventory directory into them."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator, model_validator

from labcontract import interlock
from labcontract.errors import InventoryError, Problem
from labcontract.facts import windows_drive_path
from labcontract.inventory_values import (
    BY_ID_PATH,
    DEV_PATH,
    Serial,
    UserName,
    host_address,
    safe_path,
)
from labcontract.power import BmcFields

KNOWN_GROUPS = ("controller", "agents", "windows_agents", "targets", "initiators")
WINDOWS_GROUP = "windows_agents"          # Windows agent hosts (playbooks/windows_agent.yml; docs/windows.md)
# a Windows whole disk: \\.\PhysicalDriveN, //./PhysicalDriveN or PhysicalDriveN; kept as //./PhysicalDriveN,
# the contract's spelling (agents/platform/windows.py)
_PHYSICALDRIVE = re.compile(r"^(?:\\\\\.\\|//\./)?PhysicalDrive(\d{1,4})\Z", re.IGNORECASE)
PurgeMethod = Literal["auto", "nvme_format", "nvme_sanitize", "ata_secure_erase", "blkdiscard", "punch_hole"]
OpMethod = Literal["auto", "nvme_ns", "ata_hpa", "scsi_resize", "footprint"]
PURGE_METHODS: tuple[str, ...] = get_args(PurgeMethod)
OP_METHODS: tuple[str, ...] = get_args(OpMethod)
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
_WWN = re.compile(r"^(0x|naa\.|eui\.)?[0-9a-fA-F]{16}([0-9a-fA-F]{16})?\Z")
_HOSTPORT = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}\Z")


class Dut(BaseModel):
    """A device under test a host declares, by stable identity."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    kind: Literal["block", "loop", "file", "physicaldrive"] = "block"
    path: str                                   # /dev/disk/by-id/... (block), /dev/loopN (loop), file path,
                                                # //./PhysicalDriveN (physicaldrive: a Windows host's disk)
    serial: Serial | None = None
    wwn: str | None = None
    model: Annotated[str, Field(pattern=r"^[A-Za-z0-9 ._:+(),/-]{1,128}$")] | None = None
    interface: Literal["nvme", "ata", "scsi", "virtual"] | None = None
    capacity_bytes: int | None = Field(default=None, gt=0)
    allow: tuple[Literal["purge", "op_mode"], ...] = ()
    purge_methods: tuple[PurgeMethod, ...] = ("auto",)
    op_methods: tuple[OpMethod, ...] = ("auto",)
    wipe_ok: StrictBool = False
    nvme_controller: Annotated[str, Field(pattern=r"^/dev/nvme[0-9]{1,4}$")] | None = None
                                                # /dev/nvme0 when it cannot be derived from the path
    nsid: int | None = Field(default=None, ge=1)
    scheduler: Annotated[str, Field(pattern=r"^[a-z0-9_-]{1,32}$")] | None = None   # its I/O scheduler
                                                # (playbooks/roles/io_tuning; default io_tuning_scheduler)

    @field_validator("wwn")
    @classmethod
    def _wwn(cls, v: str | None) -> str | None:
        if v is not None and not _WWN.match(v):
            raise ValueError(f"{v!r} is not a WWN (16 or 32 hex digits, optionally 0x/naa./eui.)")
        return v

    @field_validator("path")
    @classmethod
    def _path(cls, v: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind", "block")
        if kind != "physicaldrive" and _PHYSICALDRIVE.match(v):
            raise ValueError(f"{v!r}: a Windows disk is declared with kind: physicaldrive")
        if kind == "block" and not v.startswith("/dev/disk/by-id/"):
            raise ValueError(f"{v!r}: a block DUT is declared by its /dev/disk/by-id/ path")
        if kind == "block" and (not BY_ID_PATH.match(v) or not DEV_PATH.match(v) or ".." in v):
            raise ValueError(f"{v!r}: not a safe device path (/dev/disk/by-id/NAME, NAME of letters, digits "
                             "and . _ : + -; no '..')")
        if kind == "loop" and not re.match(r"^/dev/loop\d{1,6}\Z", v):
            raise ValueError(f"{v!r}: a loop DUT is /dev/loopN")
        if kind == "file" and not v.startswith("/"):
            raise ValueError(f"{v!r}: a file DUT needs an absolute path")
        if kind == "file":
            safe_path(v, "a file DUT")
        if kind == "physicaldrive":
            m = _PHYSICALDRIVE.match(v)
            if m is None:
                raise ValueError(f"{v!r}: a physicaldrive DUT is a Windows disk, \\\\.\\PhysicalDriveN")
            return windows_drive_path(int(m.group(1)))
        return v

    @model_validator(mode="after")
    def _identity(self) -> Dut:
        if self.kind in ("block", "physicaldrive") and not (self.serial or self.wwn):
            raise ValueError(f"a {self.kind} DUT needs its serial or wwn (stable identity)")
        if self.kind == "physicaldrive":
            linux_only = [k for k in ("nvme_controller", "nsid", "scheduler") if getattr(self, k) is not None]
            if self.allow or linux_only:
                raise ValueError(f"{', '.join(['allow'] * bool(self.allow) + linux_only)}: purge, OP modes and I/O "
                                 "tuning run through Linux tools, not on a Windows disk (docs/windows.md)")
        return self

    @property
    def state_key(self) -> str:
        """Name of the DUT's state file on its host (serial, else WWN, else name)."""
        return re.sub(r"[^A-Za-z0-9._-]", "_", self.serial or self.wwn or self.name)

    def declared(self) -> interlock.DeclaredDut:
        return interlock.DeclaredDut(name=self.name, path=self.path, wipe_ok=self.wipe_ok, allow=tuple(self.allow))


class Nic(BaseModel):
    """A NIC / data path for network tests (iSCSI, NVMe-oF)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    iface: Annotated[str, Field(pattern=r"^[A-Za-z0-9._@-]{1,15}$")]
    address: str                                # with prefix: 10.30.1.11/24
    peer: str | None = None                     # the other end's address, no prefix
    mtu: int = Field(default=1500, ge=576, le=9216)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        if "/" not in v:
            raise ValueError(f"{v!r} needs a prefix length (e.g. 10.30.1.11/24)")
        try:
            ipaddress.ip_interface(v)
        except ValueError as e:
            raise ValueError(f"{v!r} is not an address/prefix") from e
        return v

    @field_validator("peer")
    @classmethod
    def _peer(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        try:
            peer = ipaddress.ip_address(v)
        except ValueError as e:
            raise ValueError(f"{v!r} is not an IP address") from e
        address = info.data.get("address")
        if address and peer not in ipaddress.ip_interface(address).network:
            raise ValueError(f"{v} is not in the subnet of {address}")
        return v


class InventoryBmc(BmcFields):
    """A host's ``lab_agent_bmc`` (docs/power.md): the role writes the agent's ``--bmc`` file from it and copies the
    password's file and the CA from the control node (a vault-encrypted file is decrypted by the copy); the password
    itself is never in the inventory, on a command line or in a log."""

    password_src: str
    ca_src: str | None = None

    @field_validator("password_src", "ca_src")
    @classmethod
    def _src(cls, v: str | None) -> str | None:
        return v if v is None else safe_path(v, "a file on the control node")


class HostVars(BaseModel):
    """The keys of a host's merged variables that we define; other Ansible variables pass through."""

    model_config = ConfigDict(frozen=True, extra="allow")

    ansible_host: str | None = None
    ansible_connection: Annotated[str, Field(pattern=r"^[a-z0-9_.]{1,64}$")] | None = None
    ansible_user: UserName | None = None
    ansible_port: int | None = Field(default=None, ge=1, le=65535)
    lab_agent_user: UserName | None = None      # the agent's unprivileged user (playbooks/roles/lab_agent)
    lab_state_dir: str | None = None
    lab_agent_venv: str | None = None
    lab_agent_state_dir: str | None = None
    lab_agent_log_dir: str | None = None
    lab_agent_run_dir: str | None = None
    lab_agent_script: str | None = None
    lab_agent_drive_health_socket: str | None = None
    lab_agent_drive_health_config: str | None = None
    lab_agent_bmc: InventoryBmc | None = None
    lab_agent_bmc_config: str | None = None
    lab_agent_bmc_password_file: str | None = None
    lab_agent_bmc_ca: str | None = None
    duts: tuple[Dut, ...] = ()
    nics: tuple[Nic, ...] = ()
    metrics_address: str | None = None

    @field_validator("ansible_host")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        return v if v is None else host_address(v)

    @field_validator("lab_state_dir", "lab_agent_venv", "lab_agent_state_dir", "lab_agent_log_dir",
                     "lab_agent_run_dir", "lab_agent_script", "lab_agent_drive_health_socket",
                     "lab_agent_drive_health_config", "lab_agent_bmc_config", "lab_agent_bmc_password_file",
                     "lab_agent_bmc_ca")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        return v if v is None else safe_path(v)

    @field_validator("metrics_address")
    @classmethod
    def _hostport(cls, v: str | None) -> str | None:
        if v is not None and not _HOSTPORT.match(v):
            raise ValueError(f"{v!r} is not host:port")
        return v


class Host(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    groups: tuple[str, ...]
    vars: dict[str, Any]
    duts: tuple[Dut, ...] = ()
    nics: tuple[Nic, ...] = ()
    ansible_host: str | None = None
    metrics_address: str | None = None

    @property
    def address(self) -> str:
        return self.ansible_host or self.name

    def dut(self, name_or_path: str) -> Dut:
        """The declared DUT named ``name_or_path``, or whose path is it (by-id, loop or file path)."""
        for dut in self.duts:
            if name_or_path in (dut.name, dut.path):
                return dut
        raise InventoryError(self.name, [Problem(name_or_path, f"not a declared DUT of host {self.name} "
                                                 f"(declared: {', '.join(d.name for d in self.duts) or 'none'})")])

    def declared_duts(self) -> list[interlock.DeclaredDut]:
        """The host's DUTs in the form :mod:`labcontract.interlock` takes."""
        return [d.declared() for d in self.duts]


class Agent(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    address: str
    metrics_address: str | None
    duts: tuple[Dut, ...]


class Inventory(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    hosts: dict[str, Host]
    groups: dict[str, tuple[str, ...]]          # group -> every host in it (children included)

    def host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise InventoryError(self.path, [Problem(name, "no such host in the inventory")]) from None

    def group(self, name: str) -> list[Host]:
        return [self.hosts[h] for h in self.groups.get(name, ())]

    def agents(self) -> list[Agent]:
        return [Agent(name=h.name, address=h.address, metrics_address=h.metrics_address, duts=h.duts)
                for h in self.group("agents")]
