"""The embedded lab's moving parts as real processes: redis-server, controller, agents, a DUT.

Used by ``labctl demo``, the integration tests and the benchmarks, so all three exercise
the same real components the same way. Everything started here is stopped by the same
object, by pid (and loop devices by their own name).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from labcontract.brokerauth import (
    ADMIN,
    CONTROLLER,
    LABCTL,
    WEB,
    SecretDir,
    acl_args,
    acl_rules,
    agent_user,
    lab_users,
    password_hash,
    redact_url,
    with_credentials,
    write_secret,
)
from labcontract.errors import ServiceError
from labcontract.transport import redis_client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(cond: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> object:
    """Wait until ``cond()`` is truthy; raise ServiceError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ServiceError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def redis_ping(url: str) -> bool:
    try:
        return bool(redis_client(url, socket_timeout=1, socket_connect_timeout=1).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


@dataclass(frozen=True)
class TlsFiles:
    """A TLS redis-server's files: the CA clients verify it with, its certificate and key; with
    ``client_cert``/``client_key``, clients must present a certificate (mutual TLS)."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path | None = None
    client_key: Path | None = None


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Dut:
    path: str             # what the agent declares: /dev/loopN or the file
    backing: Path
    loop: str | None = None


@dataclass
class Lab:
    """Processes of one lab directory; stop() ends exactly what start_* began."""

    root: Path
    python: str = sys.executable
    procs: list[Proc] = field(default_factory=list)
    duts: list[Dut] = field(default_factory=list)
    broker_url: str | None = None          # the controller's URL (the tests act with its rights)
    admin_url: str | None = None           # ACL user ``admin`` (the lab's own: ACL SETUSER of new hosts)
    labctl_url: str | None = None          # ACL user ``labctl``
    web_url: str | None = None             # ACL user ``web`` (the web service; labctl's token commands)
    _redis_argv: list[str] = field(default_factory=list)
    _base_url: str | None = None           # the broker's URL without a user
    _secrets: SecretDir | None = None
    _acl_file: Path | None = None
    _acl_hosts: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        log = self.root / "logs" / f"{name}.log"
        fh = log.open("ab")
        popen = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env={**os.environ, **(env or {})})
        fh.close()
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    # --- redis ------------------------------------------------------------------------

    def start_redis(self, port: int | None = None, *, bind: tuple[str, ...] = ("127.0.0.1",),
                    unix_socket: bool = False, tls: TlsFiles | None = None) -> str:
        """redis-server with AOF on ``port`` and ACL users (``default`` off; ``admin``, ``controller``,
        ``labctl``, and ``agent-<host>`` added by :meth:`start_agent`), passwords generated into 0600
        files under ``secrets/``; returns the controller's URL (which names its password file). With
        ``unix_socket`` also on a socket file in the lab directory, and the URLs are
        ``redis+socket://USER@/PATH`` (reachable from every network namespace of this machine: the
        namespace hosts of the network lab). With ``tls``, TLS only (``--port 0``): ``rediss://``."""
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServiceError("redis-server is not installed (apt-get install redis-server)")
        port = port or free_port()
        data = self.root / "redis"
        data.mkdir(exist_ok=True)
        self._secrets = SecretDir(self.root / "secrets")
        self._acl_file = data / "users.acl"
        self._write_acl()
        argv = [exe, "--bind", " ".join(bind), "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--dir", str(data), "--protected-mode", "yes",
                "--aclfile", str(self._acl_file), "--maxmemory", "1gb", "--maxmemory-policy", "noeviction",
                "--proto-max-bulk-len", "64mb"]
        scheme = "redis"
        if tls is not None:
            scheme = "rediss"
            argv += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(tls.cert),
                     "--tls-key-file", str(tls.key), "--tls-ca-cert-file", str(tls.ca),
                     "--tls-auth-clients", "yes" if tls.client_cert else "no"]
        else:
            argv += ["--port", str(port)]
        url = f"{scheme}://127.0.0.1:{port}/0"
        if unix_socket:
            sock = data / "redis.sock"
            if len(str(sock)) > 100:
                raise ServiceError(f"redis socket path too long for a unix socket: {sock}")
            argv += ["--unixsocket", str(sock), "--unixsocketperm", "700"]
            url = f"redis+socket://{sock}"
        if tls is not None:
            url = with_credentials(url, ca=tls.ca, cert=tls.client_cert, key=tls.client_key)
        self._base_url = url
        self.admin_url = self.user_url(ADMIN)
        self.labctl_url = self.user_url(LABCTL)
        self.web_url = self.user_url(WEB)
        self._redis_argv = argv
        self._spawn_redis(self.admin_url)
        self.broker_url = self.user_url(CONTROLLER)
        return self.broker_url

    def user_url(self, user: str, base: str | None = None) -> str:
        """The URL of ACL user ``user`` (its password file named in it) on this lab's broker, or on
        ``base`` (the same broker reached another way, e.g. from a network namespace)."""
        assert self._secrets and self._base_url, "start_redis() first"
        self._secrets.password(user)
        return with_credentials(base or self._base_url, user=user, password_file=self._secrets.file(user))

    def agent_url(self, host: str, base: str | None = None) -> str:
        """The URL of ``host``'s agent user, created if the lab has none for it yet: ACL SETUSER on the
        running server (ACL LOAD would disconnect every client) and the ACL file rewritten for restarts."""
        if host not in self._acl_hosts:
            assert self._secrets and self.admin_url
            user = agent_user(host)
            rules = acl_args(acl_rules(user))
            self._acl_hosts.add(host)
            self._write_acl()
            admin: Any = redis_client(self.admin_url)
            admin.execute_command("ACL", "SETUSER", user, "reset", "on",
                                  f"#{password_hash(self._secrets.password(user))}", *rules)
        return self.user_url(agent_user(host), base)

    def _write_acl(self) -> None:
        assert self._secrets and self._acl_file
        write_secret(self._acl_file, self._secrets.render(lab_users(self._acl_hosts, admin=True)))

    def _spawn_redis(self, url: str) -> Proc:
        proc = self._spawn("redis", self._redis_argv)
        wait_for(lambda: redis_ping(url) or _died(proc), 20, f"redis-server ({redact_url(url)})")
        return proc

    def restart_redis(self, sig: int = signal.SIGKILL) -> None:
        """Stop redis-server (SIGKILL: a crash) and start it again on the same port and data directory;
        what it had appended to its AOF comes back."""
        assert self.admin_url
        proc = next(p for p in self.procs if p.name == "redis")
        self.stop_proc(proc, sig)
        self._spawn_redis(self.admin_url)

    # --- daemons ----------------------------------------------------------------------

    def labctl(self) -> list[str]:
        return [self.python, "-m", "orchestrator.cmd.labctl"]

    def start_controller(self, store_url: str, *, extra: tuple[str, ...] = (),
                         metrics_port: int | None = 0, name: str = "controller") -> Proc:
        """The controller; its exporter on 127.0.0.1:``metrics_port`` (0: an ephemeral port, logged as
        ``metrics on 127.0.0.1:PORT``; None: no exporter); its log ``logs/<name>.log``."""
        assert self.broker_url
        return self._spawn(name, [*self.labctl(), "--lab-dir", str(self.root), "--broker",
                                          self.broker_url, "--store", store_url, "controller",
                                          *_metrics_args(metrics_port), *extra])

    def start_web(self, store_url: str, port: int, *, bind: str = "127.0.0.1", extra: tuple[str, ...] = ()) -> Proc:
        """The web service (``orchestrator.cmd.web``) as the broker's user ``web``, its session key in the lab."""
        assert self.web_url, "start_redis() first"
        (self.root / "web").mkdir(exist_ok=True)
        return self._spawn("web", [self.python, "-m", "orchestrator.cmd.web", "--store", store_url,
                                   "--broker", self.web_url, "--port", str(port), "--bind", bind,
                                   "--secret-file", str(self.root / "web" / "session.key"),
                                   "--lab-dir", str(self.root), *extra])

    def start_agent(self, host: str, duts: list[str], *, name: str | None = None, broker: str | None = None,
                    netns: str | None = None, extra: tuple[str, ...] = (), metrics_port: int | None = 0) -> Proc:
        """An agent process; with ``netns``, inside that network namespace (a separate host). Its
        exporter listens on 127.0.0.1:``metrics_port`` (0: an ephemeral port, announced in its host
        facts' ``metrics_address``; None: no exporter)."""
        if self._secrets is not None:        # its own ACL user, on whatever address ``broker`` names
            broker = self.agent_url(host, broker)
        broker = broker or self.broker_url
        assert broker
        prefix = ["ip", "netns", "exec", netns] if netns else []
        argv = [*prefix, *self.labctl(), "--lab-dir", str(self.root), "--broker", broker, "agent",
                "--host", host, "--state-dir", str(self.root / "agents" / host)]
        for d in duts:
            argv += ["--dut", d]
        metrics = _metrics_args(metrics_port)
        if metrics_port is not None:
            metrics += ("--metrics-advertise", "127.0.0.1")
        return self._spawn(name or f"agent-{host}", [*argv, *metrics, *extra])

    # --- devices under test -------------------------------------------------------------

    def make_dut(self, name: str, size_mib: int, *, use_loop: bool = True, backing_dir: Path | None = None) -> Dut:
        backing = (backing_dir or self.root) / f"{name}-{os.getpid()}-{len(self.duts)}.img"
        with backing.open("wb") as f:
            os.posix_fallocate(f.fileno(), 0, size_mib << 20)
        loop = None
        if use_loop and os.geteuid() == 0 and shutil.which("losetup"):
            res = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(backing)],
                                 capture_output=True, text=True)
            if res.returncode == 0:
                loop = res.stdout.strip()
        dut = Dut(path=loop or str(backing), backing=backing, loop=loop)
        self.duts.append(dut)
        return dut

    # --- teardown -----------------------------------------------------------------------

    def stop_proc(self, proc: Proc, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.popen.pid, sig)
            try:
                proc.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(5)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop(self) -> None:
        for proc in reversed(list(self.procs)):
            self.stop_proc(proc)
        self._kill_leftover_fio()
        for dut in self.duts:
            if dut.loop:
                subprocess.run(["losetup", "-d", dut.loop], capture_output=True)
            if dut.backing.parent != self.root:
                dut.backing.unlink(missing_ok=True)
        self.duts.clear()

    def _kill_leftover_fio(self) -> None:
        """fio runs in its own session (it must outlive an agent restart); at teardown, stop the
        ones this lab's agents started and that still run, found through their attempt records."""
        from agents.runner import Attempt

        for state in (self.root / "agents").glob("*/attempts/*/state.json"):
            attempt = Attempt(state.parent.name, state.parent)
            pgid = attempt.state().get("pgid")
            if isinstance(pgid, int) and attempt.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)


def _metrics_args(port: int | None) -> tuple[str, ...]:
    """The embedded lab's daemons serve metrics on loopback, on an ephemeral port by default, so
    that several labs (tests, a demo next to a real agent) never compete for the default ports."""
    if port is None:
        return ("--no-metrics",)
    return ("--metrics-port", str(port), "--metrics-bind", "127.0.0.1")


def _died(proc: Proc) -> bool:
    if not proc.alive():
        raise ServiceError(f"{proc.name} exited with code {proc.popen.returncode}:\n{proc.tail()}")
    return False


@contextlib.contextmanager
def running_lab(root: Path) -> Iterator[Lab]:
    lab = Lab(root)
    try:
        yield lab
    finally:
        lab.stop()
