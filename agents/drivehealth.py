"""Read the declared DUTs' health (``nvme smart-log``, ``smartctl``) around a step.

Reading an NVMe log page is an admin command: the kernel allows it to root (CAP_SYS_ADMIN) only, and the agent
never runs as root. Three sources, chosen once at the agent's start (:func:`source_for`):

- :class:`HelperSource`: a root helper on a UNIX socket (``storagelab-drive-health.socket``, deployed by the
  ``lab_agent`` role): each connection runs ``python -m agents.cmd.drivehealth`` as root, which reads the DUTs
  *it* was configured with (a root-owned file rendered from the inventory) and writes their readings. It reads
  nothing from the connection: nothing the agent (or whoever took it over) sends can choose a device or an
  argument.
- :class:`DirectSource`: an agent that runs as root reads them itself (the embedded test lab).
- none: the readings are left out (a ``drive-health.json`` is not written).

A device that is not NVMe nor known to smartctl (a loop device, a RAM disk, a file) gets no reading; a command that
fails or hangs gets a reading with its ``error``. Nothing here raises into a step.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from labcontract.drivehealth import (
    ARTIFACT_MAX_BYTES,
    DriveHealth,
    HealthReading,
    nvme_smart_snapshot,
    smartctl_snapshot,
)

if TYPE_CHECKING:           # the root helper runs this module on every connection: it never imports the protocol
    from labcontract.protocol import HealthCheck

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 15.0          # one tool call (a failing drive may hang an admin command)
# the helper's whole answer: a Python start importing pydantic on each connection, over a minute of wall time on a
# slow host that is busy (an emulated VM-lab guest beside other work: 62 s measured); a hung drive is bounded per
# tool call (READ_TIMEOUT_S) and the helper's unit stops it after RuntimeMaxSec
HELPER_TIMEOUT_S = 180.0
DEFAULT_HELPER_SOCKET = Path("/run/storagelab/drive-health.sock")
NOT_A_DRIVE = ("loop", "ram", "zram", "nbd", "dm-", "md")

Run = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                          timeout=READ_TIMEOUT_S, check=False)


def read_one(name: str, path: str, run: Run | None = None) -> HealthReading | None:
    """One DUT's reading now (None: not a drive that has a health log: a loop device, a file, a RAM disk)."""
    real = os.path.realpath(path)
    base = os.path.basename(real)
    at = time.time()
    if not real.startswith("/dev/") or base.startswith(NOT_A_DRIVE):
        return None
    if base.startswith("nvme") and shutil.which("nvme"):
        argv, parse = ["nvme", "smart-log", real, "-o", "json"], nvme_smart_snapshot
    elif shutil.which("smartctl") and not base.startswith("nvme"):
        argv, parse = ["smartctl", "-H", "-A", "-j", real], smartctl_snapshot
    else:
        return None
    try:
        proc = (run or _run)(argv)
        if argv[0] == "nvme" and proc.returncode != 0:
            raise ValueError(f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-200:]}")
        # smartctl's exit code is a bit mask of the drive's state, not of the command's success: its JSON says
        return HealthReading(name=name, path=path, at=at, snapshot=parse(proc.stdout))
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        return HealthReading(name=name, path=path, at=at, error=f"{argv[0]} {argv[1]}: {e}"[:256])


def read_all(duts: Sequence[tuple[str, str]], run: Run | None = None) -> tuple[HealthReading, ...]:
    """The readings of (name, path) DUTs now, those without a health log left out."""
    return tuple(r for name, path in duts if (r := read_one(name, path, run)) is not None)


Duts = Sequence[tuple[str, str]]     # (declared name, path)


class HealthSource(Protocol):
    name: str

    def read(self, duts: Duts) -> tuple[HealthReading, ...]: ...


class DirectSource:
    """This process reads the logs itself (it runs as root)."""

    name = "this process (root)"

    def read(self, duts: Duts) -> tuple[HealthReading, ...]:
        return read_all(duts)


class HelperSource:
    """The root helper at ``socket_path`` reads its own configured DUTs; the readings of ``duts`` are kept."""

    def __init__(self, socket_path: Path, timeout_s: float = HELPER_TIMEOUT_S) -> None:
        self.socket_path, self.timeout_s = socket_path, timeout_s
        self.name = f"the root helper at {socket_path}"

    def read(self, duts: Duts) -> tuple[HealthReading, ...]:
        at = time.time()
        try:
            raw = self._ask()
            readings = DriveHealth.model_validate_json(raw).before
        except (OSError, ValueError) as e:
            why = f"{HELPER_ERROR} {self.socket_path}: {e}"[:256]
            log.warning("%s", why)
            return tuple(HealthReading(name=name, path=path, at=at, error=why) for name, path in duts)
        by_name = {r.name: r for r in readings}
        return tuple(by_name[name] for name, _ in duts if name in by_name)

    def _ask(self) -> bytes:
        deadline = time.monotonic() + self.timeout_s
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(self.timeout_s)
            s.connect(str(self.socket_path))
            s.shutdown(socket.SHUT_WR)              # it reads nothing: say so at once
            chunks: list[bytes] = []
            size = 0
            while True:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                chunk = s.recv(65536)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > ARTIFACT_MAX_BYTES:
                    raise ValueError(f"its answer passed {ARTIFACT_MAX_BYTES} bytes")
                chunks.append(chunk)


HELPER_ERROR = "drive-health helper"


def smart_check(reading: HealthReading) -> HealthCheck:
    """The heartbeat's SMART check of a DUT from a helper's reading (an agent that is not root cannot run the
    platform's own): failing on a critical warning or a failed SMART verdict; a helper that could not be asked
    says nothing of the drive (``unknown``), a tool that failed on the drive is a failure."""
    from labcontract.protocol import HealthCheck

    snap = reading.snapshot
    if snap is None:
        why = reading.error or "no reading"
        unknown = why.startswith(HELPER_ERROR)
        return HealthCheck(check="smart", target=reading.path, ok=unknown,
                           detail=f"unknown ({why})" if unknown else why)
    if snap.source == "smartctl":
        return HealthCheck(check="smart", target=reading.path, ok=snap.healthy is not False,
                           detail="SMART overall-health " + ("FAILED" if snap.healthy is False else "PASSED"))
    warn = snap.critical_warning or 0
    return HealthCheck(check="smart", target=reading.path, ok=warn == 0,
                       detail=f"critical_warning=0x{warn:02x} avail_spare={snap.available_spare}% "
                              f"percent_used={snap.percent_used}%")


def source_for(helper_socket: Path | None) -> HealthSource | None:
    """The agent's source of readings: the helper when its socket is there, this process when it is root, else
    none."""
    if helper_socket is not None and helper_socket.exists():
        return HelperSource(helper_socket)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return DirectSource()
    return None


def helper_answer(config: Path) -> bytes:
    """What the root helper writes: the readings of the DUTs its root-owned configuration declares, as a
    :class:`DriveHealth` whose ``before`` holds them (the configuration refused as a whole when it does not fit)."""
    data = json.loads(config.read_bytes()[:ARTIFACT_MAX_BYTES])
    duts = data.get("duts") if isinstance(data, dict) else None
    if not isinstance(duts, list) or len(duts) > 64:
        raise ValueError(f"{config}: duts: a list of at most 64 {{name, path}} is due")
    pairs: list[tuple[str, str]] = []
    for i, d in enumerate(duts):
        if not (isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("path"), str)
                and d["path"].startswith("/dev/") and len(d["path"]) <= 512 and 0 < len(d["name"]) <= 128):
            raise ValueError(f"{config}: duts[{i}]: a name and a /dev/ path are due")
        pairs.append((d["name"], d["path"]))
    return DriveHealth(before=read_all(pairs)).model_dump_json().encode()
