"""The embedded lab's moving parts as real processes: redis-server, controller, agents, a DUT.

Used by ``labctl demo``, the integration tests and the benchmarks, so all three exercise
the same real components the same way. Everything started here is stopped by the same
object, by pid (and loop devices by their own name).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from labcontract.errors import ServiceError
from labcontract.transport import redis_py_url


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
        return bool(redis.Redis.from_url(redis_py_url(url), socket_timeout=1, socket_connect_timeout=1).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


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
    broker_url: str | None = None
    _redis_argv: list[str] = field(default_factory=list)

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
                    unix_socket: bool = False) -> str:
        """redis-server with AOF on ``port``; with ``unix_socket`` also on a socket file in the lab
        directory, and the URL returned is ``redis+socket://PATH`` (reachable from every network
        namespace of this machine: the namespace hosts of the network lab)."""
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServiceError("redis-server is not installed (apt-get install redis-server)")
        port = port or free_port()
        data = self.root / "redis"
        data.mkdir(exist_ok=True)
        argv = [exe, "--port", str(port), "--bind", " ".join(bind), "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--dir", str(data), "--protected-mode", "yes"]
        auth = ""
        if any(not a.startswith("127.") and a != "::1" for a in bind):
            password = secrets.token_hex(16)     # reachable beyond loopback: require a password
            argv += ["--requirepass", password]
            auth = f":{password}@"
        url = f"redis://{auth}127.0.0.1:{port}/0"
        if unix_socket:
            sock = data / "redis.sock"
            if len(str(sock)) > 100:
                raise ServiceError(f"redis socket path too long for a unix socket: {sock}")
            argv += ["--unixsocket", str(sock), "--unixsocketperm", "700"]
            url = f"redis+socket://{sock}"
        self._redis_argv = argv
        self._spawn_redis(url)
        self.broker_url = url
        return url

    def _spawn_redis(self, url: str) -> Proc:
        proc = self._spawn("redis", self._redis_argv)
        wait_for(lambda: redis_ping(url) or _died(proc), 20, f"redis-server ({url.rsplit('@', 1)[-1]})")
        return proc

    def restart_redis(self, sig: int = signal.SIGKILL) -> None:
        """Stop redis-server (SIGKILL: a crash) and start it again on the same port and data directory;
        what it had appended to its AOF comes back."""
        assert self.broker_url
        proc = next(p for p in self.procs if p.name == "redis")
        self.stop_proc(proc, sig)
        self._spawn_redis(self.broker_url)

    # --- daemons ----------------------------------------------------------------------

    def labctl(self) -> list[str]:
        return [self.python, "-m", "orchestrator.cli"]

    def start_controller(self, store_url: str, *, extra: tuple[str, ...] = (),
                         metrics_port: int | None = 0) -> Proc:
        """The controller; its exporter on 127.0.0.1:``metrics_port`` (0: an ephemeral port, logged as
        ``metrics on 127.0.0.1:PORT``; None: no exporter)."""
        assert self.broker_url
        return self._spawn("controller", [*self.labctl(), "--lab-dir", str(self.root), "--broker",
                                          self.broker_url, "--store", store_url, "controller",
                                          *_metrics_args(metrics_port), *extra])

    def start_agent(self, host: str, duts: list[str], *, name: str | None = None, broker: str | None = None,
                    netns: str | None = None, extra: tuple[str, ...] = (), metrics_port: int | None = 0) -> Proc:
        """An agent process; with ``netns``, inside that network namespace (a separate host). Its
        exporter listens on 127.0.0.1:``metrics_port`` (0: an ephemeral port, announced in its host
        facts' ``metrics_address``; None: no exporter)."""
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
