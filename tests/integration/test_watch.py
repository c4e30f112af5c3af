"""labctl watch: progress bars with live IOPS in a real pseudo-terminal, line mode without one."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import LabHandle, one_workload

pytestmark = pytest.mark.integration


def labctl_argv(lab: LabHandle, *args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(lab.lab.root), "--broker", lab.broker,
            "--store", lab.store_url, *args]


def test_watch_in_a_terminal_shows_progress_and_live_iops(lab: LabHandle) -> None:
    run_id = lab.submit(one_workload(15, "watched"))   # long enough for labctl to start on a loaded machine
    lab.wait_step_state(run_id, "RUNNING")
    cmd = " ".join(labctl_argv(lab, "watch", run_id))
    # script(1) gives the command a real pseudo-terminal, so rich renders its live view
    res = subprocess.run(["script", "-qfec", cmd, "/dev/null"], capture_output=True, text=True, timeout=90,
                         env={**os.environ, "COLUMNS": "200", "LINES": "50", "TERM": "xterm-256color"})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", res.stdout)
    assert f"run {run_id}" in screen and "█" in screen
    running = [line for line in screen.splitlines() if "watched" in line and "RUNNING" in line]
    assert running, screen[-3000:]
    live = re.compile(r"\d+s\s*│\s*\d+s\s*│\s*[\d,]{3,}\s*│\s*[\d,]+ us")   # elapsed, left, IOPS, avg lat
    assert any(live.search(line) for line in running), running[-3:]
    assert "SUCCEEDED" in screen and "avg lat us" in screen      # the final results table


def test_watch_without_a_terminal_prints_lines(lab: LabHandle) -> None:
    run_id = lab.submit(one_workload(2, "lines"))
    res = subprocess.run(labctl_argv(lab, "watch", run_id[:14]), capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr
    assert f"run {run_id}: SUCCEEDED 1/1 steps" in res.stdout
    assert "lines" in res.stdout and "avg lat us" in res.stdout
