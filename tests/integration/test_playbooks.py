"""Every playbook in playbooks/ passes --syntax-check and ansible-lint (production profile); the
inventory loader merges variables exactly as Ansible does; agent.yml runs (check mode) here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from labcontract.inventory import load_inventory
from tests.ansible_helpers import PLAYBOOKS, ROOT, VENV_BIN, ansible_env, run_playbook

pytestmark = pytest.mark.integration


def playbooks() -> list[Path]:
    return sorted(p for p in PLAYBOOKS.glob("*.yml") if p.is_file())


def test_every_playbook_passes_syntax_check() -> None:
    books = playbooks()
    assert {"agent.yml", "dut_state.yml", "facts.yml"} <= {p.name for p in books}
    res = subprocess.run([str(VENV_BIN / "ansible-playbook"), "--syntax-check", "-i", str(ROOT / "inventory/example"),
                          *map(str, books)], capture_output=True, text=True, env=ansible_env(), cwd=PLAYBOOKS)
    assert res.returncode == 0, res.stdout + res.stderr


def test_ansible_lint_production_profile_is_clean() -> None:
    res = subprocess.run([str(VENV_BIN / "ansible-lint"), "--profile", "production", "--nocolor", "-q", "."],
                         capture_output=True, text=True, env=ansible_env(), cwd=PLAYBOOKS)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("lab", ["example", "local"])
def test_loader_merges_variables_as_ansible_does(lab: str) -> None:
    inv_dir = ROOT / "inventory" / lab
    res = subprocess.run([str(VENV_BIN / "ansible-inventory"), "-i", str(inv_dir), "--list"],
                         capture_output=True, text=True, env=ansible_env(), check=True)
    hostvars = json.loads(res.stdout)["_meta"]["hostvars"]
    inv = load_inventory(inv_dir)
    assert set(hostvars) == set(inv.hosts)
    for name, host in inv.hosts.items():
        ours = {k: v for k, v in host.vars.items() if not isinstance(v, str) or "{{" not in v}
        theirs = {k: hostvars[name][k] for k in ours}
        assert ours == theirs, name


def test_agent_playbook_check_mode_on_this_machine(tmp_path: Path) -> None:
    run = run_playbook("agent.yml", ROOT / "inventory/local", tmp_path / "run",
                       {"lab_packages_install": False, "lab_agent_install": False, "duts": []}, check=True)
    assert run.status == "successful", run.events[-3:]
    names = {ev["event_data"].get("task") for ev in run.events if ev.get("event") == "runner_on_ok"}
    assert "Install the I/O scheduler udev rule" in names
    assert "Install the start script (no systemd)" in names or "Install the systemd unit" in names
