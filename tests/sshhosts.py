"""Lab hosts reachable over SSH, made as network namespaces on this machine.

Each host is a network namespace ``labssh-<tag>-<i>`` joined to the root namespace by a veth
pair (a /30 from 198.18.64.0/20, reserved for benchmarking; no other address is ever used)
and runs its own ``sshd`` with its own config, host key, pid file and log, inside its own UTS
namespace (so ``hostname`` answers the host's name). A generated ed25519 client key is the
only authorised key, and a known_hosts file holds every host key, so clients check host keys
strictly. All namespaces share the root filesystem: each host gets its own ``lab_root``
directory (also the ``LAB_ROOT`` environment variable of its SSH sessions) to look distinct.

Everything is waited on by condition (TCP connect, then ``ssh -o BatchMode=yes true``) and
removed by id at the end: the sshd processes by pid, then any process left in the
namespaces (``ip netns pids``), the veths and namespaces by name, the keys with the temporary
directory. Needs root and iproute2, openssh-server and openssh-client.

``ansible_inventory()`` writes an Ansible inventory of the hosts (reusable for any playbook
of the project), ``fleet_hosts()`` the ``FleetHost`` list of ``orchestrator.labctl.fleet``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.labctl.fleet import FleetHost
from orchestrator.labs.lab import wait_for

NETWORK = ipaddress.IPv4Network("198.18.64.0/20")
SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
USER = "root"
START_TIMEOUT_S = 20.0


def _run(*argv: str) -> str:
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout


def _keygen(path: Path, comment: str) -> None:
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path))


def _used_addresses() -> set[ipaddress.IPv4Address]:
    out = _run("ip", "-4", "-o", "addr", "show")
    return {ipaddress.IPv4Interface(line.split()[3]).ip for line in out.splitlines()}


def _free_subnets(n: int) -> list[ipaddress.IPv4Network]:
    """``n`` random /30s of NETWORK that no address of the root namespace is in."""
    used = {a for a in _used_addresses() if a in NETWORK}
    free = [s for s in NETWORK.subnets(new_prefix=30) if not any(a in s for a in used)]
    return random.sample(free, n)


@dataclass
class SshHost:
    """One namespace host. ``address`` is where sshd listens (port 22), ``lab_root`` its own
    directory on the shared filesystem."""

    name: str
    address: str
    root_address: str
    veth: str
    lab_root: Path
    conf_dir: Path
    popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    @property
    def state_dir(self) -> Path:
        """Where an agent of this host keeps its attempts (``labctl agent --state-dir``)."""
        return self.lab_root / "agent"

    @property
    def log_path(self) -> Path:
        return self.lab_root / "logs" / "agent.log"

    def sshd_alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def sshd_log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.conf_dir / "sshd.log").read_text(errors="replace")
        return ""


@dataclass
class SshHosts:
    """The hosts of one fixture, the client key and known_hosts that reach them."""

    tag: str
    root: Path
    key: Path
    known_hosts: Path
    hosts: list[SshHost] = field(default_factory=list)

    def __iter__(self) -> Iterator[SshHost]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def __getitem__(self, i: int) -> SshHost:
        return self.hosts[i]

    def ssh_options(self) -> list[str]:
        return ["-i", str(self.key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5"]

    def ssh(self, host: SshHost, command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """``ssh`` to ``host`` with the fixture's key; the result of ``command`` there."""
        argv = ["ssh", *self.ssh_options(), f"{USER}@{host.address}", command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def host_option(self, host: SshHost) -> str:
        """The ``labctl hosts --host`` value naming ``host``."""
        return f"{host.name}={USER}@{host.address}:22"

    def fleet_hosts(self, **overrides: Any) -> list[FleetHost]:
        """The hosts as ``orchestrator.labctl.fleet`` reaches them; ``overrides`` replace any field."""
        return [replace(FleetHost(name=h.name, address=h.address, user=USER, port=22, key=self.key,
                                  known_hosts=self.known_hosts, state_dir=str(h.state_dir),
                                  log_path=str(h.log_path), journal_unit=None), **overrides) for h in self.hosts]

    # --- sshd -----------------------------------------------------------------------------------

    def start_sshd(self, host: SshHost) -> None:
        """Start (or restart) ``host``'s sshd and wait until it answers a real login."""
        if host.sshd_alive():
            return
        log = (host.conf_dir / "sshd.log").open("ab")
        script = 'hostname "$1" && exec "$2" -D -e -f "$3"'
        host.popen = subprocess.Popen(
            ["ip", "netns", "exec", host.name, "unshare", "--uts", "/bin/sh", "-c", script, "sh", host.name,
             SSHD, str(host.conf_dir / "sshd_config")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_for(lambda: self._answers(host), START_TIMEOUT_S, f"sshd of {host.name} on {host.address}:22")

    def _answers(self, host: SshHost) -> bool:
        if not host.sshd_alive():
            raise RuntimeError(f"sshd of {host.name} exited:\n{host.sshd_log()}")
        try:
            with socket.create_connection((host.address, 22), timeout=1):
                pass
        except OSError:
            return False
        return self.ssh(host, "true", timeout=15).returncode == 0

    def kill_sshd(self, host: SshHost, sig: int = signal.SIGKILL) -> None:
        """Stop ``host``'s sshd (by its pid); the host is then unreachable."""
        if host.popen is None:
            return
        if host.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(host.popen.pid, sig)
        host.popen.wait(10)
        host.popen = None

    # --- Ansible --------------------------------------------------------------------------------

    def ansible_inventory(self, path: Path, *, groups: Sequence[str] = ("agents",),
                          python: str = "/usr/bin/python3", extra_vars: dict[str, Any] | None = None,
                          per_host: Callable[[SshHost], dict[str, Any]] | None = None) -> Path:
        """A YAML inventory of the hosts in ``groups`` (``ansible_host`` = the namespace address,
        the fixture's key and known_hosts, ``lab_root`` per host, then ``extra_vars`` and
        ``per_host(host)``); returns ``path``. Written as ``<dir>/hosts.yml`` it is also a lab
        inventory for ``labcontract.inventory.load_inventory(<dir>)`` (agents need ``duts``)."""
        common_args = " ".join(self.ssh_options()[2:])
        hostvars = {h.name: {"ansible_host": h.address, "ansible_port": 22, "ansible_user": USER,
                             "ansible_ssh_private_key_file": str(self.key),
                             "ansible_ssh_common_args": common_args,
                             "ansible_python_interpreter": python,
                             "ansible_remote_tmp": str(h.lab_root / ".ansible-tmp"),
                             "lab_root": str(h.lab_root), **(extra_vars or {}),
                             **(per_host(h) if per_host else {})} for h in self.hosts}
        children = {g: {"hosts": hostvars} for g in groups}
        path.write_text(yaml.safe_dump({"all": {"children": children}}, sort_keys=False))
        return path

    @property
    def control_dir(self) -> Path:
        """Where ansible's ssh control masters keep their sockets (ended by stop())."""
        return self.root / "cp"

    def ansible_env(self) -> dict[str, str]:
        """Environment for ``ansible-playbook`` over these hosts: ssh control sockets and local
        temp files under the fixture's directory, host keys checked, pipelining."""
        local_tmp = self.root / "ansible-local"
        local_tmp.mkdir(exist_ok=True)
        self.control_dir.mkdir(exist_ok=True)
        return {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_PIPELINING": "True",
                "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self.control_dir), "ANSIBLE_LOCAL_TEMP": str(local_tmp),
                "ANSIBLE_RETRY_FILES_ENABLED": "False", "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_STDOUT_CALLBACK": "default"}

    def ansible_playbook(self) -> str:
        """The ``ansible-playbook`` next to this interpreter (the venv's), else the one on PATH."""
        here = Path(sys.executable).parent / "ansible-playbook"
        return str(here) if here.exists() else (shutil.which("ansible-playbook") or "ansible-playbook")

    def run_playbook(self, playbook: Path, inventory: Path, *extra: str, env: dict[str, str] | None = None,
                     timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """``ansible-playbook`` over these hosts (:meth:`ansible_env`, plus ``env``), its output captured."""
        return subprocess.run([self.ansible_playbook(), "-i", str(inventory), str(playbook), *extra],
                              env={**self.ansible_env(), **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, cwd=self.root)

    # --- building and teardown ------------------------------------------------------------------

    def add_host(self, i: int, subnet: ipaddress.IPv4Network) -> SshHost:
        name = f"labssh-{self.tag}-{i}"
        root_addr, ns_addr = (str(a) for a in list(subnet.hosts())[:2])
        host = SshHost(name=name, address=ns_addr, root_address=root_addr, veth=f"lsh{self.tag}{i}",
                       lab_root=self.root / "hosts" / name, conf_dir=self.root / "sshd" / name)
        self.hosts.append(host)        # from here on, stop() removes whatever part of it exists
        _run("ip", "netns", "add", name)
        _run("ip", "link", "add", host.veth, "type", "veth", "peer", "name", f"lsn{self.tag}{i}")
        _run("ip", "link", "set", f"lsn{self.tag}{i}", "netns", name)
        _run("ip", "addr", "add", f"{root_addr}/30", "dev", host.veth)
        _run("ip", "link", "set", host.veth, "up")
        _run("ip", "-n", name, "addr", "add", f"{ns_addr}/30", "dev", f"lsn{self.tag}{i}")
        _run("ip", "-n", name, "link", "set", f"lsn{self.tag}{i}", "up")
        _run("ip", "-n", name, "link", "set", "lo", "up")
        self._configure_sshd(host)
        return host

    def _configure_sshd(self, host: SshHost) -> None:
        host.conf_dir.mkdir(parents=True)
        for d in ("agent/attempts", "logs"):
            (host.lab_root / d).mkdir(parents=True, exist_ok=True)
        host_key = host.conf_dir / "ssh_host_ed25519_key"
        _keygen(host_key, host.name)
        (host.conf_dir / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        (host.conf_dir / "sshd_config").write_text(_sshd_config(host, host_key))
        key_type, key_data = Path(f"{host_key}.pub").read_text().split()[:2]
        with self.known_hosts.open("a") as f:
            f.write(f"{host.address} {key_type} {key_data}\n")

    def close_control_masters(self) -> None:
        """End the ssh control masters ansible left (each by its socket)."""
        for sock in self.control_dir.glob("*") if self.control_dir.exists() else ():
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "labssh-control"],
                           capture_output=True, timeout=10)

    def stop(self) -> None:
        self.close_control_masters()
        for host in self.hosts:
            self.kill_sshd(host)
        for host in self.hosts:
            _kill_namespace_processes(host.name)
            subprocess.run(["ip", "link", "del", host.veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", host.name], capture_output=True)
        self.hosts.clear()
        shutil.rmtree(self.root / "sshd", ignore_errors=True)
        for p in (self.key, self.key.with_suffix(".pub"), self.known_hosts):
            p.unlink(missing_ok=True)


def play_recap(output: str) -> dict[str, dict[str, int]]:
    """An ``ansible-playbook`` output's PLAY RECAP lines: host -> {ok, changed, unreachable, failed, ...}."""
    stats = {}
    for m in re.finditer(r"^(\S+)\s+:\s+(.*)$", output.split("PLAY RECAP", 1)[-1], re.M):
        stats[m[1]] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
    return stats


def _sshd_config(host: SshHost, host_key: Path) -> str:
    return "\n".join([
        f"ListenAddress {host.address}:22",
        f"HostKey {host_key}",
        f"PidFile {host.conf_dir / 'sshd.pid'}",
        f"AuthorizedKeysFile {host.conf_dir / 'authorized_keys'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "X11Forwarding no",
        "PrintMotd no",
        "MaxStartups 100:30:200",
        f"SetEnv LAB_ROOT={host.lab_root} LAB_HOST={host.name}",
        f"Subsystem sftp {SFTP_SERVER}",
        "",
    ])


def _kill_namespace_processes(ns: str) -> None:
    """Whatever still runs in our namespace (sessions sshd forked) is ours: end it by pid."""
    res = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    for pid in res.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _check_prerequisites() -> None:
    if os.geteuid() != 0:
        pytest.skip("SSH namespace hosts need root (ip netns)")
    missing = [t for t in ("ip", "ssh", "ssh-keygen", "unshare", SSHD) if shutil.which(t) is None]
    if missing or not Path(SFTP_SERVER).exists():
        pytest.fail(f"SSH namespace hosts need iproute2, openssh-server, openssh-client: missing "
                    f"{', '.join(missing) or SFTP_SERVER}")


@contextlib.contextmanager
def running_ssh_hosts(root: Path, n: int = 3, tag: str | None = None) -> Iterator[SshHosts]:
    """``n`` namespace hosts with their sshd answering; everything removed on exit."""
    _check_prerequisites()
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)     # sshd's privilege separation dir
    tag = tag or uuid.uuid4().hex[:5]
    root.mkdir(parents=True, exist_ok=True)
    hosts = SshHosts(tag=tag, root=root, key=root / "id_ed25519", known_hosts=root / "known_hosts")
    try:
        _keygen(hosts.key, f"labssh-{tag}")
        for i, subnet in enumerate(_free_subnets(n)):
            hosts.add_host(i, subnet)
        for host in hosts:
            hosts.start_sshd(host)
        yield hosts
    finally:
        hosts.stop()


@pytest.fixture(scope="module")
def ssh_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    """Three SSH namespace hosts shared by a test module."""
    with running_ssh_hosts(tmp_path_factory.mktemp("sshhosts")) as hosts:
        yield hosts
