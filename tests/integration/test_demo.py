"""``labctl demo`` (what ``make demo`` runs) end to end on a fresh lab directory: the run succeeds, its reports are
written, the DUT's image is removed when it ends (issue 27: it stayed, --size-mib large), and its lab file lets a
plain ``labctl runs`` run from the checkout look at that lab (issue 27: it looked at ~/.storagelab); ``--notify-file``
(``make demo DEMO_ARGS=...``) goes into the lab file's [notify] and gets the demo run's end (issue 27, item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import labfile

pytestmark = pytest.mark.integration


def test_the_demo_runs_cleans_its_dut_and_leaves_a_lab_labctl_finds(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "docs").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAB_")}
    labctl = [sys.executable, "-m", "orchestrator.cmd.labctl"]
    sink = tmp_path / "runs.jsonl"
    demo = subprocess.run([*labctl, "--lab-dir", str(checkout / ".lab"), "demo", "--runtime", "1", "--size-mib", "64",
                           "--notify-file", str(sink)], capture_output=True, text=True, timeout=600, cwd=checkout,
                          env=env)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "HTML report:" in demo.stdout and "DUT image" in demo.stdout and "removed" in demo.stdout
    assert not list((checkout / ".lab").glob("demo-dut-*.img"))
    assert (checkout / ".lab" / "lab.toml").is_file()
    runs = subprocess.run([*labctl, "runs"], capture_output=True, text=True, timeout=120, cwd=checkout / "docs",
                          env=env)
    assert runs.returncode == 0, runs.stderr
    assert "demo" in runs.stdout and "SUCCEEDED" in runs.stdout, runs.stdout
    (ended,) = [json.loads(line) for line in sink.read_text().splitlines()]
    assert ended["event"] == "run.ended" and ended["suite"] == "demo" and ended["state"] == "SUCCEEDED"
    assert f"notifications: {sink} ok (labctl notifications)" in demo.stdout, demo.stdout[-2000:]
    assert labfile.read(checkout / ".lab" / "lab.toml").notify.file == (sink,)
    listed = subprocess.run([*labctl, "notifications", "--json"], capture_output=True, text=True, timeout=120,
                            cwd=checkout / "docs", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [(r["target"], r["origin"], r["state"], r["delivered"]) for r in json.loads(listed.stdout)] == [
        (str(sink), "lab file", "ok", 1)]
