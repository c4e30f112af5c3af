"""agents.apps.cleanup.release on fake app-state.json files: dead pids, reused pids (start ticks differ: never
signalled), a live recorded process, a stray process on the mountpoint, a foreign mountpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.apps.cleanup import read_state, release, strays
from agents.apps.fs import mounted
from agents.apps.proc import alive, start_ticks

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen(SLEEPER)
    yield p
    p.kill()
    p.wait()


def _state(d: Path, servers: list[dict[str, object]], mountpoint: str | None = None) -> None:
    (d / "app-state.json").write_text(json.dumps({"mountpoint": mountpoint, "device": None, "servers": servers}))


def test_dead_pid_is_nothing_to_do(tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = start_ticks(p.pid)
    p.wait()
    _state(tmp_path, [{"pid": p.pid, "start_ticks": ticks or 1, "kind": "mariadbd", "datadir": "/x"}])
    assert release(tmp_path) == []


def test_reused_pid_is_not_signalled(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    ticks = start_ticks(sleeper.pid)
    assert ticks is not None
    _state(tmp_path, [{"pid": sleeper.pid, "start_ticks": ticks - 1, "kind": "mariadbd", "datadir": "/x"}])
    assert release(tmp_path) == []
    assert sleeper.poll() is None and alive(sleeper.pid, ticks)


def test_recorded_server_is_stopped(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    ticks = start_ticks(sleeper.pid)
    assert ticks is not None
    _state(tmp_path, [{"pid": sleeper.pid, "start_ticks": ticks, "kind": "mariadbd", "datadir": "/x"}])
    lines = release(tmp_path, grace_s=10)
    assert len(lines) == 1 and f"mariadbd pid {sleeper.pid}: stopped" in lines[0]
    assert sleeper.wait(10) is not None
    assert read_state(tmp_path)["servers"] == []
    assert release(tmp_path) == []        # idempotent


def test_stray_on_the_mountpoint_is_stopped(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    p = subprocess.Popen([*SLEEPER, f"--datadir={tmp_path / 'mnt' / 'mysql'}"])
    try:
        # the child as /proc shows it (its command line naming the mountpoint) before release looks for it
        deadline = time.monotonic() + 30
        while not any(pid == p.pid for pid, _t, _a in strays(tmp_path / "mnt")) and time.monotonic() < deadline:
            time.sleep(0.05)
        _state(tmp_path, [])
        lines = release(tmp_path, grace_s=10)
        assert any(f"pid {p.pid}: stopped" in x and "not recorded" in x for x in lines), lines
        assert p.wait(10) is not None
    finally:
        p.kill()
        p.wait()


def test_foreign_mountpoint_is_refused(tmp_path: Path) -> None:
    _state(tmp_path, [], mountpoint="/")
    lines = release(tmp_path)
    assert lines == [f"refused to unmount /: not this attempt's mountpoint {tmp_path / 'mnt'}"]
    assert mounted("/")


@pytest.mark.parametrize("text", ["", "[]", "{", '{"servers": [{"pid": "1", "start_ticks": 1}], "mountpoint": 3}',
                                  '{"servers": [{"pid": 1, "start_ticks": 1}]}', "x" * (2 << 20)])
def test_garbage_state(tmp_path: Path, text: str) -> None:
    (tmp_path / "app-state.json").write_text(text)
    assert release(tmp_path) == []


def test_no_state_file(tmp_path: Path) -> None:
    assert release(tmp_path) == []
    assert not (tmp_path / "app-state.json").exists()


def test_mounted(tmp_path: Path) -> None:
    assert mounted("/") and mounted(Path("/proc"))
    assert not mounted(tmp_path)
