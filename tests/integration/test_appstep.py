"""The application step process end to end with real components: a 512 MiB loop DUT, mkfs, mount, mariadbd,
sysbench; cancel (SIGTERM), a killed process group (SIGKILL) released by cleanup; a bad config; the external
workload path with test commands."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.apps.cleanup import release
from agents.apps.fs import NOT_PREPARED, mounted
from labcontract.apps import AppResult
from orchestrator.labs.lab import wait_for

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "apps"
DUT_BYTES = 512 << 20
SB = {"tables": 2, "table_size": 1000, "time": 3, "buffer_pool_mb": 32, "log_file_mb": 16}

needs_db = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("sysbench") or not (shutil.which("mariadbd") or
                                                              os.access("/usr/sbin/mariadbd", os.X_OK)),
    reason="needs root (mkfs, mount, loop devices), sysbench and mariadbd (scripts/ensure-packages mariadb-server "
           "sysbench)")


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def servers_on(datadir_root: Path) -> list[int]:
    """pids of processes whose arguments name a path under ``datadir_root`` (a mariadbd left behind)."""
    root = str(datadir_root)
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                args = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if any(root in a for a in args[1:]):
                out.append(int(d.name))
    return out


@pytest.fixture(scope="module")
def loop_dut(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    d = tmp_path_factory.mktemp("dut")
    img = d / "dut.img"
    with img.open("wb") as f:
        f.truncate(DUT_BYTES)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        yield {"name": "d0", "path": dev, "kind": "block", "size_bytes": DUT_BYTES}
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)


class Steps:
    def __init__(self, base: Path, dut: dict[str, Any], run_id: str) -> None:
        self.base, self.dut, self.run_id, self.n = base, dut, run_id, 0
        self.state_dir = base / "state"

    def spec(self, app: dict[str, Any], run_id: str | None = None, **more: Any) -> tuple[Path, dict[str, Any]]:
        self.n += 1
        att = self.base / f"att{self.n}"
        att.mkdir()
        spec = {"attempt_id": f"att{self.n}", "run_id": run_id or self.run_id, "app": app, "duts": [self.dut],
                "state_dir": str(self.state_dir), **more}
        (att / "app-spec.json").write_text(json.dumps(spec))
        return att, spec

    def start(self, att: Path) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "agents.appstep", "app-spec.json", "app.json"], cwd=att,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})

    def run(self, app: dict[str, Any], run_id: str | None = None, timeout: float = 180,
            **more: Any) -> tuple[Path, int, str]:
        att, _ = self.spec(app, run_id, **more)
        p = self.start(att)
        _, err = p.communicate(timeout=timeout)
        return att, p.returncode, err


def assert_released(att: Path) -> None:
    assert not mounted(att / "mnt")
    assert servers_on(att / "mnt") == []


def sysbench(phase: str, point: int = 0, **over: Any) -> dict[str, Any]:
    return {"kind": "sysbench", "phase": phase, "point": point, "sysbench": {**SB, **over}}


@needs_db
def test_prepare_run_cancel_kill_badconfig(tmp_path: Path, loop_dut: dict[str, Any]) -> None:
    st = Steps(tmp_path, loop_dut, "run-a")
    # a run step before any prepare: refused
    att, rc, err = st.run(sysbench("run", 2))
    assert rc != 0 and NOT_PREPARED in err.strip().splitlines()[-1], err
    assert_released(att)

    att, rc, err = st.run(sysbench("prepare"))
    assert rc == 0, err
    prep = AppResult.model_validate_json((att / "app.json").read_text())
    assert prep.tool == "sysbench" and prep.metrics["rows"] == 2000 and prep.server_version.startswith("MariaDB")
    marker = json.loads((st.state_dir / "apps" / "d0.json").read_text())
    assert marker["run_id"] == "run-a" and marker["loaded"] is True and marker["fs"] == "ext4"
    assert_released(att)

    for point in (2, 4):
        att, rc, err = st.run(sysbench("run", point))
        assert rc == 0, err
        res = AppResult.model_validate_json((att / "app.json").read_text())
        m = res.metrics
        assert m["tps"] > 0 and m["threads"] == point
        assert m["lat_p99_ms"] >= m["lat_avg_ms"] and m["lat_p95_ms"] <= m["lat_p99_ms"]
        assert res.series["tps"] and len(res.series["tps"]) <= SB["time"] + 1
        live = json.loads((att / "live.json").read_text())
        assert live["point"] == point and live["tps"] > 0
        assert json.loads((att / "app-state.json").read_text()) == {"mountpoint": None, "device": None,
                                                                    "servers": []}
        assert_released(att)

    # another run's run step: refused (the marker names run-a)
    att, rc, err = st.run(sysbench("run", 2), run_id="run-b")
    assert rc != 0 and NOT_PREPARED in err and "run-a" in err

    # SIGTERM while measuring: cancelled, released
    att, _ = st.spec(sysbench("run", 2, time=60))
    p = st.start(att)
    wait_until(lambda: (att / "live.json").exists(), 60, "measuring")
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and err.strip().splitlines()[-1] == "cancelled"
    assert not (att / "app.json").exists()
    assert_released(att)

    # SIGKILL of the process group mid-run: the server (own session) survives; release() stops it and unmounts
    att, _ = st.spec(sysbench("run", 2, time=60))
    p = st.start(att)
    wait_until(lambda: (att / "live.json").exists(), 60, "measuring")
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    assert mounted(att / "mnt") and servers_on(att / "mnt")
    lines = release(att)
    assert any("mariadbd pid" in x and "stopped" in x for x in lines), lines
    assert any("unmounted" in x for x in lines), lines
    assert_released(att)
    assert release(att) == []

    # the data survived all of that: one more point
    att, rc, err = st.run(sysbench("run", 2, time=2))
    assert rc == 0, err

    # a bad config (an InnoDB log larger than the filesystem): mariadbd does not start, clear reason, nothing left
    att, rc, err = st.run(sysbench("run", 2, log_file_mb=4096))
    last = err.strip().splitlines()[-1]
    assert rc != 0 and "mariadbd exited" in last and "ib_logfile" in last, err
    assert_released(att)


@needs_db
def test_mounted_dut_refused_and_file_dut(tmp_path: Path, loop_dut: dict[str, Any]) -> None:
    mnt = tmp_path / "elsewhere"
    mnt.mkdir()
    # an earlier test's filesystem on the DUT, unmounted lazily as the step's last resort while its server still
    # closed on a loaded machine, holds the device a little longer ("apparently in use by the system"): wait for it
    wait_for(lambda: subprocess.run(["mkfs.ext4", "-F", "-q", loop_dut["path"]], capture_output=True).returncode == 0,
             120, f"{loop_dut['path']} to be free for mkfs", interval=1)
    subprocess.run(["mount", loop_dut["path"], str(mnt)], check=True)
    try:
        (tmp_path / "a").mkdir()
        att, rc, err = Steps(tmp_path / "a", loop_dut, "run-m").run(sysbench("prepare"))
        assert rc != 0 and "is mounted on" in err.strip().splitlines()[-1], err
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    # a file DUT, xfs, only the OP footprint of it
    img = tmp_path / "file-dut.img"
    with img.open("wb") as f:
        f.truncate(DUT_BYTES)
    fdut = {"name": "f0", "path": str(img), "kind": "file", "size_bytes": DUT_BYTES}
    (tmp_path / "b").mkdir()
    st = Steps(tmp_path / "b", fdut, "run-f")
    att, rc, err = st.run({**sysbench("prepare", filesystem="xfs"), "fs_size_bytes": 320 << 20})
    assert rc == 0, err
    assert_released(att)
    att, rc, err = st.run(sysbench("run", 2, filesystem="xfs", time=2))
    assert rc == 0, err
    assert AppResult.model_validate_json((att / "app.json").read_text()).metrics["tps"] > 0
    assert_released(att)


def _external(st: Steps, script: str, timeout_s: int = 30, params: dict[str, Any] | None = None,
              ) -> tuple[Path, int, str]:
    return st.run({"kind": "external", "phase": "run", "external": {"workload": "w1", "params": params or {},
                                                                     "time": 5}},
                  external={"name": "w1", "command": [sys.executable, str(FIX / script)], "timeout_s": timeout_s},
                  timeout=60)


def test_external_ok_garbage_timeout(tmp_path: Path) -> None:
    dut = {"name": "x0", "path": str(tmp_path / "x.img"), "kind": "file", "size_bytes": 0}
    st = Steps(tmp_path, dut, "run-x")
    att, rc, err = _external(st, "ext_ok.py", params={"ops": 7})
    assert rc == 0, err
    res = AppResult.model_validate_json((att / "app.json").read_text())
    assert res.tool == "ext-ok" and res.metrics == {"tps": 123.5, "ops": 7.0} and res.notes["dut"] == dut["path"]
    assert res.seconds > 0 and json.loads((att / "params.json").read_text()) == {"ops": 7}

    att, rc, err = _external(st, "ext_garbage.py")
    last = err.strip().splitlines()[-1]
    assert rc != 0 and "result is not valid" in last and "tool" in last and "metrics.tps" in last, err
    assert not (att / "app.json").exists()

    t0 = time.monotonic()
    att, rc, err = _external(st, "ext_sleep.py", timeout_s=2)
    assert rc != 0 and "ran past its timeout of 2 s" in err.strip().splitlines()[-1], err
    assert time.monotonic() - t0 < 40
    child = int((att / "work" / "child.pid").read_text())
    wait_until(lambda: not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text()
               .rsplit(")", 1)[1][:3], 20, "the command's child killed with its group")
