"""Release what an application step holds, from its ``app-state.json``: stop the servers it started (only if pid
AND start ticks still match: a reused pid is never signalled), unmount its mountpoint. Idempotent; the agent
calls it after the step process ended, also after an agent restart or after it killed the process group.

``app-state.json`` (written by :mod:`agents.appstep` before it waits on anything)::

    {"mountpoint": "<attempt>/mnt" | null, "device": "/dev/..." | null,
     "servers": [{"pid": int, "start_ticks": int, "kind": "mariadbd", "datadir": str, "group": bool}]}

``group``: the entry leads its own process group (an external command); the whole group is signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from agents.apps.fs import mounted, umount, write_json_atomic
from agents.apps.proc import alive, read_bounded, start_ticks, stop_pid

SPEC_MAX_BYTES = 1 << 20
STOP_SIGNAL = {"postgres": signal.SIGINT}   # a server kind's clean, prompt shutdown signal (default SIGTERM)

STATE_FILE = "app-state.json"
STATE_MAX_BYTES = 1 << 20
MAX_SERVERS = 64

__all__ = ["STATE_FILE", "mounted", "read_state", "release"]


def read_state(attempt_dir: Path) -> dict[str, Any]:
    """The recorded state, sanitised (unknown or malformed entries dropped)."""
    empty: dict[str, Any] = {"mountpoint": None, "device": None, "servers": []}
    p = attempt_dir / STATE_FILE
    try:
        raw = json.loads(read_bounded(p, STATE_MAX_BYTES))
    except (OSError, ValueError):
        return empty
    if not isinstance(raw, dict):
        return empty
    servers = []
    for s in raw.get("servers", [])[:MAX_SERVERS] if isinstance(raw.get("servers"), list) else []:
        if (isinstance(s, dict) and type(s.get("pid")) is int and type(s.get("start_ticks")) is int
                and s["pid"] > 1 and s["pid"] != os.getpid()):
            servers.append({"pid": s["pid"], "start_ticks": s["start_ticks"], "kind": str(s.get("kind", "?"))[:32],
                            "datadir": str(s.get("datadir", ""))[:4096], "group": s.get("group") is True})
    mp = raw.get("mountpoint")
    dev = raw.get("device")
    return {"mountpoint": mp if isinstance(mp, str) else None, "device": dev if isinstance(dev, str) else None,
            "servers": servers}


def strays(mountpoint: Path) -> list[tuple[int, int, str]]:
    """(pid, start ticks, program) of processes whose arguments name a path under ``mountpoint`` (a server
    started by a step killed before it could record it)."""
    root = os.path.realpath(mountpoint)
    if root in ("/", ""):
        return []
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            args = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        texts = [a.decode(errors="replace") for a in args if a]
        if any(t == root or root + "/" in t or t.endswith("=" + root) for t in texts[1:]):
            ticks = start_ticks(int(d.name))
            if ticks is not None:
                out.append((int(d.name), ticks, os.path.basename(texts[0]) if texts else "?"))
    return out


def group_members(pgid: int, since_ticks: int) -> list[int]:
    """Live processes of process group ``pgid`` started no earlier than its recorded leader (``since_ticks``):
    the leader may be gone while a child it left behind still runs on the DUT."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            st = (d / "stat").read_text()
            fields = st[st.rindex(")") + 2:].split()
            if fields[0] not in ("Z", "X") and int(fields[2]) == pgid and int(fields[19]) >= since_ticks:
                out.append(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _group_gone(pgid: int, ticks: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while group_members(pgid, ticks):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _stop_group(pgid: int, ticks: int, grace_s: float) -> str:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        if _group_gone(pgid, ticks, wait):
            return f"process group {pgid}: {'stopped (SIGTERM)' if sig == signal.SIGTERM else 'killed (SIGKILL)'}"
    return f"process group {pgid}: still running after SIGKILL"


def own_mountpoint(attempt_dir: Path) -> Path:
    """The attempt's own mountpoint, from the spec the agent wrote (``<mount_root>/<attempt_id>``), else
    ``<attempt>/mnt``: the only one :func:`release` ever unmounts."""
    from agents.apps import AppSpec

    try:
        spec = AppSpec.model_validate_json(read_bounded(attempt_dir / "app-spec.json", SPEC_MAX_BYTES))
        if spec.attempt_id == attempt_dir.name:
            return spec.mountpoint(attempt_dir)
    except (OSError, ValueError):
        pass
    return attempt_dir / "mnt"


def release(attempt_dir: Path, grace_s: float = 120.0) -> list[str]:
    """Stop the recorded servers still alive, unmount the recorded mountpoint if mounted. Returns what it did, one
    line each (empty: nothing was held)."""
    attempt_dir = Path(attempt_dir)
    state = read_state(attempt_dir)
    lines: list[str] = []
    left = []
    for s in state["servers"]:
        pid, ticks, kind = s["pid"], s["start_ticks"], s["kind"]
        if not (group_members(pid, ticks) if s["group"] else alive(pid, ticks)):
            continue
        # PostgreSQL: SIGTERM is its "smart" shutdown (waits for every client); SIGINT is the fast one
        sig = STOP_SIGNAL.get(kind, signal.SIGTERM)
        what = _stop_group(pid, ticks, grace_s) if s["group"] else stop_pid(pid, ticks, grace_s, sig=sig)
        lines.append(f"{kind} {what}")
        if group_members(pid, ticks) if s["group"] else alive(pid, ticks):
            left.append(s)
    own_mp = own_mountpoint(attempt_dir)
    for pid, ticks, argv0 in strays(own_mp):
        lines.append(f"{argv0} (not recorded, runs on the mountpoint) {stop_pid(pid, ticks, grace_s)}")
    mp = state["mountpoint"]
    if mp is not None:
        # only the attempt's own mountpoint: a state file never makes us unmount anything else
        own = os.path.realpath(own_mp)
        if os.path.realpath(mp) != own:
            lines.append(f"refused to unmount {mp}: not this attempt's mountpoint {own}")
            mp = None
        elif mounted(own):
            what = umount(Path(own))
            lines.append(what)
            mp = own if "STILL MOUNTED" in what else None
        else:
            mp = None
        if mp is None and own_mp != attempt_dir / "mnt":
            with contextlib.suppress(OSError):
                own_mp.rmdir()
    if (attempt_dir / STATE_FILE).exists() and (state["servers"] or state["mountpoint"]):
        with contextlib.suppress(OSError):
            write_json_atomic(attempt_dir / STATE_FILE, {"mountpoint": mp, "device": state["device"] if mp else None,
                                                         "servers": left})
    lazy = [x for x in lines if "lazily unmounted" in x]
    if lazy:           # something still held the filesystem: the step's end says so, never "clean"
        raise RuntimeError("; ".join(lazy))
    return lines
