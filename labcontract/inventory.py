"""The lab inventory: an Ansible YAML inventory directory read and validated for the keys we define.

Layout (docs/provisioning.md)::

    inventory/<lab>/hosts.yml             groups controller, agents, targets, initiators
    inventory/<lab>/group_vars/<group>.yml (or group_vars/<group>/*.yml)
    inventory/<lab>/host_vars/<host>.yml   (or host_vars/<host>/*.yml)

Variables merge as Ansible merges them with the default ``hash_behaviour=replace`` (a later
source replaces a whole top-level key): inline ``all`` vars, inline group vars (by depth, then
name), ``group_vars/all``, ``group_vars/<group>`` (by depth, then name), inline host vars,
``host_vars/<host>``. Each key remembers the file it came from, so a problem is reported as
``inventory/example/host_vars/rd630-a.yml: duts[1].serial: ...``. Every problem of every file is
collected before :class:`~labcontract.errors.InventoryError` is raised.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from labcontract import interlock
from labcontract.errors import InventoryError, Problem
from labcontract.inventory_values import (
    BY_ID_PATH,
    DEV_PATH,
    HOST_NAME,
    Serial,
    UserName,
    host_address,
    safe_path,
)
from labcontract.suite import problems_from

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
_WWN = re.compile(r"^(0x|naa\.|eui\.)?[0-9a-fA-F]{16}([0-9a-fA-F]{16})?$")
_HOSTPORT = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")
_VARS_SUFFIXES = (".yml", ".yaml", ".json")


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
            return f"//./PhysicalDrive{int(m.group(1))}"
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
    duts: tuple[Dut, ...] = ()
    nics: tuple[Nic, ...] = ()
    metrics_address: str | None = None

    @field_validator("ansible_host")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        return v if v is None else host_address(v)

    @field_validator("lab_state_dir", "lab_agent_venv", "lab_agent_state_dir", "lab_agent_log_dir",
                     "lab_agent_run_dir", "lab_agent_script")
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


# ---------------------------------------------------------------- reading


@dataclass
class _Group:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    depth: int = 0


@dataclass
class _Reader:
    root: Path
    problems: list[Problem] = field(default_factory=list)
    groups: dict[str, _Group] = field(default_factory=dict)

    def where(self, path: Path, key: str = "") -> str:
        return f"{path}: {key}" if key else str(path)

    def problem(self, path: Path, key: str, message: str) -> None:
        self.problems.append(Problem(self.where(path, key), message))

    def load_yaml(self, path: Path) -> Any:
        try:
            return yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as e:
            self.problem(path, "", f"cannot be read: {e.strerror}")
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            line = f" (line {mark.line + 1})" if mark is not None else ""
            self.problem(path, "", f"not valid YAML{line}: {getattr(e, 'problem', e)}")
        return None

    # hosts.yml ---------------------------------------------------------

    def read_hosts(self) -> None:
        path = self.root / "hosts.yml"
        if not path.exists():
            self.problem(path, "", "missing (the inventory's hosts file)")
            return
        doc = self.load_yaml(path)
        if doc is None:
            return
        if not isinstance(doc, dict) or set(doc) != {"all"}:
            self.problem(path, "", "must be a mapping with the single key 'all'")
            return
        self.read_group(path, "all", doc["all"], "all", 0)

    def read_group(self, path: Path, name: str, node: Any, key: str, depth: int) -> None:
        group = self.groups.setdefault(name, _Group(name))
        group.depth = max(group.depth, depth)
        if node is None:
            return
        if not isinstance(node, dict):
            self.problem(path, key, "a group must be a mapping of hosts, vars and children")
            return
        for extra in sorted(set(node) - {"hosts", "vars", "children"}):
            self.problem(path, f"{key}.{extra}", "unknown key (a group has hosts, vars and children)")
        group.vars.update(self.mapping(path, f"{key}.vars", node.get("vars")))
        for host, hvars in self.mapping(path, f"{key}.hosts", node.get("hosts")).items():
            if not HOST_NAME.match(str(host)):
                self.problem(path, f"{key}.hosts.{host}", "not a valid host name (letters, digits and . _ -, "
                                                          "at most 63, starting with a letter or digit)")
                continue
            group.hosts[str(host)] = self.mapping(path, f"{key}.hosts.{host}", hvars)
        for child, cnode in self.mapping(path, f"{key}.children", node.get("children")).items():
            group.children.append(str(child))
            self.read_group(path, str(child), cnode, f"{key}.children.{child}", depth + 1)

    def mapping(self, path: Path, key: str, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(path, key, f"must be a mapping (got {type(value).__name__})")
            return {}
        return {str(k): v for k, v in value.items()}

    # group_vars / host_vars ------------------------------------------------

    def vars_files(self, kind: str) -> dict[str, list[Path]]:
        """``kind``/<name>.yml or ``kind``/<name>/*.yml, by name."""
        base = self.root / kind
        out: dict[str, list[Path]] = {}
        if not base.is_dir():
            return out
        for entry in sorted(base.iterdir()):
            if entry.is_dir():
                out[entry.name] = sorted(p for p in entry.iterdir() if p.suffix in _VARS_SUFFIXES)
            elif entry.suffix in _VARS_SUFFIXES:
                out.setdefault(entry.stem, []).append(entry)
        return out

    def read_vars(self, files: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
        out = []
        for path in files:
            doc = self.load_yaml(path)
            if doc is not None:
                out.append((path, self.mapping(path, "", doc)))
        return out


def _members(groups: dict[str, _Group], name: str, seen: set[str] | None = None) -> list[str]:
    """Every host of ``name``, its children's included."""
    seen = set() if seen is None else seen
    if name in seen or name not in groups:
        return []
    seen.add(name)
    hosts = list(groups[name].hosts)
    for child in groups[name].children:
        hosts += [h for h in _members(groups, child, seen) if h not in hosts]
    return hosts


@dataclass
class _Merged:
    values: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, Path] = field(default_factory=dict)

    def apply(self, source: Path, data: dict[str, Any]) -> None:
        for key, value in data.items():
            self.values[key], self.origin[key] = value, source


def _merge_host(reader: _Reader, host: str, host_groups: list[_Group], group_files: dict[str, list[Path]],
                host_files: list[Path], hosts_file: Path) -> _Merged:
    merged = _Merged()
    ordered = sorted(host_groups, key=lambda g: (g.depth, g.name))
    for group in ordered:
        merged.apply(hosts_file, group.vars)
    for group in ordered:
        for path, data in reader.read_vars(group_files.get(group.name, [])):
            merged.apply(path, data)
    for group in ordered:
        if host in group.hosts:
            merged.apply(hosts_file, group.hosts[host])
    for path, data in reader.read_vars(host_files):
        merged.apply(path, data)
    return merged


def _where(merged: _Merged, location: str, fallback: Path) -> str:
    key = re.split(r"[.\[]", location, maxsplit=1)[0]
    return f"{merged.origin.get(key, fallback)}: {location}" if location else str(merged.origin.get(key, fallback))


def _validate_host(name: str, groups: list[str], merged: _Merged, fallback: Path,
                   problems: list[Problem]) -> Host | None:
    problems += [Problem(_where(merged, loc, fallback), msg) for loc, msg in _duplicate_checks(merged.values)]
    try:
        hv = HostVars.model_validate(merged.values)
    except ValidationError as e:
        problems += [Problem(_where(merged, p.location, fallback), p.message) for p in problems_from(e)]
        return None
    if "agents" in groups and WINDOWS_GROUP in groups:
        problems.append(Problem(str(fallback), f"all.children: host {name} is in agents (Linux) and in "
                                               f"{WINDOWS_GROUP}: one or the other"))
    else:
        problems += [Problem(_where(merged, loc, fallback), msg)
                     for loc, msg in _host_checks(hv, "agents" in groups, WINDOWS_GROUP in groups)]
    return Host(name=name, groups=tuple(groups), vars=merged.values, duts=hv.duts, nics=hv.nics,
                ansible_host=hv.ansible_host, metrics_address=hv.metrics_address)


def _duplicates(items: Iterable[tuple[str, str | None]]) -> list[tuple[str, str]]:
    seen: set[str] = set()
    out = []
    for loc, value in items:
        if value is not None and value in seen:
            out.append((loc, f"{value!r} is declared twice"))
        elif value is not None:
            seen.add(value)
    return out


def _raw_items(values: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = values.get(key)
    return [x if isinstance(x, dict) else {} for x in items] if isinstance(items, list) else []


def _duplicate_checks(values: dict[str, Any]) -> list[tuple[str, str]]:
    """Names, paths, serials... declared twice on one host (on the raw data: runs even when items are invalid)."""
    out: list[tuple[str, str]] = []
    for section, keys in (("duts", ("name", "path", "serial", "wwn")), ("nics", ("name", "iface", "address"))):
        items = _raw_items(values, section)
        for key in keys:
            out += _duplicates((f"{section}[{i}].{key}", None if x.get(key) is None else str(x.get(key)))
                               for i, x in enumerate(items))
    return out


def _host_checks(hv: HostVars, is_agent: bool, is_windows: bool) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for i, dut in enumerate(hv.duts):
        if dut.wipe_ok and "purge" not in dut.allow and "op_mode" not in dut.allow:
            out.append((f"duts[{i}].wipe_ok", "wipe_ok without any destructive operation in allow"))
        if is_windows and dut.kind != "physicaldrive":
            out.append((f"duts[{i}].kind", f"{dut.kind}: a Windows host's DUT is a physicaldrive (docs/windows.md)"))
        if not is_windows and dut.kind == "physicaldrive":
            out.append((f"duts[{i}].kind", f"physicaldrive: a Windows disk, on a host outside {WINDOWS_GROUP}"))
    if (is_agent or is_windows) and not hv.duts:
        out.append(("duts", "an agent host must declare at least one DUT"))
    return out


def _cross_host_checks(reader: _Reader, hosts: dict[str, Host], merged: dict[str, _Merged]) -> None:
    for key in ("serial", "wwn"):
        owner: dict[str, str] = {}
        for name, host in hosts.items():
            for i, dut in enumerate(host.duts):
                value = getattr(dut, key)
                if value is None:
                    continue
                if value in owner and owner[value] != name:
                    where = _where(merged[name], f"duts[{i}].{key}", reader.root / "hosts.yml")
                    reader.problems.append(Problem(where, f"{value!r} is also declared by host {owner[value]}"))
                owner.setdefault(value, name)


def _structure_checks(reader: _Reader, group_files: dict[str, list[Path]], host_files: dict[str, list[Path]],
                      hosts: list[str]) -> None:
    for name, files in group_files.items():
        if name not in reader.groups:
            reader.problem(files[0] if files else reader.root / "group_vars" / name, "",
                           f"group_vars for unknown group {name!r}")
    for name, files in host_files.items():
        if name not in hosts:
            reader.problem(files[0] if files else reader.root / "host_vars" / name, "",
                           f"host_vars for unknown host {name!r}")
    controllers = _members(reader.groups, "controller")
    if len(controllers) != 1:
        reader.problem(reader.root / "hosts.yml", "all.children.controller",
                       f"the lab needs exactly one controller host (got {len(controllers)})")
    if not _members(reader.groups, "agents") and not _members(reader.groups, WINDOWS_GROUP):
        reader.problem(reader.root / "hosts.yml", "all.children.agents", "the lab needs at least one agent host")


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory directory; raise :class:`InventoryError` with every problem."""
    root = Path(path)
    reader = _Reader(root)
    reader.read_hosts()
    group_files, host_files = reader.vars_files("group_vars"), reader.vars_files("host_vars")
    all_hosts = _members(reader.groups, "all")
    if reader.groups:
        _structure_checks(reader, group_files, host_files, all_hosts)
    hosts: dict[str, Host] = {}
    merged_by_host: dict[str, _Merged] = {}
    for name in all_hosts:
        in_groups = [g for g in reader.groups.values() if name in _members(reader.groups, g.name)]
        merged = _merge_host(reader, name, in_groups, group_files, host_files.get(name, []), root / "hosts.yml")
        merged_by_host[name] = merged
        host = _validate_host(name, [g.name for g in in_groups], merged, root / "hosts.yml", reader.problems)
        if host is not None:
            hosts[name] = host
    _cross_host_checks(reader, hosts, merged_by_host)
    if reader.problems:
        raise InventoryError(str(root), list(dict.fromkeys(reader.problems)))
    groups = {g: tuple(_members(reader.groups, g)) for g in reader.groups}
    return Inventory(path=str(root), hosts=hosts, groups=groups)
