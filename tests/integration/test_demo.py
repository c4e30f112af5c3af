"""``labctl demo`` (what ``make demo`` runs) end to end on a fresh lab directory: the run succeeds, its reports are
written, the DUT's image is removed when it ends (issue 27: it stayed, --size-mib large), and its lab file lets a
plain ``labctl runs`` run from the checkout look at that lab (issue 27: it looked at ~/.storagelab)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_the_demo_runs_cleans_its_dut_and_leaves_a_lab_labctl_finds(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "docs").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAB_")}
    labctl = [sys.executable, "-m", "orchestrator.cmd.labctl"]
    demo = subprocess.run([*labctl, "--lab-dir", str(checkout / ".lab"), "demo", "--runtime", "1", "--size-mib", "64"],
                          capture_output=True, text=True, timeout=600, cwd=checkout, env=env)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "HTML report:" in demo.stdout and "DUT image" in demo.stdout and "removed" in demo.stdout
    assert not list((checkout / ".lab").glob("demo-dut-*.img"))
    assert (checkout / ".lab" / "lab.toml").is_file()
    runs = subprocess.run([*labctl, "runs"], capture_output=True, text=True, timeout=120, cwd=checkout / "docs",
                          env=env)
    assert runs.returncode == 0, runs.stderr
    assert "demo" in runs.stdout and "SUCCEEDED" in runs.stdout, runs.stdout
