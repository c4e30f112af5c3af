"""The controller's install (roles/lab_controller, tasks/install.yml, as site.yml includes it before the broker)
for real on this machine, connection local, offline, everything under a temporary directory:

- a wheel of this checkout (tests.ansible_helpers.project_wheel(), the metadata of pyproject.toml: it has the
  ``controller`` extra) and constraints.txt are copied to the wheel directory and the wheel is pip-installed
  from there with the extra into a new venv (``--no-index --no-deps``; the dependencies are the project
  venv's distributions of the base install and the ``controller`` extra, on PYTHONPATH, nothing of ``dev``);
- the installed ``labctl --version`` reports this checkout's version, ``labctl controller --help`` parses and
  the controller's modules import from the new venv;
- a second run changes nothing; a rebuilt wheel of the same version is installed over the installed one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from labcontract import __version__
from tests.ansible_helpers import (
    ROOT,
    PlaybookRun,
    dependency_dir,
    local_inventory,
    project_wheel,
    run_playbook,
    sha256,
)
from tests.unit.test_agent_deps import base_requirements, closure, extra_requirements

pytestmark = pytest.mark.integration

INSTALL = "Install the controller into its venv"
REINSTALL = "Install the controller's changed wheel over the installed one"
PLAY = """\
- name: The controller's install, as site.yml's controller play includes it
  hosts: controller
  gather_facts: false
  tasks:
    - name: Install the controller
      ansible.builtin.include_role:
        name: lab_controller
        tasks_from: install.yml
"""


def host_vars(wheel: Path, host: Path) -> dict[str, Any]:
    """Everything the install writes goes under ``host``; nothing comes from the network."""
    return {"lab_controller_wheel": str(wheel), "lab_controller_wheel_dir": str(host / "wheels"),
            "lab_controller_constraints": str(ROOT / "constraints.txt"), "lab_controller_venv": str(host / "venv"),
            "lab_controller_venv_command": f"{sys.executable} -m venv",
            "lab_controller_pip_extra_args": "--no-index --no-deps",
            "lab_controller_packages_install": False, "lab_controller_user": "root"}


def install_result(run: PlaybookRun, task: str = INSTALL) -> dict[str, Any]:
    assert run.status == "successful", [e.get("stdout") for e in run.events[-8:]]
    (res,) = run.task_results(task)
    return res


def changed_tasks(run: PlaybookRun) -> list[str]:
    return [str(e["event_data"].get("task")) for e in run.events
            if e.get("event") == "runner_on_ok" and e["event_data"].get("res", {}).get("changed")]


def installed(venv: Path, deps: Path, *args: str) -> str:
    """``args`` run with the venv's tools, the dependencies on PYTHONPATH, away from the checkout."""
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(deps), "HOME": str(venv.parent),
           "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    res = subprocess.run([str(venv / "bin" / args[0]), *args[1:]], capture_output=True, text=True, env=env,
                         cwd=venv.parent, timeout=60)
    assert res.returncode == 0, (args, res.stdout[-3000:], res.stderr[-3000:])
    return res.stdout


def site_packages(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    return site


def test_the_controller_installs_from_the_wheel_with_its_extra(tmp_path: Path) -> None:
    t0 = time.monotonic()
    host = tmp_path / "host"                                           # stands for / on the controller host
    wheel = project_wheel(tmp_path / "dist")
    deps = dependency_dir(tmp_path / "deps", closure(base_requirements() + extra_requirements("controller")))
    assert (deps / "sqlalchemy").exists() and (deps / "celery").exists() and not (deps / "pytest").exists()
    inv = local_inventory(tmp_path / "inv", [], **host_vars(wheel, host))
    play = tmp_path / "install.yml"
    play.write_text(PLAY)

    first = run_playbook(str(play), inv, tmp_path / "run1")
    res = install_result(first, REINSTALL)
    t_first = time.monotonic() - t0
    copied = host / "wheels" / wheel.name
    args = res["invocation"]["module_args"]
    # the new wheel alone, then the extra's dependencies (here already on PYTHONPATH: nothing more to install)
    assert res["changed"] and args["name"] == [str(copied)] and args["state"] == "forcereinstall", args
    assert args["extra_args"] == f"--no-deps -c {host / 'wheels' / 'constraints.txt'} --no-index --no-deps", args
    assert "Successfully installed storagelab-" in res["stdout"], res["stdout"]
    res = install_result(first)
    args = res["invocation"]["module_args"]
    assert args["name"] == [f"{copied}[controller]"] and args["state"] == "present" and not res["changed"], args
    assert args["extra_args"] == f"-c {host / 'wheels' / 'constraints.txt'} --no-index --no-deps", args
    assert "does not provide the extra" not in res["stdout"] + res["stderr"], res["stderr"]
    assert sha256(copied) == sha256(wheel)
    assert (host / "wheels" / "constraints.txt").read_bytes() == (ROOT / "constraints.txt").read_bytes()

    # installed from the copied wheel, with the extra, into the new venv; labctl is this checkout's
    site = site_packages(host / "venv")
    (dist_info,) = site.glob("storagelab-*.dist-info")
    assert json.loads((dist_info / "direct_url.json").read_text())["url"] == copied.as_uri()
    assert "Provides-Extra: controller" in (dist_info / "METADATA").read_text()
    assert installed(host / "venv", deps, "labctl", "--version").strip().endswith(__version__)
    assert "--heartbeat-timeout" in installed(host / "venv", deps, "labctl", "controller", "--help")
    where = installed(host / "venv", deps, "python", "-c",
                      "import orchestrator.cmd.controller as c, sqlalchemy as s; print(c.__file__); print(s.__file__)")
    assert where.splitlines() == [str(site / "orchestrator" / "cmd" / "controller.py"),
                                  str(deps / "sqlalchemy" / "__init__.py")], where

    # the same wheel again: nothing to do
    second = run_playbook(str(play), inv, tmp_path / "run2")
    res = install_result(second)
    assert res["invocation"]["module_args"]["state"] == "present" and not res["changed"], res["stdout"]
    assert second.changed() == 0, changed_tasks(second)
    t_second = time.monotonic() - t0

    # the same version rebuilt (another wheel file): installed over the installed one, the venv's files anew
    os.remove(site / "orchestrator" / "cmd" / "controller.py")
    rebuilt = project_wheel(tmp_path / "dist2")
    assert rebuilt.name == wheel.name and sha256(rebuilt) != sha256(wheel)
    third = run_playbook(str(play), inv, tmp_path / "run3", {"lab_controller_wheel": str(rebuilt)})
    res = install_result(third, REINSTALL)
    assert res["changed"] and res["invocation"]["module_args"]["state"] == "forcereinstall", res["stdout"]
    assert "--no-deps" in res["invocation"]["module_args"]["extra_args"].split(), res["invocation"]
    assert not install_result(third)["changed"]
    assert sorted(changed_tasks(third)) == ["Copy the controller's wheel to the host", REINSTALL], changed_tasks(third)
    assert sha256(copied) == sha256(rebuilt) and (site / "orchestrator" / "cmd" / "controller.py").exists()
    print(f"timings: first run {t_first:.1f}s, second run {t_second:.1f}s, total {time.monotonic() - t0:.1f}s")
