"""The filesystem on a DUT: make it (only the OP mode's footprint when asked), read its UUID, remember it in a
marker (``<state_dir>/apps/<dut>.json``), mount and unmount it, tell whether a path is mounted."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

from agents.apps import DutSpec
from labcontract.errors import AppStepError

TOOL_TIMEOUT_S = 120           # blkid, losetup, umount: a dead device never hangs the step or the agent

MARKER_MAX_BYTES = 64 << 10
NOT_PREPARED = "the DUT does not hold the filesystem this run's prepare step made"


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mountinfo(path: Path = Path("/proc/self/mountinfo")) -> list[tuple[str, str, str]]:
    """(major:minor, mount point, source) of every mount."""
    rows = []
    try:
        text = path.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 10 or "-" not in parts:
            continue
        sep = parts.index("-")
        rows.append((parts[2], _unescape(parts[4]), _unescape(parts[sep + 2]) if len(parts) > sep + 2 else ""))
    return rows


def mounted(path: Path | str) -> bool:
    """Something is mounted on ``path``."""
    want = os.path.realpath(path)
    return any(mp == want for _, mp, _ in mountinfo())


def _majmin(dev: Path) -> str | None:
    try:
        st = os.stat(dev)
    except OSError:
        return None
    if not stat.S_ISBLK(st.st_mode):
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def _block_ids(majmin: str) -> set[str]:
    """The device and its partitions (major:minor)."""
    ids = {majmin}
    base = Path(f"/sys/dev/block/{majmin}")
    with contextlib.suppress(OSError):
        for sub in base.iterdir():
            if (sub / "partition").exists():
                with contextlib.suppress(OSError):
                    ids.add((sub / "dev").read_text().strip())
    return ids


def _loops_of(file: Path) -> list[str]:
    res = subprocess.run(["losetup", "-j", str(file), "-O", "NAME", "-n"], capture_output=True, text=True,
                         timeout=TOOL_TIMEOUT_S)
    return [x.strip() for x in res.stdout.splitlines() if x.strip()] if res.returncode == 0 else []


def in_use(dut: DutSpec) -> str | None:
    """Why the DUT cannot get a new filesystem (it or a partition is mounted, it holds a mounted loop file),
    or None."""
    devs: list[Path] = [Path(dut.path)]
    if dut.kind == "file":
        devs = [Path(x) for x in _loops_of(Path(dut.path))]
    ids: set[str] = set()
    for d in devs:
        if (mm := _majmin(d)) is not None:
            ids |= _block_ids(mm)
    for mm, mp, _ in mountinfo():
        if mm in ids:
            return f"DUT {dut.name} ({dut.path}) is mounted on {mp}"
    if dut.kind == "block" and (mm := _majmin(Path(dut.path))) is not None:
        with contextlib.suppress(OSError):
            if holders := [p.name for p in Path(f"/sys/dev/block/{mm}/holders").iterdir()]:
                return f"DUT {dut.name} ({dut.path}) is held by {', '.join(holders)}"
    return None


def _run(argv: list[str], what: str, timeout_s: float = 3600) -> str:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AppStepError(f"{what}: {e}") from None
    if res.returncode != 0:
        msg = " | ".join((res.stderr or res.stdout).strip().splitlines()[-4:])
        raise AppStepError(f"{what} failed (exit {res.returncode}): {msg}")
    return res.stdout


def mkfs(dut: DutSpec, fs: str, size_bytes: int | None) -> list[str]:
    """Make ``fs`` on the DUT (its first ``size_bytes`` when given), without discarding. Returns the argv."""
    if size_bytes is not None and dut.size_bytes and size_bytes > dut.size_bytes:
        raise AppStepError(f"the filesystem size {size_bytes} exceeds DUT {dut.name}'s {dut.size_bytes} bytes")
    if fs == "ext4":
        # inode tables and journal zeroed now: ext4lazyinit would write to the DUT while it is measured
        argv = ["mkfs.ext4", "-F", "-q", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", dut.path]
        if size_bytes is not None:
            argv.append(f"{size_bytes // 4096 * 4}k")
    elif fs == "xfs":
        argv = ["mkfs.xfs", "-f", "-q", "-K"]
        if size_bytes is not None:
            argv += ["-d", f"size={size_bytes // 4096 * 4096}"]
        argv.append(dut.path)
    else:
        raise AppStepError(f"unknown filesystem {fs!r}")
    _run(argv, f"mkfs on {dut.path}")
    return argv


def fs_uuid(dev: str) -> str | None:
    """The filesystem UUID on ``dev`` as probed now (no cache), or None."""
    res = subprocess.run(["blkid", "-p", "-s", "UUID", "-o", "value", dev], capture_output=True, text=True,
                         timeout=TOOL_TIMEOUT_S)
    out = res.stdout.strip()
    return out or None if res.returncode == 0 else None


def marker_path(state_dir: Path, dut: DutSpec) -> Path:
    return state_dir / "apps" / f"{dut.name}.json"


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_marker(state_dir: Path, dut: DutSpec) -> dict[str, Any] | None:
    p = marker_path(state_dir, dut)
    try:
        if p.stat().st_size > MARKER_MAX_BYTES:
            return None
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_prepared(state_dir: Path, dut: DutSpec, run_id: str, kind: str) -> dict[str, Any]:
    """The marker, if the DUT holds the filesystem this run's prepare made and loaded; AppStepError otherwise."""
    m = read_marker(state_dir, dut)
    if m is None:
        raise AppStepError(f"{NOT_PREPARED} (DUT {dut.name}: no marker)")
    if m.get("run_id") != run_id:
        raise AppStepError(f"{NOT_PREPARED} (DUT {dut.name}: prepared by run {m.get('run_id')!r})")
    if m.get("kind") != kind:
        raise AppStepError(f"{NOT_PREPARED} (DUT {dut.name}: prepared for {m.get('kind')!r}, not {kind})")
    uuid = fs_uuid(dut.path)
    if uuid is None or uuid != m.get("uuid"):
        raise AppStepError(f"{NOT_PREPARED} (DUT {dut.name}: filesystem UUID {uuid}, the prepare made {m.get('uuid')})")
    if not m.get("loaded"):
        raise AppStepError(f"{NOT_PREPARED} (DUT {dut.name}: its prepare step did not finish)")
    return m


def mount(dut: DutSpec, fs: str, mountpoint: Path) -> None:
    mountpoint.mkdir(parents=True, exist_ok=True)
    # nosuid, nodev, noexec: whatever the DUT holds is data, never a program or a device
    opts = "noatime,nosuid,nodev,noexec" + (",loop" if dut.kind == "file" else "")
    _run(["mount", "-t", fs, "-o", opts, dut.path, str(mountpoint)], f"mount {dut.path} on {mountpoint}", 300)


def umount(mountpoint: Path, tries: int = 10) -> str:
    """Unmount ``mountpoint`` (retrying while busy; ``umount -l`` as the last resort). Returns what it did."""
    if not mounted(mountpoint):
        return f"{mountpoint}: not mounted"
    err = ""
    for i in range(tries):
        try:
            res = subprocess.run(["umount", str(mountpoint)], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            err = f"umount did not return within {TOOL_TIMEOUT_S} s"
            continue
        if res.returncode == 0 or not mounted(mountpoint):
            return f"{mountpoint}: unmounted"
        err = res.stderr.strip()
        time.sleep(min(0.2 * (i + 1), 1.0))
    try:
        res = subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{mountpoint}: STILL MOUNTED: umount -l did not return within {TOOL_TIMEOUT_S} s"
    if res.returncode == 0 or not mounted(mountpoint):
        return f"{mountpoint}: lazily unmounted (umount -l) after {tries} tries: {err}"
    return f"{mountpoint}: STILL MOUNTED: {res.stderr.strip() or err}"
