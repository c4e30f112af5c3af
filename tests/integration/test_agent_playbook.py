"""playbooks/agent.yml for real on this machine (connection local), in a throw-away prefix.

- lab_packages: only packages dpkg already has, no apt cache update: ok, never changed (skipped where the
  system Python has no apt bindings: the apt module would install python3-apt first);
- driver: none (nothing is loaded);
- io_tuning: the udev rule and the sysctl file are written under the prefix and never applied; the
  I/O scheduler is set, through sysfs, on a loop device this test creates (and on nothing else);
- lab_agent: the agent is pip-installed offline into a venv under the prefix (a wheel of this
  checkout, ``--no-index --no-deps``; its dependencies, on PYTHONPATH, are the project venv's
  distributions of the base install only: nothing of the controller extra, as on a lab host) and
  started as ``storagelab-agent`` by the pidfile script (this machine has no systemd). It is proven
  running by registering at a real redis-server, through a real controller, with its DUT and metrics
  address. It runs as a dedicated system user the role creates (a throw-away name, removed at the
  end), which reads and writes the declared loop DUT through its ACL and has no access to an
  undeclared loop device. The prefix is a world-traversable directory of /tmp (pytest's own is not);
  the user has a fixed free uid (``lab_agent_uid``) so that, before the run, it can be let through
  (ACL ``--x``, removed at the end) the directories above this interpreter that others cannot
  traverse (pyenv under /root).

A second run changes nothing. The agent is stopped by the script and, whatever happens, killed by its
pid; the loop device is detached by its name.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.orm import Session, sessionmaker

from labcontract.inventory import load_inventory
from orchestrator.labs.lab import Lab, free_port, wait_for
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host
from tests.ansible_helpers import (
    PlaybookRun,
    can_use_loop_devices,
    dependency_dir,
    installed_debs,
    local_inventory,
    loop_device,
    project_wheel,
    run_playbook,
)
from tests.redfish import WATTS, redfish_mockup
from tests.unit.test_agent_deps import base_requirements, closure

pytestmark = pytest.mark.integration

LAB_PACKAGES = ["fio", "nvme-cli", "sg3-utils", "hdparm", "sysstat", "smartmontools", "util-linux", "python3-venv"]
INSTALL_TASKS = ("Install the lab OS packages", "Install the agent into its venv",
                 "Install the I/O scheduler udev rule", "Write the kernel settings",
                 "Install the start script (no systemd)")


def apt_bindings() -> bool:
    """Whether the apt module can run without installing python3-apt (it re-runs itself with the system
    Python when the venv's has no apt bindings)."""
    return subprocess.run(["/usr/bin/python3", "-c", "import apt"], capture_output=True).returncode == 0


def host_vars(tmp_path: Path, prefix: Path, broker: str, metrics_port: int, user: str,
              uid: int) -> dict[str, Any]:
    """Everything agent.yml writes goes under ``prefix``; nothing is installed from the network."""
    return {
        "lab_packages_install": apt_bindings(), "lab_packages_list": installed_debs(LAB_PACKAGES),
        "lab_packages_update_cache": False,
        "driver_package": "", "driver_module": "",
        "io_tuning_udev_rules_file": str(prefix / "60-storagelab-scheduler.rules"), "io_tuning_udev_reload": False,
        "io_tuning_sysctl": {"vm.swappiness": 1}, "io_tuning_sysctl_file": str(prefix / "60-storagelab.conf"),
        "io_tuning_sysctl_apply": False,
        "lab_agent_wheel": str(project_wheel(tmp_path / "wheels")), "lab_agent_wheel_dir": str(prefix / "wheels"),
        "lab_agent_venv": str(prefix / "venv"),
        "lab_agent_venv_command": f"{sys.executable} -m venv", "lab_agent_pip_extra_args": "--no-index --no-deps",
        "lab_agent_environment": {"PYTHONPATH": str(agent_dependency_dir(prefix / "deps"))},
        "lab_agent_user": user, "lab_agent_uid": uid, "lab_agent_udev_rules_file": str(prefix / "60-storagelab.rules"),
        "lab_agent_udev_reload": False,
        "lab_agent_service_mode": "script", "lab_agent_script": str(prefix / "storagelab-agent-ctl"),
        "lab_agent_state_dir": str(prefix / "state"), "lab_agent_log_dir": str(prefix / "log"),
        "lab_agent_run_dir": str(prefix / "run"), "lab_agent_unit_dir": str(prefix / "units"),
        "lab_agent_broker_url": broker, "lab_agent_metrics_port": metrics_port,   # bound to metrics_address
        "metrics_address": f"127.0.0.1:{metrics_port}", "lab_agent_stop_timeout": 15,
    }


BMC_PASSWORD = "lab-bmc-password\n"


def bmc_vars(tmp_path: Path, prefix: Path, url: str) -> dict[str, Any]:
    """The host's BMC: sushy-static's mockup, the password's file on the "control node" (this machine)."""
    src = tmp_path / "bmc-password"
    src.write_text(BMC_PASSWORD)
    return {"lab_agent_bmc": {"url": url, "user": "storagelab", "password_src": str(src), "interval_s": 0.5},
            "lab_agent_bmc_config": str(prefix / "bmc" / "bmc.yaml"),
            "lab_agent_bmc_password_file": str(prefix / "bmc" / "bmc-password")}


def step_watts(db: sessionmaker[Session], run_id: str) -> float | None:
    from orchestrator.store.models import Result

    with db() as s:
        (res,) = s.query(Result).filter(Result.run_id == run_id).all()
        return ((res.provenance or {}).get("power") or {}).get("avg_w")


def agent_dependency_dir(dest: Path) -> Path:
    """A directory of links to the project venv's distributions of the base install (the agent's, with
    their own dependencies) and to nothing else: the installed agent runs without the controller's."""
    dependency_dir(dest, closure(base_requirements()))
    assert not (dest / "sqlalchemy").exists() and (dest / "celery").exists()
    return dest


def agent_process(pid: int) -> str | None:
    """The command line of ``pid`` when it is a running storagelab agent (``storagelab-agent``), else None."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return None
    return cmdline if "/storagelab-agent " in cmdline else None


def free_id() -> int:
    """A uid that is also a free gid (the role's group gets the same number)."""
    used_u, used_g = {p.pw_uid for p in pwd.getpwall()}, {g.gr_gid for g in grp.getgrall()}
    return next(i for i in range(61000 + os.getpid() % 500, 62000) if i not in used_u and i not in used_g)


@contextlib.contextmanager
def interpreter_reachable(uid: int) -> Iterator[None]:
    """uid may traverse the directories above this interpreter that others cannot (an ACL entry, removed
    at the end, with the whole ACL when the directory had none)."""
    real = Path(os.path.realpath(sys.executable))
    closed = [d for d in real.parents if not d.stat().st_mode & 0o001]
    had_acl = {d: subprocess.run(["getfacl", "-c", "-s", str(d)], capture_output=True, text=True).stdout != ""
               for d in closed}
    try:
        for d in closed:
            subprocess.run(["setfacl", "-m", f"u:{uid}:x", str(d)], check=True, capture_output=True)
        yield
    finally:
        for d in closed:
            subprocess.run(["setfacl", "-x", f"u:{uid}", str(d)], capture_output=True, check=False)
            if not had_acl[d]:
                subprocess.run(["setfacl", "-b", str(d)], capture_output=True, check=False)


@contextlib.contextmanager
def throwaway_user_and_prefix() -> Iterator[tuple[str, Path]]:
    """A user name that does not exist yet (the role creates it) and a prefix the user can traverse; the
    user, its group and the prefix are removed at the end."""
    user = f"slt{os.getpid()}"
    with contextlib.suppress(KeyError):
        pwd.getpwnam(user)
        pytest.skip(f"user {user} exists already")
    prefix = Path(tempfile.mkdtemp(prefix="storagelab-agent-pb-", dir="/tmp"))
    prefix.chmod(0o755)
    try:
        yield user, prefix
    finally:
        subprocess.run(["userdel", user], capture_output=True, check=False)
        with contextlib.suppress(KeyError):
            grp.getgrnam(user)
            subprocess.run(["groupdel", user], capture_output=True, check=False)
        shutil.rmtree(prefix, ignore_errors=True)


def proc_uid(pid: int) -> int:
    """The real uid of ``pid`` (/proc/<pid>/status ``Uid:`` real, effective, saved, fs)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("Uid:"))
    uids = {int(u) for u in line.split()[1:]}
    assert len(uids) == 1, line
    return uids.pop()


def user_can(user: str, test: str, dev: str) -> bool:
    """``test -r``/``-w`` on ``dev`` as ``user`` (access(2): ACLs count)."""
    return subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", "sh", "-c",
                           f'test {test} "$1"', "sh", dev], capture_output=True).returncode == 0


def acl_users(dev: str) -> list[str]:
    out = subprocess.run(["getfacl", "-c", "-n", dev], capture_output=True, text=True, check=True).stdout
    return [x.split(":")[1] for x in out.splitlines() if x.startswith("user:") and x.split(":")[1]]


READ_SUITE = "suite: unprivileged\nprofiles:\n  - {name: r, rw: randread, bs: 4k, iodepth: 4, runtime: 3s}\n"


def submit_read(lab: Lab, device: str) -> str:
    from labcontract.suite import parse_suite
    from labcontract.transport import redis_client
    from orchestrator.runs.client import ControllerClient

    assert lab.broker_url
    run_id, reply = ControllerClient(redis_client(lab.broker_url), timeout_s=30).submit(
        parse_suite(READ_SUITE, "unprivileged.yaml"), "localhost", [device])
    assert reply is not None and reply.ok, reply
    return run_id


def fio_under(pid: int) -> int | None:
    """A running fio that descends from ``pid`` (the agent starts it through a shell wrapper)."""
    parents: dict[int, int] = {}
    fios = []
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError, ValueError):
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            parents[int(status.parent.name)] = int(fields["PPid"])
            if fields.get("Name", "").strip() == "fio":
                fios.append(int(status.parent.name))
    for fio in fios:
        p = fio
        while p in parents and p > 1:
            p = parents[p]
            if p == pid:
                return fio
    return None


def run_state(db: sessionmaker[Session], run_id: str) -> str:
    from orchestrator.store.models import Run

    with db() as s:
        run = s.get(Run, run_id)
        return str(run.state) if run is not None else ""


def task(run: PlaybookRun, name: str) -> dict[str, Any]:
    (res,) = run.task_results(name)
    return res


def scheduler_of(dev: str) -> str:
    return Path(f"/sys/block/{Path(dev).name}/queue/scheduler").read_text().strip()


@contextlib.contextmanager
def kept_scheduler(dev: str) -> Iterator[str]:
    """The loop device's I/O scheduler, put back at the end: the kernel keeps it for the next user of that
    loop device after it is detached."""
    queue = Path(f"/sys/block/{Path(dev).name}/queue/scheduler")
    original = queue.read_text().split("[", 1)[1].split("]", 1)[0]
    try:
        yield original
    finally:
        queue.write_text(original)


def registered(db: sessionmaker[Session], after: float) -> Host | None:
    try:
        with db() as s:
            h = s.get(Host, "localhost")
            if h is None or not h.registered_at or h.registered_at < after:
                return None
            _ = [d.path for d in h.devices]
            s.expunge(h)
            return h
    except Exception:                 # the controller has not created the schema yet
        return None


def kill_agent(pid: int) -> None:
    if agent_process(pid) is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_agent_playbook_runs_for_real_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    if not can_use_loop_devices():
        pytest.skip("needs root and loop devices (the I/O scheduler is set on a loop device the test creates)")
    if shutil.which("setfacl") is None or shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("needs setfacl, useradd and setpriv")
    t0 = time.monotonic()
    lab = Lab(tmp_path / "lab")
    pids: list[int] = []
    uid = free_id()
    with throwaway_user_and_prefix() as (user, prefix), interpreter_reachable(uid), \
            redfish_mockup(tmp_path / "sushy.log") as bmc:   # prefix stands for /
        run_the_playbook_twice(tmp_path, prefix, (user, uid), lab, pids, t0, bmc.url)


def run_the_playbook_twice(tmp_path: Path, prefix: Path, account: tuple[str, int], lab: Lab, pids: list[int],
                           t0: float, bmc_url: str) -> None:
    user, uid = account
    try:
        lab.start_redis()
        broker = agent_credentials(lab.agent_url("localhost"), prefix / "secrets", uid)
        store = f"sqlite:///{tmp_path / 'lab' / 'store.sqlite'}"
        controller = lab.start_controller(store)
        with loop_device(tmp_path / "dut0.img", size_mib=8) as dev, kept_scheduler(dev) as original, \
                loop_device(tmp_path / "other.img", size_mib=1) as undeclared, dropped_acl(dev):
            wanted = next(s for s in ("mq-deadline", "none") if s != original)
            inv = local_inventory(tmp_path / "inv", [{"name": "dut0", "kind": "loop", "path": dev,
                                                      "scheduler": wanted}],
                                  **host_vars(tmp_path, prefix, broker, free_port(), user, uid),
                                  **bmc_vars(tmp_path, prefix, bmc_url))
            load_inventory(inv)           # what the playbook reads is a valid lab inventory
            since = time.time()
            try:
                first = run_playbook("agent.yml", inv, tmp_path / "run1")
                script = prefix / "storagelab-agent-ctl"
                if (prefix / "run" / "agent.pid").exists():
                    pids.append(int((prefix / "run" / "agent.pid").read_text()))
                assert first.status == "successful", [e.get("stdout") for e in first.events[-8:]]
                t_first = time.monotonic() - t0

                # packages already installed: ok, not changed; the rest was installed and started
                if apt_bindings():
                    packages = task(first, "Install the lab OS packages")
                    assert not packages["changed"] and not packages.get("cache_updated"), packages
                    assert packages["invocation"]["module_args"]["name"] == installed_debs(LAB_PACKAGES), packages
                # the new wheel alone (its dependencies are on PYTHONPATH here: the next task has nothing to add)
                reinstalled = task(first, "Install the agent's changed wheel over the installed one")
                assert reinstalled["changed"] and reinstalled["invocation"]["module_args"]["state"] == "forcereinstall"
                assert not task(first, "Install the agent into its venv")["changed"]
                started = task(first, "Start the agent (no systemd)")
                assert started["changed"] and started["stdout"].startswith("started (pid "), started
                assert first.item_results("Set the I/O scheduler of the declared DUTs now")[0]["stdout"] == "changed"
                assert f"[{wanted}]" in scheduler_of(dev)
                assert (prefix / "60-storagelab.conf").read_text().splitlines()[1:] == ["vm.swappiness = 1"]
                assert not (prefix / "60-storagelab-scheduler.rules").read_text().count("ATTR{")  # a loop DUT: no rule

                # the agent runs as the dedicated user, which reaches the declared DUT only (its ACL)
                (pid,) = pids
                assert pwd.getpwnam(user).pw_uid == uid and grp.getgrnam(user).gr_gid == uid
                assert proc_uid(pid) == uid
                assert (prefix / "state").stat().st_uid == uid and (prefix / "log").stat().st_uid == uid
                assert acl_users(dev) == [str(uid)] and acl_users(undeclared) == []
                assert user_can(user, "-r", dev) and user_can(user, "-w", dev)
                assert not user_can(user, "-r", undeclared) and not user_can(user, "-w", undeclared)
                rules = (prefix / "60-storagelab.rules").read_text()
                assert f'KERNEL=="{Path(dev).name}", RUN+="/usr/bin/setfacl -m u:{user}:rw $devnode"' in rules
                assert Path(undeclared).name + '"' not in rules

                # a running agent of the prefix's venv, registered with its DUT and metrics address
                cmdline = agent_process(pid)
                venv_bin = prefix / "venv" / "bin"
                assert cmdline is not None and cmdline.startswith(f"{venv_bin}/python"), cmdline
                assert f" {venv_bin}/storagelab-agent --host localhost " in cmdline, cmdline
                assert list((prefix / "venv" / "lib").glob("python3*/site-packages/agents/cmd/cli.py"))
                db = sessions(make_engine(store))

                def up() -> Host | None:
                    if not controller.alive():
                        raise AssertionError(f"controller died:\n{controller.tail()}")
                    if agent_process(pid) is None:
                        raise AssertionError(f"agent died:\n{(prefix / 'log' / 'agent.log').read_text()[-3000:]}")
                    return registered(db, since)

                host = wait_for(up, 30, "the installed agent to register")
                assert isinstance(host, Host)
                assert [(d.name, d.path) for d in host.devices] == [("dut0", dev)]
                assert host.facts["metrics_address"] == f"127.0.0.1:{host_vars_port(inv)}"
                t_registered = time.monotonic() - t0

                # a measurement: fio, the agent's child, runs as the user on the DUT (read through the ACL)
                run_id = submit_read(lab, "dut0")

                def fio_started() -> int | None:
                    if run_state(db, run_id) in ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"):
                        raise AssertionError(f"run {run_id} {run_state(db, run_id)} before its fio was seen: "
                                             f"{(prefix / 'log' / 'agent.log').read_text()[-3000:]}")
                    return fio_under(pid)

                fio = wait_for(fio_started, 60, "the agent's fio to start", interval=0.02)
                assert isinstance(fio, int) and proc_uid(fio) == uid
                assert wait_for(lambda: run_state(db, run_id) in ("SUCCEEDED", "FAILED"), 90, "the run to end")
                assert run_state(db, run_id) == "SUCCEEDED", run_state(db, run_id)

                # the host's BMC (lab_agent_bmc): the role wrote the agent's --bmc file and the password's, both
                # root's and readable by the agent's group only; the step's power was read from the Redfish mockup
                bmc_file, pw_file = prefix / "bmc" / "bmc.yaml", prefix / "bmc" / "bmc-password"
                assert f" --bmc {bmc_file}" in cmdline, cmdline
                for f in (bmc_file, pw_file):
                    st = f.stat()
                    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, uid, 0o640), (f, st)
                assert pw_file.read_text() == BMC_PASSWORD
                assert yaml.safe_load(bmc_file.read_text()) == {"url": bmc_url, "user": "storagelab",
                                                                "password_file": str(pw_file), "interval_s": 0.5}
                assert step_watts(db, run_id) == WATTS
                assert BMC_PASSWORD.strip() not in json.dumps([e.get("stdout", "") for e in first.events])

                # the second run: nothing to do, the same agent keeps running
                second = run_playbook("agent.yml", inv, tmp_path / "run2")
                assert second.status == "successful"
                for name in INSTALL_TASKS[0 if apt_bindings() else 1:]:
                    assert not task(second, name)["changed"], name
                assert task(second, "Start the agent (no systemd)")["stdout"] == f"already running (pid {pid})"
                assert second.changed() == 0, [(e["event_data"].get("task"), e["event"]) for e in second.events
                                               if e.get("event_data", {}).get("res", {}).get("changed")]
                assert agent_process(pid) is not None
                t_second = time.monotonic() - t0

                # stopped by the script, by its pid
                res = subprocess.run([str(script), "stop"], capture_output=True, text=True, timeout=30)
                assert res.returncode == 0 and res.stdout.strip() == "stopped", res.stdout + res.stderr
                assert agent_process(pid) is None and not (prefix / "run" / "agent.pid").exists()
                status = subprocess.run([str(script), "status"], capture_output=True, text=True, timeout=10)
                assert status.returncode == 3 and status.stdout.strip() == "stopped"
            finally:
                for pid in pids:
                    kill_agent(pid)
        print(f"timings: first run {t_first:.1f}s, registered {t_registered:.1f}s, second run {t_second:.1f}s, "
              f"total {time.monotonic() - t0:.1f}s")
    finally:
        lab.stop()


def agent_credentials(url: str, secrets: Path, uid: int) -> str:
    """``url`` (the agent's broker user) with its password file copied where the agent's user reads it
    (0600, its own): the lab's secrets directory is root's."""
    from urllib.parse import parse_qsl, urlsplit

    from labcontract.brokerauth import PASSWORD_FILE, with_credentials

    source = dict(parse_qsl(urlsplit(url).query)).get(PASSWORD_FILE)
    if source is None:
        return url
    secrets.mkdir(mode=0o700)
    copy = secrets / Path(source).name
    copy.write_bytes(Path(source).read_bytes())
    copy.chmod(0o600)
    for path in (secrets, copy):
        os.chown(path, uid, uid)
    return with_credentials(url, password_file=copy)


@contextlib.contextmanager
def dropped_acl(dev: str) -> Iterator[None]:
    """The ACL the role gives ``dev`` removed at the end: the node outlives the loop device's detach."""
    try:
        yield
    finally:
        subprocess.run(["setfacl", "-b", dev], capture_output=True, check=False)


def host_vars_port(inv: Path) -> int:
    return int(str(load_inventory(inv).host("localhost").metrics_address).rsplit(":", 1)[1])
