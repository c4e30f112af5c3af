"""playbooks/windows_agent.yml (Windows agent hosts over WinRM) passes ansible-playbook --syntax-check, which
resolves every module, so the ansible.windows collection must be installed; it uses Windows modules only,
and NSSM never kills a running step's process tree when the agent restarts. It has not run on a real Windows
host (docs/windows.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible_helpers import PLAYBOOKS, ROOT, VENV_BIN, ansible_env

BOOK = PLAYBOOKS / "windows_agent.yml"


def tasks() -> list[dict[str, Any]]:
    [play] = yaml.safe_load(BOOK.read_text())
    return [*play["tasks"], *play["handlers"]]


@pytest.mark.skipif(not (VENV_BIN / "ansible-playbook").exists(), reason="ansible is not installed in the venv")
def test_the_windows_playbook_passes_syntax_check() -> None:
    res = subprocess.run([str(VENV_BIN / "ansible-playbook"), "--syntax-check", "-i", str(ROOT / "inventory/example"),
                          str(BOOK)], capture_output=True, text=True, env=ansible_env(), cwd=PLAYBOOKS, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_task_is_an_ansible_windows_module() -> None:
    modules = {next(k for k in t if k.startswith("ansible.")) for t in tasks()}
    assert modules and all(m.startswith("ansible.windows.win_") for m in modules), modules


def test_ansible_windows_is_a_required_collection() -> None:
    req = ROOT / "requirements.yml"
    if not req.exists():
        pytest.skip("no requirements.yml (the ansible meta-package carries ansible.windows)")
    names = {c["name"] for c in yaml.safe_load(req.read_text())["collections"]}
    assert "ansible.windows" in names


def test_a_restart_of_the_agent_leaves_a_running_step_alone() -> None:
    [regedit] = [t for t in tasks() if "ansible.windows.win_regedit" in t]
    values = {i["name"]: i["data"] for i in regedit["loop"]}
    assert values["AppKillProcessTree"] == 0
    assert Path(values["Application"].replace("\\", "/")).name == "storagelab-agent.exe"
