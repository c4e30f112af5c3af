"""``labctl lab up --vms 2`` as an engineer runs it from the checkout's root: it takes the cached image, boots the
controller host and one agent host, prints how to reach each and the inventory, which Ansible reaches every host
with; Ctrl-C stops the VMs, removes their namespace and says so."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.labs.vmlab.image import Image
from tests.vmlab.conftest import CACHE, ROOT, TIMES, VENV

pytestmark = [pytest.mark.vm, pytest.mark.timeout(1800)]


def test_lab_up_vms_boots_a_reachable_lab_and_ctrl_c_stops_it(image: Image, tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.Popen([str(VENV / "bin" / "labctl"), "lab", "up", "--vms", "2", "--lab-dir", str(tmp_path),
                             "--vm-cache", str(CACHE)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:                  # the lab prints its last line once every VM answers SSH
            lines.append(line.rstrip("\n"))
            if line.startswith("lab directory:"):
                break
        out = "\n".join(lines)
        assert proc.poll() is None, out
        TIMES["lab_up_vms2_s"] = time.monotonic() - started
        assert re.search(r"^acceleration: (kvm|tcg) \(", out, re.M), out
        ssh = dict(re.findall(r"^(\w+): 10\.80\.0\.\d+ \(booted in \d+ s\)  ssh: (.+)$", out, re.M))
        assert set(ssh) == {"ctl", "nvme1"}, out
        for name, line in ssh.items():             # each printed command reaches its VM
            res = subprocess.run([*shlex.split(line), "hostname; ls /dev/disk/by-id/"], capture_output=True,
                                 text=True, timeout=120)
            assert res.stdout.split()[0] == name, res
            if name == "nvme1":
                assert "nvme-QEMU_NVMe_Ctrl_VMLAB01NVME_1" in res.stdout and "nvme-QEMU_NVMe_Ctrl_VMLAB01NVME_2" \
                    in res.stdout, res.stdout
        inventory = Path(re.findall(r"^inventory: (.+)$", out, re.M)[0])
        doc = yaml.safe_load(inventory.read_text())
        agents = doc["all"]["children"]["agents"]["hosts"]
        assert [d["name"] for d in agents["nvme1"]["duts"]] == ["nvme0", "nvme1", "scsi0"]
        deploy = re.findall(r"^deploy: make wheel && (.+)$", out, re.M)[0]
        netns = shlex.split(deploy)[:4]             # ip netns exec NAME: where the VMs are reachable from
        ping = subprocess.run([*netns, str(VENV / "bin" / "ansible"), "all", "-i", str(inventory), "-m", "ping"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert ping.returncode == 0 and ping.stdout.count("SUCCESS") == 2, ping.stdout + ping.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, rest
    assert "VM lab stopped (2 VMs" in rest
    assert netns[3] not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not (tmp_path / "vms").exists()
