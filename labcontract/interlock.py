"""The one safety interlock for destructive DUT operations (purge, OP-mode changes).

Pure Python, standard library only: the controller imports it as ``labcontract.interlock``
before it dispatches a destructive step, and the Ansible module ``lab_dut`` runs the very same
file on the lab host as ``ansible.module_utils.lab_interlock`` (``playbooks/module_utils/
lab_interlock.py`` is a symlink to this file). Do not import anything outside the standard
library here, and keep it Python 3.8-compatible at run time (lab hosts' system Python).

Two halves:

* :func:`refusal_reasons` decides. Given the device, the DUTs the host declared and the
  device's observed state, it returns every reason to refuse (empty list: go ahead).
* :func:`observe` gathers that observed state on the local host from ``/proc/self/mountinfo``,
  ``/proc/swaps``, ``/sys/class/block``, ``wipefs -n -J`` (or ``blkid -p`` when wipefs is
  missing) and ``lsblk -J``.

What ``wipe_ok: true`` (declared per DUT in the inventory) overrides: **only the on-disk
signatures** (a filesystem, a partition table, an LVM PV or MD member superblock). It says "the
data on this device is disposable". It never overrides:

* *not declared*: a device the host has not declared is never written;
* *operation not allowed*: the DUT's ``allow`` list does not include the operation;
* *mounted*, *swap*, *held* (a device-mapper/MD/loop holder sits on top): the device is in
  use right now, writing under a live filesystem or array corrupts the running system;
* *backs the root filesystem*: there is no lab in which wiping the OS disk is intended.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

# Reason codes. OVERRIDABLE holds the only ones wipe_ok lifts.
NOT_DECLARED = "not_declared"
NOT_ALLOWED = "operation_not_allowed"
MISSING = "missing"
MOUNTED = "mounted"
SWAP = "swap"
HELD = "held"
BACKS_ROOT = "backs_root"
SIGNATURE = "signature"
PROBE_FAILED = "probe_failed"          # the signature probe (wipefs / blkid) failed or could not run
OVERRIDABLE = frozenset({SIGNATURE})

DESTRUCTIVE_OPERATIONS = ("purge", "op_mode", "write")
# fio modes that write to the device (a precondition round or a measurement with writes destroys data too)
WRITING_RW = frozenset({"write", "randwrite", "rw", "readwrite", "randrw", "trim", "randtrim", "trimwrite"})


def destructive_operation(action: str, rw: str | None) -> str | None:
    """The interlock operation a step performs on its devices: ``purge``, ``write``, or None (reads only)."""
    if action == "purge":
        return "purge"
    return "write" if rw in WRITING_RW else None


def app_operation(kind: str, phase: str, destructive: bool = False) -> str | None:
    """The interlock operation of an application step: sysbench / pgbench ``prepare`` makes a filesystem on
    the DUT (``purge``), a ``run`` writes into the filesystem its prepare made (``write``); an external
    workload writes when its declaration says ``destructive`` (else reads only: None)."""
    if kind == "external":
        return "write" if destructive else None
    return "purge" if phase == "prepare" else "write"


def lab_filesystem(current_uuid: str | None, recorded_uuid: str | None) -> bool:
    """Whether the device's filesystem is the one a previous prepare of this lab made: its current UUID
    (:func:`filesystem_uuid`) equals the one recorded in the agent's marker for that DUT."""
    return bool(current_uuid) and current_uuid == recorded_uuid


@dataclass(frozen=True)
class DeclaredDut:
    """A DUT as the inventory declares it (the subset the interlock needs)."""

    name: str
    path: str
    wipe_ok: bool = False
    allow: tuple[str, ...] = DESTRUCTIVE_OPERATIONS

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> DeclaredDut:
        allow = data.get("allow")
        return cls(name=str(data.get("name") or data.get("path")), path=str(data["path"]),
                   wipe_ok=data.get("wipe_ok") is True,
                   allow=tuple(str(a) for a in allow or ()))   # an inventory DUT without allow: nothing


@dataclass(frozen=True)
class Signature:
    """One on-disk signature: ``kind`` is filesystem, partition_table, lvm, md or other."""

    type: str
    kind: str
    offset: str | None = None


@dataclass(frozen=True)
class ObservedState:
    """What the device looks like right now on its host."""

    path: str
    real_path: str
    exists: bool = True
    mountpoints: tuple[str, ...] = ()
    swap: bool = False
    signatures: tuple[Signature, ...] = ()
    holders: tuple[str, ...] = ()
    backs_root: bool = False
    probe_error: str = ""                  # why the signature probe failed ("": it ran)
    lab_fs: bool = False                   # its filesystem is one this lab made (the agent's marker matches)


@dataclass(frozen=True)
class Reason:
    code: str
    message: str

    @property
    def overridable(self) -> bool:
        return self.code in OVERRIDABLE

    def __str__(self) -> str:
        return self.message


class InterlockRefused(Exception):
    """A destructive operation refused. ``str(e)`` names the device and every reason."""

    def __init__(self, device: str, operation: str, reasons: list[Reason]) -> None:
        self.device, self.operation, self.reasons = device, operation, list(reasons)
        super().__init__(refusal_message(device, operation, self.reasons))


def refusal_message(device: str, operation: str, reasons: list[Reason]) -> str:
    return f"refusing {operation} on {device}: " + "; ".join(r.message for r in reasons)


# ---------------------------------------------------------------- decision


def find_declared(device: str, real_path: str, declared: list[DeclaredDut]) -> DeclaredDut | None:
    """The declared DUT that is ``device``: same path, or both resolve to the same node."""
    for dut in declared:
        if dut.path == device or dut.name == device:
            return dut
    for dut in declared:
        if os.path.realpath(dut.path) == real_path:
            return dut
    return None


def _state_reasons(obs: ObservedState, lab_fs: bool = False) -> list[Reason]:
    reasons: list[Reason] = []
    if obs.mountpoints:
        reasons.append(Reason(MOUNTED, f"mounted on {', '.join(obs.mountpoints)}"))
    if obs.swap:
        reasons.append(Reason(SWAP, "in use as swap"))
    if obs.holders:
        reasons.append(Reason(HELD, f"held by {', '.join(obs.holders)} (device-mapper, MD or loop on top)"))
    if obs.backs_root:
        reasons.append(Reason(BACKS_ROOT, "backs the root filesystem"))
    if obs.probe_error:
        reasons.append(Reason(PROBE_FAILED, f"signature probe failed: {obs.probe_error}"))
    for sig in obs.signatures:
        if (lab_fs or obs.lab_fs) and sig.kind == "filesystem":
            continue           # the filesystem this lab made on the DUT (see lab_filesystem): it may be remade
        where = f" at offset {sig.offset}" if sig.offset else ""
        reasons.append(Reason(SIGNATURE, f"carries a {sig.kind.replace('_', ' ')} signature ({sig.type}{where})"))
    return reasons


def refusal_reasons(device: str, declared: list[DeclaredDut], observed: ObservedState,
                    operation: str = "purge", *, lab_fs: bool = False) -> list[Reason]:
    """Every reason to refuse ``operation`` on ``device``; an empty list means allowed. ``lab_fs``: the
    device's filesystem is one the lab itself made (:func:`lab_filesystem`), so its filesystem signature is
    no reason to refuse (a partition table, LVM or MD signature still is; so is being mounted or in use)."""
    if not observed.exists:
        return [Reason(MISSING, "does not exist")]
    dut = find_declared(device, observed.real_path, declared)
    reasons: list[Reason] = []
    if dut is None:
        reasons.append(Reason(NOT_DECLARED, "not a declared DUT of this host"))
    elif operation not in dut.allow:
        allowed = ", ".join(dut.allow) or "nothing"
        reasons.append(Reason(NOT_ALLOWED, f"DUT {dut.name} does not allow {operation} (allow: {allowed})"))
    reasons += _state_reasons(observed, lab_fs)
    if dut is not None and dut.wipe_ok:
        reasons = [r for r in reasons if not r.overridable]
    return reasons


def refusals(observed: list[ObservedState], declared: list[DeclaredDut], operation: str) -> list[str]:
    """One message per device of ``observed`` that ``operation`` must not touch (empty: all allowed)."""
    out = []
    for obs in observed:
        reasons = refusal_reasons(obs.path, declared, obs, operation)
        if reasons:
            out.append(refusal_message(obs.path, operation, reasons))
    return out


def check(device: str, declared: list[DeclaredDut], observed: ObservedState, operation: str = "purge") -> None:
    """Raise :class:`InterlockRefused` when ``operation`` on ``device`` must not happen."""
    reasons = refusal_reasons(device, declared, observed, operation)
    if reasons:
        raise InterlockRefused(device, operation, reasons)


# ---------------------------------------------------------------- parsers (pure)

_PARTITION_TABLES = {"gpt", "dos", "PMBR", "mbr", "atari", "bsd", "sun", "sgi", "mac"}
_LVM = {"LVM2_member", "LVM1_member"}
_MD = {"linux_raid_member", "isw_raid_member", "ddf_raid_member"}


def signature_kind(sig_type: str, usage: str | None = None) -> str:
    if sig_type in _LVM:
        return "lvm"
    if sig_type in _MD:
        return "md"
    if sig_type in _PARTITION_TABLES or usage == "partition_table":
        return "partition_table"
    if usage in (None, "filesystem", "") or sig_type == "swap":
        return "filesystem"
    return "raid" if usage == "raid" else "other"


def parse_wipefs_json(text: str) -> list[Signature]:
    """``wipefs --no-act --json DEV`` output (empty output: no signature)."""
    if not text.strip():
        return []
    doc = json.loads(text)
    out = []
    for sig in doc.get("signatures", []):
        usage = sig.get("usage")
        kind = {"partition-table": "partition_table", "partition table": "partition_table"}.get(usage, usage)
        sig_type = str(sig.get("type"))
        out.append(Signature(sig_type, signature_kind(sig_type, kind), sig.get("offset")))
    return out


def parse_blkid_export(text: str) -> list[Signature]:
    """``blkid -p -o export DEV`` output (``KEY=value`` lines)."""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    out = []
    if "PTTYPE" in values:
        out.append(Signature(values["PTTYPE"], "partition_table"))
    if "TYPE" in values:
        usage = values.get("USAGE")
        out.append(Signature(values["TYPE"], signature_kind(values["TYPE"], usage)))
    return out


def parse_lsblk_json(text: str) -> tuple[list[str], list[str]]:
    """``lsblk -J -o NAME,MOUNTPOINTS,FSTYPE,PTTYPE DEV``: (mountpoints, kernel names) of the tree."""
    mounts: list[str] = []
    names: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        names.append(str(node.get("name")))
        points = node.get("mountpoints") or ([node["mountpoint"]] if node.get("mountpoint") else [])
        mounts.extend(p for p in points if p)
        for child in node.get("children", []):
            walk(child)

    for dev in json.loads(text).get("blockdevices", []):
        walk(dev)
    return mounts, names


def parse_mountinfo(text: str) -> list[tuple[str, str, str]]:
    """``/proc/self/mountinfo``: (major:minor, mountpoint, source) per mount."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        tail = line.split(" - ", 1)[1].split()
        source = tail[1] if len(tail) > 1 else ""
        out.append((fields[2], _unescape(fields[4]), source))
    return out


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def parse_swaps(text: str) -> list[str]:
    """``/proc/swaps``: the swap device/file paths."""
    return [line.split()[0] for line in text.splitlines()[1:] if line.strip()]


# ---------------------------------------------------------------- local observation


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _sys_block(name: str) -> str:
    return os.path.join("/sys/class/block", name)


def _partitions(name: str) -> list[str]:
    base = _sys_block(name)
    try:
        entries = os.listdir(base)
    except OSError:
        return []
    return [e for e in entries if e.startswith(name) and os.path.exists(os.path.join(base, e, "partition"))]


def _holders(name: str, seen: set[str] | None = None) -> list[str]:
    """Holders of ``name``, recursively (dm on md on the disk...)."""
    seen = set() if seen is None else seen
    try:
        direct = sorted(os.listdir(os.path.join(_sys_block(name), "holders")))
    except OSError:
        return []
    out: list[str] = []
    for holder in direct:
        if holder not in seen:
            seen.add(holder)
            out += [holder, *_holders(holder, seen)]
    return out


def _devnum(name: str) -> str:
    return _read(os.path.join(_sys_block(name), "dev")).strip()


def _loops_backed_by(real_path: str) -> list[str]:
    """Loop devices whose backing file is ``real_path`` (a file DUT's "holders")."""
    out = []
    for name in sorted(os.listdir("/sys/class/block")):
        backing = _read(os.path.join(_sys_block(name), "loop", "backing_file")).strip()
        if backing and backing == real_path:
            out.append(name)
    return out


def _probe(argv: list[str], ok: tuple[int, ...] = (0,)) -> tuple[str, str]:
    """(stdout, "") of ``argv``, or ("", why it failed): a probe that cannot run or fails is never "empty"."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return "", f"{argv[0]} could not run: {e}"
    if res.returncode not in ok:
        detail = (res.stderr.strip() or res.stdout.strip())[-300:]
        return "", f"{argv[0]} exited {res.returncode}" + (f": {detail}" if detail else "")
    return res.stdout, ""


def _signatures(real_path: str) -> tuple[list[Signature], str]:
    """The on-disk signatures and, when the probe failed, why (the caller refuses: not "no signature")."""
    if shutil.which("wipefs"):
        out, err = _probe(["wipefs", "--no-act", "--json", "-O", "DEVICE,OFFSET,TYPE,USAGE", real_path])
        parse = parse_wipefs_json
    elif shutil.which("blkid"):
        out, err = _probe(["blkid", "-p", "-o", "export", real_path], ok=(0, 2))   # 2: nothing found
        parse = parse_blkid_export
    else:
        return [], "neither wipefs nor blkid is installed"
    if err:
        return [], err
    try:
        return parse(out), ""
    except (ValueError, AttributeError, TypeError) as e:
        return [], f"{'wipefs' if parse is parse_wipefs_json else 'blkid'} output unreadable: {e}"


def filesystem_uuid(device: str) -> str | None:
    """The UUID of the filesystem on ``device`` (``blkid -p -o export``), None when it has none or the probe
    fails (never "the same" as a recorded one by accident)."""
    if not shutil.which("blkid"):
        return None
    out, err = _probe(["blkid", "-p", "-o", "export", os.path.realpath(device)], ok=(0, 2))
    if err:
        return None
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if values.get("USAGE", "filesystem") != "filesystem":
        return None
    return values.get("UUID") or None


def _root_devnum(mounts: list[tuple[str, str, str]]) -> tuple[str, str]:
    """(major:minor, source) of the root mount (the last mount on "/" wins)."""
    root = [(num, src) for num, point, src in mounts if point == "/"]
    return root[-1] if root else ("", "")


def observe(device: str) -> ObservedState:
    """Gather the observed state of ``device`` (block device or regular file) on this host."""
    real = os.path.realpath(device)
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return ObservedState(path=device, real_path=real, exists=False)
    mounts = parse_mountinfo(_read("/proc/self/mountinfo"))
    swaps = {os.path.realpath(p) for p in parse_swaps(_read("/proc/swaps"))}
    if not stat.S_ISBLK(mode):
        loops = _loops_backed_by(real)
        stack = [n for loop in loops for n in [loop, *_holders(loop)]]
        return _observed(device, real, stack, mounts, swaps, holders=loops)
    name = os.path.basename(real)
    parts = _partitions(name)
    holders = [h for dev in [name, *parts] for h in _holders(dev)]
    return _observed(device, real, [name, *parts, *holders], mounts, swaps, holders=holders)


def _observed(device: str, real: str, stack: list[str], mounts: list[tuple[str, str, str]],
              swaps: set[str], holders: list[str]) -> ObservedState:
    numbers = {_devnum(n) for n in stack} - {""}
    paths = {real} | {"/dev/" + n for n in stack}
    points = tuple(point for num, point, src in mounts if num in numbers or os.path.realpath(src) in paths)
    root_num, root_src = _root_devnum(mounts)
    backs_root = root_num in numbers or (root_src.startswith("/") and os.path.realpath(root_src) in paths)
    signatures, probe_error = _signatures(real)
    return ObservedState(path=device, real_path=real, mountpoints=points, swap=bool(swaps & paths),
                         signatures=tuple(signatures), holders=tuple(dict.fromkeys(holders)),
                         backs_root=backs_root, probe_error=probe_error)


def observed_to_dict(obs: ObservedState) -> dict[str, Any]:
    """JSON-able form (sent by agents with their registration, kept by the controller)."""
    return asdict(obs)


def observed_from_dict(data: dict[str, Any]) -> ObservedState:
    sigs = tuple(Signature(**sig) for sig in data.get("signatures") or ())
    fields = {k: v for k, v in data.items() if k in ObservedState.__dataclass_fields__ and k != "signatures"}
    for key in ("mountpoints", "holders"):
        fields[key] = tuple(fields.get(key) or ())
    return ObservedState(**fields, signatures=sigs)


def check_local(device: str, declared: list[DeclaredDut], operation: str = "purge") -> ObservedState:
    """Observe ``device`` here and :func:`check` it; returns the observation when allowed."""
    observed = observe(device)
    check(device, declared, observed, operation)
    return observed
