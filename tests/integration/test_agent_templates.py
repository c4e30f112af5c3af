"""The lab_agent role's templates quote every value they take from the inventory.

labcontract.inventory refuses hostile values (tests/unit/test_inventory.py); here the validation is bypassed
on purpose (the inventory is handed to Ansible as is) to prove the second line holds: the start script,
rendered by Ansible from the role's own templates and defaults, passes ``bash -n`` / ``sh -n``, and run in a
throw-away prefix it starts a fake ``storagelab-agent`` with every hostile value as one intact argument and runs
nothing of them (no marker file appears). The systemd unit escapes ``$``, ``%`` and quotes; the udev rule
leaves out what is not one udev string.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible_helpers import PLAYBOOKS, local_inventory, run_playbook

pytestmark = pytest.mark.integration

ROLE = PLAYBOOKS / "roles" / "lab_agent"

FAKE_AGENT = """#!/bin/sh
# a stand-in for the agent: records its arguments and environment, then idles until stopped
for a in "$@"; do printf '%s\\n' "$a"; done > {out}/argv
env > {out}/env
id -u > {out}/uid
while :; do sleep 0.2; done
"""


def render_playbook(path: Path, out: Path) -> Path:
    """A playbook rendering the role's three templates with its defaults (no other task of the role)."""
    templates = [("storagelab-agent-ctl.j2", "ctl", "0755"), ("storagelab-agent.service.j2", "unit", "0644"),
                 ("storagelab-dut-access.rules.j2", "rules", "0644"), ("drive-health.json.j2", "health.json", "0644"),
                 ("storagelab-drive-health.socket.j2", "units/storagelab-drive-health.socket", "0644"),
                 ("storagelab-drive-health@.service.j2", "units/storagelab-drive-health@.service", "0644")]
    play = [{"hosts": "localhost", "gather_facts": False, "vars_files": [str(ROLE / "defaults" / "main.yml")],
             "tasks": [{"name": f"Render {dest}", "ansible.builtin.template": {
                 "src": str(ROLE / "templates" / src), "dest": str(out / dest), "mode": mode}}
                 for src, dest, mode in templates]}]
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return path


def hostile(marks: Path) -> dict[str, Any]:
    def m(n: int) -> str:
        return str(marks / f"Y{n}")

    return {
        "duts": [{"name": f"d0;touch {m(1)}", "kind": "block", "path": f"/dev/disk/by-id/X$(touch {m(2)})",
                  "serial": f'S"; RUN+="/bin/touch {m(3)}', "wipe_ok": True},
                 {"name": "d1", "kind": "loop", "path": f"/dev/loop7`touch {m(4)}`"}],
        "nics": [{"name": "p1", "iface": f"eth1 && touch {m(5)}", "address": "10.1.1.1/24",
                  "peer": f"10.1.1.2'; touch {m(6)}; '"}],
        "metrics_address": f"127.0.0.1:9$(touch {m(7)})",
        "lab_agent_broker_url": f"redis://h:6379/0?x=$(touch {m(8)})&y=%h",
        "lab_agent_environment": {"EXTRA": f"`touch {m(9)}` \"$HOME\" %n"},
    }


def test_start_script_and_unit_quote_hostile_inventory_values(tmp_path: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux)")
    prefix, marks, out = tmp_path / "prefix", tmp_path / "marks", tmp_path / "out"
    for d in (prefix / "venv" / "bin", marks, out / "units"):
        d.mkdir(parents=True)
    (prefix / "venv" / "bin" / "python").symlink_to(sys.executable)
    agent = prefix / "venv" / "bin" / "storagelab-agent"
    agent.write_text(FAKE_AGENT.format(out=out))
    agent.chmod(0o755)
    me = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    # extra vars: above the role defaults the play loads, and never seen by labcontract.inventory
    values = {**hostile(marks), "lab_agent_venv": str(prefix / "venv"), "lab_agent_state_dir": str(prefix / "state"),
              "lab_agent_log_dir": str(prefix / "log"), "lab_agent_run_dir": str(prefix / "run"),
              "lab_agent_user": me, "lab_agent_group": me, "lab_agent_stop_timeout": 5}
    inv = local_inventory(tmp_path / "inv", [])
    run = run_playbook(str(render_playbook(tmp_path / "render.yml", out)), inv, tmp_path / "run", values)
    assert run.status == "successful", [e.get("stdout") for e in run.events[-5:]]
    ctl = out / "ctl"
    for shell in ("bash", "sh"):
        res = subprocess.run([shell, "-n", str(ctl)], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr

    try:
        start = subprocess.run([str(ctl), "start"], capture_output=True, text=True, timeout=30)
        assert start.returncode == 0 and start.stdout.startswith("started (pid "), start.stdout + start.stderr
        argv = (out / "argv").read_text().splitlines()
        env = dict(line.split("=", 1) for line in (out / "env").read_text().splitlines() if "=" in line)
    finally:
        stop = subprocess.run([str(ctl), "stop"], capture_output=True, text=True, timeout=30)
    assert stop.stdout.strip() == "stopped", stop.stdout + stop.stderr

    m = {n: str(marks / f"Y{n}") for n in range(1, 10)}
    assert argv[:5] == ["--host", "localhost", "--state-dir", str(prefix / "state"), "--metrics-port"]
    for arg in (f"127.0.0.1:9$(touch {m[7]})", f"d0;touch {m[1]}=/dev/disk/by-id/X$(touch {m[2]})",
                f"d1=/dev/loop7`touch {m[4]}`", f"d0;touch {m[1]}",
                f"p1=eth1 && touch {m[5]}@10.1.1.2'; touch {m[6]}; '"):
        assert arg in argv, (arg, argv)
    assert argv[argv.index("--wipe-ok") + 1] == f"d0;touch {m[1]}"
    assert env["LAB_BROKER_URL"] == f"redis://h:6379/0?x=$(touch {m[8]})&y=%h"
    assert env["EXTRA"] == f"`touch {m[9]}` \"$HOME\" %n"
    assert env["HOME"] == str(prefix / "state")
    assert (out / "uid").read_text().strip() == str(os.getuid())
    assert sorted(p.name for p in marks.iterdir()) == []          # nothing of the values ran
    assert (prefix / "log" / "agent.log").exists() and not (prefix / "run" / "agent.pid").exists()

    unit = (out / "unit").read_text()
    (exec_start,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    assert exec_start.startswith(f'ExecStart="{prefix}/venv/bin/storagelab-agent" "--host" "localhost" ')
    assert f'"--dut" "d1=/dev/loop7`touch {m[4]}`"' in exec_start
    assert f'"d0;touch {m[1]}=/dev/disk/by-id/X$$(touch {m[2]})"' in exec_start
    assert f'Environment="LAB_BROKER_URL=redis://h:6379/0?x=$$(touch {m[8]})&y=%%h"' in unit
    assert f'Environment="EXTRA=`touch {m[9]}` \\"$$HOME\\" %%n"' in unit
    assert f"User={me}" in unit and "NoNewPrivileges=yes" in unit

    rules = [x for x in (out / "rules").read_text().splitlines() if x and not x.startswith("#")]
    assert rules == []                                     # neither hostile DUT makes a udev string

    # the drive health helper: its DUT list is JSON holding the values as they are, its units pass systemd's check
    assert json.loads((out / "health.json").read_text()) == {"duts": [
        {"name": f"d0;touch {m[1]}", "path": f"/dev/disk/by-id/X$(touch {m[2]})"},
        {"name": "d1", "path": f"/dev/loop7`touch {m[4]}`"}]}
    assert argv[argv.index("--drive-health-socket") + 1] == str(prefix / "run" / "drive-health.sock")
    shutil.copy(out / "unit", out / "units" / "storagelab-agent.service")
    verify = subprocess.run(["systemd-analyze", "verify", *sorted(map(str, (out / "units").iterdir()))],
                            capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_LOG_COLOR": "0"})
    assert (verify.returncode, verify.stdout + verify.stderr) == (0, ""), verify.stdout + verify.stderr
    helper = (out / "units" / "storagelab-drive-health@.service").read_text()
    assert f"ExecStart={prefix}/venv/bin/python -m agents.cmd.drivehealth /etc/storagelab/drive-health.json" in helper
    assert "StandardInput=socket" in helper and "CapabilityBoundingSet=CAP_SYS_ADMIN CAP_SYS_RAWIO" in helper


def _tasks(node: Any) -> list[dict[str, Any]]:
    """Every mapping of a parsed playbook / task file (tasks, handlers, blocks and plays alike)."""
    if isinstance(node, list):
        return [t for x in node for t in _tasks(x)]
    if isinstance(node, dict):
        return [node, *(t for v in node.values() for t in _tasks(v))]
    return []


def test_no_command_or_shell_task_takes_a_templated_command_line() -> None:
    """A templated value reaches a command only as one argv item (or a quoted template), never through a
    free-form command line that a shell or the module's own word splitting would cut."""
    offenders = []
    for path in sorted(PLAYBOOKS.rglob("*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            for key in ("ansible.builtin.command", "command", "ansible.builtin.shell", "shell",
                        "ansible.builtin.raw", "raw"):
                value = task.get(key)
                if isinstance(value, str) and "{{" in value and "name" in task:
                    offenders.append(f"{path.relative_to(PLAYBOOKS)}: {task['name']}: {value}")
    assert offenders == []
