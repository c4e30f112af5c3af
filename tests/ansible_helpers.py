"""Shared helpers for tests that run Ansible: ansible-runner runs, throw-away inventories, loop
devices, fake device tools, and an offline install of the agent or the controller (a wheel of this checkout and the
project venv's packages as its dependencies). Everything created here is removed by its own path/name."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOKS = ROOT / "playbooks"
FIXTURES = ROOT / "tests" / "fixtures" / "dut"
VENV_BIN = Path(sys.executable).parent


def ansible_env() -> dict[str, str]:
    """Environment for ansible-playbook / ansible-lint: the project's ansible.cfg, the venv first on PATH."""
    return {"ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}


@dataclass
class PlaybookRun:
    status: str
    rc: int
    stats: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)

    def changed(self, host: str = "localhost") -> int:
        return int((self.stats.get("changed") or {}).get(host, 0))

    def failures(self, host: str = "localhost") -> int:
        return int((self.stats.get("failures") or {}).get(host, 0))

    def item_results(self, task: str) -> list[dict[str, Any]]:
        """The per-item module results (``res``) of ``task``, from the event stream."""
        out = []
        for ev in self.events:
            data = ev.get("event_data", {})
            if ev.get("event", "").startswith("runner_item_on_") and data.get("task") == task:
                out.append(data["res"])
        return out

    def task_results(self, task: str) -> list[dict[str, Any]]:
        out = []
        for ev in self.events:
            data = ev.get("event_data", {})
            if ev.get("event") in ("runner_on_ok", "runner_on_failed") and data.get("task") == task:
                out.append(data["res"])
        return out


def run_playbook(playbook: str, inventory: Path, private_dir: Path, extravars: dict[str, Any] | None = None,
                 *, check: bool = False, limit: str | None = None) -> PlaybookRun:
    """Run ``playbooks/<playbook>`` through ansible-runner, as the controller does."""
    import ansible_runner

    private_dir.mkdir(parents=True, exist_ok=True)
    cmdline = " ".join(x for x in ["--check" if check else "", f"--limit {limit}" if limit else ""] if x)
    runner = ansible_runner.run(
        private_data_dir=str(private_dir), playbook=str(PLAYBOOKS / playbook), inventory=str(inventory),
        extravars=extravars or {}, envvars=ansible_env(), cmdline=cmdline or None, quiet=True)
    return PlaybookRun(status=runner.status, rc=int(runner.rc), stats=dict(runner.stats or {}),
                       events=list(runner.events))


def local_inventory(directory: Path, duts: list[dict[str, Any]], **host_vars: Any) -> Path:
    """A one-host (localhost, connection local) inventory declaring ``duts``."""
    (directory / "host_vars").mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"controller": {"hosts": {"localhost": None}},
                              "agents": {"hosts": {"localhost": None}}}}}))
    hv = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "duts": duts, **host_vars}
    (directory / "host_vars" / "localhost.yml").write_text(yaml.safe_dump(hv))
    return directory


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def can_use_loop_devices() -> bool:
    return os.geteuid() == 0 and shutil.which("losetup") is not None and os.path.exists("/dev/loop-control")


@contextmanager
def loop_device(backing: Path, size_mib: int = 8, random_mib: int = 1) -> Iterator[str]:
    """A loop device (direct I/O) over a new backing file whose first ``random_mib`` MiB are random."""
    with backing.open("wb") as fh:
        fh.write(os.urandom(random_mib << 20))
        fh.truncate(size_mib << 20)
    dev = subprocess.run(["losetup", "--direct-io=on", "--find", "--show", str(backing)],
                         check=True, capture_output=True, text=True).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)


@contextmanager
def mounted(dev: str, mountpoint: Path) -> Iterator[Path]:
    """``dev`` mounted read-only (so its bytes do not change) on ``mountpoint``; unmounted at exit."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-o", "ro,noload", dev, str(mountpoint)], check=True, capture_output=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=False, capture_output=True)


def mkfs_ext4(dev: str) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev],
                   check=True, capture_output=True)


FAKE_TOOL = """#!/bin/sh
# fake {name}: prints captured outputs for read-only calls, logs every call, refuses writes
echo "{name} $*" >> {log}
case "$*" in
{cases}
  *) echo "fake {name}: refusing a write in a test: $*" >&2; exit 97 ;;
esac
"""


def fake_tools(bin_dir: Path, log: Path, fixtures: dict[str, dict[str, str]]) -> dict[str, str]:
    """Write fake tools into ``bin_dir``: ``fixtures[tool][glob] = fixture file``. Returns the
    environment (PATH with ``bin_dir`` first) to hand to the play as ``lab_dut_environment``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, cases in fixtures.items():
        lines = "\n".join(f"  {pattern}) cat {FIXTURES / fixture} ;;" for pattern, fixture in cases.items())
        script = bin_dir / name
        script.write_text(FAKE_TOOL.format(name=name, log=log, cases=lines))
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {"PATH": f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


# --- the agent installed offline ---------------------------------------------------------------------------

PROJECT_PACKAGES = ("labcontract", "orchestrator", "agents")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata(project: dict[str, Any], version: str) -> str:
    """The wheel's METADATA: name, version, Python and the requirements of pyproject.toml, extras included
    (installs with ``--no-deps`` pull none of them, but ``<wheel>[controller]`` names an extra it has)."""
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {version}",
             f"Requires-Python: {project['requires-python']}"]
    lines += [f"Requires-Dist: {r}" for r in project.get("dependencies", [])]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        lines += [f"Provides-Extra: {extra}"] + [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    return "\n".join(lines) + "\n"


def project_wheel(dest: Path) -> Path:
    """A wheel of this checkout's packages (py3-none-any, with the ``labctl`` entry point), built without
    a build backend or an index, so pip can install it offline (``--no-index --no-deps``)."""
    from labcontract import __version__

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, dist_info = project["name"], f"{project['name']}-{__version__}.dist-info"
    files: dict[str, bytes] = {}
    for package in PROJECT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files[path.relative_to(ROOT).as_posix()] = path.read_bytes()
    scripts = "".join(f"{k} = {v}\n" for k, v in project.get("scripts", {}).items())
    files[f"{dist_info}/METADATA"] = metadata(project, __version__).encode()
    files[f"{dist_info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: storagelab-tests\nRoot-Is-Purelib: true\n"
                                   b"Tag: py3-none-any\n")
    files[f"{dist_info}/entry_points.txt"] = f"[console_scripts]\n{scripts}".encode()
    record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in files.items()) + f"{dist_info}/RECORD,,\n"
    files[f"{dist_info}/RECORD"] = record.encode()
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{name}-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name_in_zip, data in files.items():
            zf.writestr(name_in_zip, data)
    return wheel


def dependency_dir(dest: Path, wanted: set[str]) -> Path:
    """A directory of links to the project venv's distributions named in ``wanted`` (normalized names, e.g.
    tests.unit.test_agent_deps.closure()) and to nothing else: what an offline install of ``project_wheel()``
    (``--no-deps``) finds on ``PYTHONPATH`` as its dependencies."""
    site = Path(sysconfig.get_paths()["purelib"])
    dest.mkdir(parents=True, exist_ok=True)
    for dist in importlib.metadata.distributions(path=[str(site)]):
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower() not in wanted:
            continue
        for top in {f.parts[0] for f in dist.files or () if f.parts and f.parts[0] != ".."}:
            if (site / top).exists() and not (dest / top).exists():
                (dest / top).symlink_to(site / top)
    return dest


def installed_debs(names: list[str]) -> list[str]:
    """The Debian packages of ``names`` that dpkg has installed."""
    res = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\\n", *names],
                         capture_output=True, text=True)
    return [line.split()[0] for line in res.stdout.splitlines() if line.endswith(" installed")]
