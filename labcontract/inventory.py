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

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from labcontract.errors import InventoryError, Problem
from labcontract.inventory_models import (
    KNOWN_GROUPS,
    OP_METHODS,
    PURGE_METHODS,
    WINDOWS_GROUP,
    Agent,
    Dut,
    Host,
    HostVars,
    Inventory,
    Nic,
)
from labcontract.inventory_values import HOST_NAME
from labcontract.suitebase import problems_from

__all__ = ["KNOWN_GROUPS", "OP_METHODS", "PURGE_METHODS", "WINDOWS_GROUP", "Agent", "Dut", "Host", "HostVars",
           "Inventory", "Nic", "load_inventory"]
# the models are labcontract.inventory_models; they are named here too, where callers have always found them

_VARS_SUFFIXES = (".yml", ".yaml", ".json")

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
    problems += [Problem(_where(merged, loc, fallback), msg)
                 for loc, msg in _same_disk_checks(hv, _raw_items(merged.values, "duts"))]
    if "agents" in groups and WINDOWS_GROUP in groups:
        problems.append(Problem(str(fallback), f"all.children: host {name} is in agents (Linux) and in "
                                               f"{WINDOWS_GROUP}: one or the other"))
    else:
        problems += [Problem(_where(merged, loc, fallback), msg)
                     for loc, msg in _host_checks(hv, "agents" in groups, WINDOWS_GROUP in groups)]
    return Host(name=name, groups=tuple(groups), vars=merged.values, duts=hv.duts, nics=hv.nics,
                ansible_host=hv.ansible_host, metrics_address=hv.metrics_address)


def _same_disk_checks(hv: HostVars, raw: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Two spellings of one Windows disk (``PhysicalDrive1`` and ``\\\\.\\PhysicalDrive01``): the same path once
    validated; a path written twice alike is :func:`_duplicate_checks`' to report."""
    first: dict[str, tuple[int, object]] = {}
    out = []
    for i, dut in enumerate(hv.duts):
        given = raw[i].get("path") if i < len(raw) else None
        if dut.path in first and first[dut.path][1] != given:
            j, other = first[dut.path]
            out.append((f"duts[{i}].path", f"{given!r} is the disk of duts[{j}] ({other!r}): {dut.path}"))
        first.setdefault(dut.path, (i, given))
    return out


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
