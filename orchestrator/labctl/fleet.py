"""Ad-hoc work on many lab hosts over SSH, with Fabric: what Ansible is not for.

- :func:`run_on_hosts` runs one shell command on every host, a bounded number at a time, and
  returns one :class:`HostResult` per host, in the order given. A host that cannot be reached,
  refuses the key or times out is a result with ``error`` set, never an exception that would
  lose the other hosts' results.
- :func:`collect_logs` fetches, from every host, the agent's attempt directories of one run
  (``<state_dir>/attempts/<run_id>-*/``: attempt ids start with the run id) and the agent's
  log (a file, and/or its systemd journal) into ``dest_dir/<host>/``, and writes and returns a
  :class:`Manifest` (host, remote path, local path, size, sha256 of every file).

Each host is a :class:`FleetHost`: how to reach it and where its agent keeps its state. The
CLI builds them from ``--host NAME=user@addr[:port]`` (:func:`parse_host_specs`). Every host
gets its own :class:`fabric.Connection` in a thread pool (at most ``parallel`` at once), so
that each result carries its own timing and error.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from labcontract.errors import InputError, Problem

DEFAULT_STATE_DIR = "/var/lib/storagelab-agent"   # deploy/systemd/storagelab-agent.service
DEFAULT_JOURNAL_UNIT = "storagelab-agent"
DEFAULT_CONNECT_TIMEOUT_S = 10.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SPEC = re.compile(r"(?P<name>[^=]+)=(?:(?P<user>[^@]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<addr>[^:\[\]]+))"
                   r"(?::(?P<port>\d+))?")
_NO_ATTEMPTS_RC = 3
T = TypeVar("T")


@dataclass(frozen=True)
class FleetHost:
    """A lab host as SSH sees it, and where its agent keeps attempts and logs."""

    name: str
    address: str
    user: str = "root"
    port: int = 22
    key: Path | None = None               # None: the user's default keys and ssh-agent
    known_hosts: Path | None = None       # given: host keys are checked strictly against it
    state_dir: str = DEFAULT_STATE_DIR     # the agent's --state-dir
    log_path: str | None = None            # the agent's log file, when it logs to one
    journal_unit: str | None = DEFAULT_JOURNAL_UNIT   # systemd unit whose journal is collected

    @property
    def target(self) -> str:
        addr = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.user}@{addr}:{self.port}"


@dataclass(frozen=True)
class HostResult:
    """What one host did with a command. ``exit_code`` is None when it never ran to the end,
    and ``error`` then says why (unreachable, authentication, timeout)."""

    host: str
    exit_code: int | None
    stdout: str
    stderr: str
    seconds: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0


@dataclass(frozen=True)
class CollectedFile:
    host: str
    remote_path: str
    local_path: str
    size: int
    sha256: str


@dataclass
class Manifest:
    """What :func:`collect_logs` gathered; ``failures`` maps a host to why it gave nothing,
    ``notes`` lists what was absent but not an error (no attempts of the run, no log)."""

    run_id: str
    dest_dir: str
    files: list[CollectedFile] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


# --- hosts ----------------------------------------------------------------------------------------

def parse_host_spec(spec: str, **defaults: Any) -> FleetHost:
    """``NAME=user@addr[:port]`` (user defaults to root; an IPv6 address in brackets) into a
    FleetHost; ``defaults`` fill the other fields. ValueError says what is wrong."""
    m = _SPEC.fullmatch(spec.strip())
    if m is None:
        raise ValueError("expected NAME=user@address[:port]")
    name = m["name"]
    if not _NAME.fullmatch(name):
        raise ValueError(f"host name {name!r}: letters, digits, '.', '_', '-' only")
    port = int(m["port"] or 22)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is out of range")
    return _named(FleetHost(name=name, address=m["v6"] or m["addr"], user=m["user"] or "root", port=port,
                            **defaults))


def _named(host: FleetHost) -> FleetHost:
    """``{host}`` in the state dir and log path becomes the host's name."""
    log_path = host.log_path.replace("{host}", host.name) if host.log_path else None
    return replace(host, state_dir=host.state_dir.replace("{host}", host.name), log_path=log_path)


def parse_host_specs(specs: Sequence[str], option: str = "--host", **defaults: Any) -> list[FleetHost]:
    """Every ``--host`` value; every bad one (and every repeated name) reported at once.
    ``{host}`` in ``state_dir`` / ``log_path`` becomes the host's name."""
    hosts: list[FleetHost] = []
    problems: list[Problem] = []
    for spec in specs:
        try:
            host = parse_host_spec(spec, **defaults)
        except ValueError as e:
            problems.append(Problem(repr(spec), str(e)))
            continue
        if any(h.name == host.name for h in hosts):
            problems.append(Problem(repr(spec), f"host {host.name!r} is given twice"))
        hosts.append(host)
    if problems:
        raise InputError(option, problems)
    return hosts


def hosts_from_inventory(path: str | Path, group: str = "agents", **overrides: Any) -> list[FleetHost]:
    """The hosts of ``group`` in a lab inventory (labcontract.inventory), reached as Ansible
    reaches them: ``ansible_host``, ``ansible_user``, ``ansible_port``,
    ``ansible_ssh_private_key_file``; the agent's state dir is ``lab_agent_state_dir`` and its log
    ``lab_agent_log_path`` when set. ``overrides`` (the command line's options) win over them."""
    from labcontract.inventory import load_inventory

    inventory = load_inventory(path)
    if group not in inventory.groups:
        raise InputError("--group", [Problem(repr(group), f"no such group in {path} "
                                                         f"(groups: {', '.join(sorted(inventory.groups))})")])
    return [_inventory_host(inventory.host(name).address, name, inventory.host(name).vars, overrides)
            for name in inventory.groups[group]]


def _inventory_host(address: str, name: str, hostvars: dict[str, Any], overrides: dict[str, Any]) -> FleetHost:
    fields: dict[str, Any] = {}
    for var, key, convert in (("ansible_user", "user", str), ("ansible_port", "port", int),
                              ("ansible_ssh_private_key_file", "key", Path),
                              ("lab_agent_state_dir", "state_dir", str), ("lab_agent_log_path", "log_path", str)):
        if hostvars.get(var) is not None:
            fields[key] = convert(hostvars[var])
    return _named(FleetHost(name=name, address=address, **{**fields, **overrides}))


# --- connections ----------------------------------------------------------------------------------

def connect(host: FleetHost, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> Any:
    """An unopened fabric Connection to ``host`` (opened by its first use)."""
    from fabric import Connection
    from paramiko import RejectPolicy

    kwargs: dict[str, Any] = {"banner_timeout": connect_timeout, "auth_timeout": connect_timeout}
    if host.key is not None:
        kwargs.update(key_filename=[str(host.key)], look_for_keys=False, allow_agent=False)
    conn = Connection(host.address, user=host.user, port=host.port, connect_timeout=max(1, round(connect_timeout)),
                      connect_kwargs=kwargs)
    if host.known_hosts is not None:
        conn.client.load_host_keys(str(host.known_hosts))
        conn.client.set_missing_host_key_policy(RejectPolicy())
    return conn


def describe_error(host: FleetHost, exc: BaseException) -> str:
    """One line naming the host and what went wrong, for a person."""
    from invoke.exceptions import CommandTimedOut
    from paramiko import AuthenticationException, BadHostKeyException, SSHException
    from paramiko.ssh_exception import NoValidConnectionsError

    where = f"{host.name} ({host.target})"
    if isinstance(exc, CommandTimedOut):
        return _timeout_error(host, exc.timeout)
    if isinstance(exc, NoValidConnectionsError):
        reasons = {e.strerror or str(e) for e in exc.errors.values()}
        return f"{where}: cannot connect: {'; '.join(sorted(reasons)).lower()}"
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"{where}: cannot connect: timed out"
    if isinstance(exc, AuthenticationException):
        key = f" with key {host.key}" if host.key else ""
        return f"{where}: authentication failed{key}: {exc}"
    if isinstance(exc, BadHostKeyException):
        return f"{where}: host key does not match known_hosts {host.known_hosts}"
    if isinstance(exc, SSHException):
        return f"{where}: ssh: {exc}"
    if isinstance(exc, OSError):
        return f"{where}: cannot connect: {exc.strerror or exc}"
    return f"{where}: {type(exc).__name__}: {exc}"


def _each_host(hosts: Sequence[FleetHost], parallel: int, fn: Callable[[FleetHost], T]) -> list[T]:
    """``fn`` on every host, at most ``parallel`` at a time; results in the hosts' order."""
    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts))), thread_name_prefix="fleet") as pool:
        return list(pool.map(fn, hosts))


# --- run ------------------------------------------------------------------------------------------

def run_on_hosts(hosts: Sequence[FleetHost], command: str, *, timeout: float = 60.0, parallel: int = 10,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> list[HostResult]:
    """Run ``command`` (a shell command line) on every host; one result per host, in order.
    ``timeout`` bounds the command on each host, ``connect_timeout`` reaching it."""
    return _each_host(hosts, parallel, lambda h: _run_one(h, command, timeout, connect_timeout))


def _run_one(host: FleetHost, command: str, timeout: float, connect_timeout: float) -> HostResult:
    started = time.monotonic()
    try:
        with connect(host, connect_timeout) as conn:
            res = conn.run(command, hide=True, warn=True, in_stream=False, timeout=timeout)
    except Exception as e:
        seconds = time.monotonic() - started
        error = _timeout_error(host, timeout) if _timed_out(e, seconds, timeout) else describe_error(host, e)
        return HostResult(host.name, None, "", "", seconds, error)
    seconds = time.monotonic() - started
    if res.exited is None or res.exited < 0:
        # No exit status: the channel was closed under the command. invoke closes it at the timeout but
        # returns this result instead of raising CommandTimedOut when its timer thread has not yet finished
        # (a loaded machine): a timeout all the same, reported like one.
        error = _timeout_error(host, timeout) if seconds >= timeout else \
            f"{host.name} ({host.target}): the command ended without an exit status (killed by a signal?)"
        return HostResult(host.name, None, res.stdout, res.stderr, seconds, error)
    return HostResult(host.name, res.exited, res.stdout, res.stderr, seconds)


def _timed_out(exc: BaseException, seconds: float, timeout: float) -> bool:
    """invoke raises CommandTimedOut, or sometimes ThreadException when its output readers trip
    over the channel it closed at the timeout."""
    from invoke.exceptions import CommandTimedOut, ThreadException

    return isinstance(exc, CommandTimedOut) or (isinstance(exc, ThreadException) and seconds >= timeout)


def _timeout_error(host: FleetHost, timeout: float) -> str:
    return f"{host.name} ({host.target}): command timed out after {timeout:g}s"


# --- collect-logs ---------------------------------------------------------------------------------

def collect_logs(run_id: str, hosts: Sequence[FleetHost], dest_dir: Path, *, timeout: float = 120.0,
                 parallel: int = 10, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> Manifest:
    """Fetch every host's attempt directories of ``run_id`` and its agent log into
    ``dest_dir/<host>/{attempts,logs}/``; write ``dest_dir/manifest.json`` and return it."""
    if not _NAME.fullmatch(run_id):
        raise InputError("RUN", [Problem(repr(run_id), "not a run id")])
    manifest = Manifest(run_id, str(dest_dir))
    per_host = _each_host(hosts, parallel, lambda h: _collect_one(h, run_id, dest_dir, timeout, connect_timeout))
    for host, (files, notes, error) in zip(hosts, per_host, strict=True):
        manifest.files += files
        manifest.notes += notes
        if error:
            manifest.failures[host.name] = error
    dest_dir.mkdir(parents=True, exist_ok=True)
    (dest_dir / "manifest.json").write_text(manifest.to_json())
    return manifest


_Collected = tuple[list[CollectedFile], list[str], str | None]


def _collect_one(host: FleetHost, run_id: str, dest: Path, timeout: float, connect_timeout: float) -> _Collected:
    files: list[CollectedFile] = []
    notes: list[str] = []
    try:
        with connect(host, connect_timeout) as conn:
            sftp = conn.sftp()
            sftp.get_channel().settimeout(timeout)
            local = dest / host.name
            for rel in _list_attempt_files(conn, host, run_id, timeout, notes):
                remote = f"{host.state_dir.rstrip('/')}/attempts/{rel}"
                files.append(_fetch(sftp, host, remote, local / "attempts" / rel))
            if host.log_path:
                files += _fetch_log(sftp, host, host.log_path, local / "logs", notes)
            if host.journal_unit:
                files += _fetch_journal(conn, host, host.journal_unit, local / "logs", timeout, notes)
    except Exception as e:
        return files, notes, describe_error(host, e)
    return files, notes, None


def _list_attempt_files(conn: Any, host: FleetHost, run_id: str, timeout: float, notes: list[str]) -> list[str]:
    """Paths, relative to the attempts directory, of every file of the run's attempts."""
    attempts = f"{host.state_dir.rstrip('/')}/attempts"
    script = (f"cd {shlex.quote(attempts)} 2>/dev/null || exit {_NO_ATTEMPTS_RC}; "
              f"find . -mindepth 2 -type f -path {shlex.quote(f'./{run_id}-*/*')} -printf '%P\\0'")
    res = conn.run(script, hide=True, warn=True, in_stream=False, timeout=timeout)
    if res.exited == _NO_ATTEMPTS_RC:
        notes.append(f"{host.name}: no attempts directory {attempts}")
        return []
    if res.exited != 0:
        raise OSError(f"listing {attempts} failed (exit {res.exited}): {res.stderr.strip()}")
    rels = sorted(p for p in res.stdout.split("\0") if p and ".." not in PurePosixPath(p).parts)
    if not rels:
        notes.append(f"{host.name}: no attempts of {run_id} in {attempts}")
    return rels


def _fetch(sftp: Any, host: FleetHost, remote: str, local: Path) -> CollectedFile:
    local.parent.mkdir(parents=True, exist_ok=True)
    sftp.get(remote, str(local))
    return _record(host, remote, local)


def _record(host: FleetHost, remote: str, local: Path) -> CollectedFile:
    digest = hashlib.sha256()
    with local.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return CollectedFile(host.name, remote, str(local), local.stat().st_size, digest.hexdigest())


def _fetch_log(sftp: Any, host: FleetHost, remote: str, local_dir: Path, notes: list[str]) -> list[CollectedFile]:
    try:
        sftp.stat(remote)
    except FileNotFoundError:
        notes.append(f"{host.name}: no agent log at {remote}")
        return []
    return [_fetch(sftp, host, remote, local_dir / PurePosixPath(remote).name)]


def _fetch_journal(conn: Any, host: FleetHost, unit: str, local_dir: Path, timeout: float,
                   notes: list[str]) -> list[CollectedFile]:
    """The unit's journal, when the host keeps one (best effort: absent is a note)."""
    command = f"journalctl -u {shlex.quote(unit)} --no-pager -q -o short-iso"
    res = conn.run(command, hide=True, warn=True, in_stream=False, timeout=timeout)
    if res.exited != 0 or not res.stdout.strip():
        notes.append(f"{host.name}: no journal of {unit}")
        return []
    local = local_dir / f"journal-{unit}.log"
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(res.stdout)
    return [_record(host, command, local)]
