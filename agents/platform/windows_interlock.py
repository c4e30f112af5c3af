"""The safety interlock's observation of a Windows DUT (:meth:`agents.platform.windows.WindowsPlatform.observe_dut`).

:mod:`labcontract.interlock` decides (standard library only, Linux probes); this module gives it the same
:class:`~labcontract.interlock.ObservedState` for ``//./PhysicalDriveN`` from two PowerShell queries
(``disk_state``: ``Get-Disk``; ``partitions``: ``Get-Partition -DiskNumber N``), read as untrusted input
like every query of the Windows platform. The mapping (docs/windows.md, "The interlock on Windows"):

* no such disk -> ``exists=False`` (refused: *missing*);
* the disk, or one of its partitions, ``IsBoot`` / ``IsSystem`` -> ``backs_root`` (never overridable);
* each drive letter (``D:\\``) and folder access path of a partition -> a mount point (never overridable); the
  ``\\\\?\\Volume{GUID}\\`` path every volume has is its name, not a mount;
* a partition of an **online** disk without a drive letter or folder path -> also a mount point,
  ``partition N (online volume)``: Windows mounts the volumes of an online disk itself and refuses raw
  writes to the areas they use, so a DUT disk is offline (``Set-Disk -IsOffline $true``) or has no partition;
* ``PartitionStyle`` GPT / MBR -> a partition-table signature (``gpt`` / ``dos``, which ``wipe_ok`` lifts);
  RAW -> none;
* a query that fails, exits non-zero, prints too much, not JSON, or a value of the wrong type or range ->
  ``probe_error`` with the reason (refused: *probe_failed*), never half-used.

``IsReadOnly`` is read and typed but refuses nothing: a write to a read-only disk fails in fio with Windows'
reason, which is no danger to data.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agents.platform.common import read_int, read_text
from labcontract.errors import InputError, Problem
from labcontract.facts import windows_drive_path
from labcontract.interlock import ObservedState, Signature

__all__ = ["observe_drive"]

Query = Callable[[str, int], list[dict[str, object]]]
"""Runs a query of :data:`agents.platform.windows.QUERIES` for a drive number (InputError when its output is
refused)."""

MAX_PARTITIONS = 1024
MAX_ACCESS_PATHS = 64
MAX_PATH = 1024
MAX_REASON = 500
_STYLE = {"0": None, "1": "dos", "2": "gpt", "raw": None, "mbr": "dos", "gpt": "gpt"}
_LETTER = re.compile(r"^[A-Za-z]\Z")
_VOLUME_NAME = re.compile(r"^\\\\\?\\Volume\{[0-9A-Fa-f-]{36}\}\\\Z")


def _flag(obj: dict[str, object], key: str, where: str, problems: list[Problem]) -> bool:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value is True
    problems.append(Problem(f"{where}.{key}", f"expected true or false, got {type(value).__name__}"))
    return False


def _style(disk: dict[str, object], problems: list[Problem]) -> str | None:
    value = disk.get("PartitionStyle")
    key = str(value).strip().lower() if isinstance(value, str | int) and not isinstance(value, bool) else None
    if key is None or key not in _STYLE:
        problems.append(Problem("disk.PartitionStyle", f"unknown value {str(value)[:40]!r}"))
        return None
    return _STYLE[key]


def _access_paths(part: dict[str, object], where: str, problems: list[Problem]) -> list[str]:
    value = part.get("AccessPaths")
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value     # PowerShell 5.1 writes a lone path unwrapped
    if not isinstance(items, list) or len(items) > MAX_ACCESS_PATHS:
        problems.append(Problem(f"{where}.AccessPaths", f"expected at most {MAX_ACCESS_PATHS} strings"))
        return []
    out = []
    for i, item in enumerate(items):
        path = read_text({f"AccessPaths[{i}]": item}, f"AccessPaths[{i}]", where, problems, max_len=MAX_PATH)
        if path is not None and not _VOLUME_NAME.match(path):
            out.append(path)
    return out


def _partition_mounts(parts: list[dict[str, object]], online: bool,
                      problems: list[Problem]) -> tuple[list[str], bool]:
    """(mount points, any boot/system partition) of the disk's partitions."""
    mounts: list[str] = []
    system = False
    for i, part in enumerate(parts):
        where = f"partition[{i}]"
        number = read_int(part, "PartitionNumber", where, problems, lo=0, hi=MAX_PARTITIONS, required=True)
        letter = read_text(part, "DriveLetter", where, problems, max_len=8)
        if letter is not None and not _LETTER.match(letter):
            problems.append(Problem(f"{where}.DriveLetter", f"not a drive letter: {letter[:8]!r}"))
            letter = None
        read_text(part, "Type", where, problems, max_len=64)
        system = _flag(part, "IsBoot", where, problems) | _flag(part, "IsSystem", where, problems) | system
        points = ([f"{letter.upper()}:\\"] if letter else []) + _access_paths(part, where, problems)
        points = list(dict.fromkeys(points))
        if not points and online:
            points = [f"partition {number} (online volume)"]
        mounts += points
    return list(dict.fromkeys(mounts)), system


def _reason(e: InputError) -> str:
    """Every problem of ``e`` on one line (what the refusal shows after "signature probe failed: ")."""
    return "; ".join(f"{e.source}: {p}" for p in e.problems)[:MAX_REASON]


def observe_drive(query: Query, path: str, number: int | None) -> ObservedState:
    """The observed state of drive ``number`` (``path`` as the DUT names it; None: not a drive path).
    ``Get-Partition`` runs only when ``Get-Disk`` counts partitions (on a disk with none it is an error)."""
    if number is None:
        return ObservedState(path=path, real_path=path, probe_error="not a \\\\.\\PhysicalDriveN path: "
                                                                    "only whole disks are DUTs on Windows")
    real = windows_drive_path(number)
    problems: list[Problem] = []
    try:
        disks = query("disk_state", number)
        if not disks:
            return ObservedState(path=path, real_path=real, exists=False)
        if len(disks) != 1:
            raise InputError("powershell disk_state", [Problem("", f"{len(disks)} disks numbered {number}")])
        [disk] = disks
        count = read_int(disk, "NumberOfPartitions", "disk", problems, lo=0, hi=MAX_PARTITIONS, required=True)
        parts = query("partitions", number) if count else []     # none, or a bad count (a problem already)
    except InputError as e:
        return ObservedState(path=path, real_path=real, probe_error=_reason(e))
    if count and not parts:
        problems.append(Problem("partitions", f"Get-Disk counts {count} partition(s), Get-Partition lists none"))
    if read_int(disk, "Number", "disk", problems, lo=0, hi=9999, required=True) not in (number, None):
        problems.append(Problem("disk.Number", f"not disk {number}"))
    offline = _flag(disk, "IsOffline", "disk", problems)
    if disk.get("IsOffline") is None:
        problems.append(Problem("disk.IsOffline", "missing: whether the disk is online is not known"))
    disk_system = _flag(disk, "IsBoot", "disk", problems) | _flag(disk, "IsSystem", "disk", problems)
    _flag(disk, "IsReadOnly", "disk", problems)
    style = _style(disk, problems)
    mounts, part_system = _partition_mounts(parts, not offline, problems)
    if problems:
        return ObservedState(path=path, real_path=real,
                             probe_error=_reason(InputError("powershell Get-Disk/Get-Partition", problems)))
    signatures = (Signature(type=style, kind="partition_table"),) if style else ()
    return ObservedState(path=path, real_path=real, mountpoints=tuple(mounts), signatures=signatures,
                         backs_root=disk_system or part_system)
