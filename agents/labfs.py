"""The filesystem a prepare step of this lab made on a DUT, as the agent recorded it (a marker per DUT in its state
directory): the interlock lets a purge, a fio write or another prepare overwrite that filesystem and no other.
Apart from the application kind, which writes the markers, so that the interlock and the daemon read them without
importing a step kind."""

from __future__ import annotations

import json
from pathlib import Path

from agents.apps.proc import read_bounded
from labcontract import interlock
from labcontract.facts import DeclaredDut

MARKER_MAX_BYTES = 64 << 10


def marker_path(state_dir: Path, dut_name: str) -> Path:
    """Where a prepare records the filesystem it made on ``dut_name``."""
    return state_dir / "apps" / f"{dut_name}.json"


def recorded_uuid(state_dir: Path, dut_name: str) -> str | None:
    """The filesystem UUID the marker of ``dut_name`` records (None: no marker, or an unreadable one)."""
    path = marker_path(state_dir, dut_name)
    try:
        data = json.loads(read_bounded(path, MARKER_MAX_BYTES))
    except (OSError, ValueError):
        return None
    uuid = data.get("uuid") if isinstance(data, dict) else None
    return uuid if isinstance(uuid, str) and 0 < len(uuid) <= 128 else None


def filesystem_uuid(device: str) -> str | None:
    """The DUT's current filesystem UUID (a seam: unit tests fake blkid's answer)."""
    return interlock.filesystem_uuid(device)


def lab_filesystem_on(state_dir: Path, dut: DeclaredDut) -> bool:
    """Whether ``dut`` holds the filesystem a prepare step of this lab made (its marker's UUID is the device's):
    nothing of anyone else's is on it, so a purge, a fio write or another prepare may overwrite it."""
    recorded = recorded_uuid(state_dir, dut.name)
    return recorded is not None and interlock.lab_filesystem(filesystem_uuid(dut.path), recorded)
