"""``labctl lab up``: the embedded lab (redis-server, controller, one agent with its DUTs) and its web service,
running until Ctrl-C / SIGTERM, with an admin token to open it with.

The web service runs as its own process (``python -m orchestrator.cmd.web``), as user ``web`` of the lab's
broker; the admin token is made here (256 random bits), and only its SHA-256 goes to the controller, on the web
service's stream, exactly as ``labctl token create`` does. The token is printed once and written to a 0600 file in
the lab directory, for ``labctl --api URL --token-file FILE``.

The lab file (``<lab dir>/lab.toml``, orchestrator.labfile) is written before the controller starts: the controller
finds it through ``--lab-dir`` and delivers the end of each run to its ``[notify]`` sinks (those of an earlier lab file
of the directory, and those given to ``lab up``).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from labcontract.brokerauth import write_secret
from labcontract.errors import LabError, ServiceError
from labcontract.protocol import WEB_COMMANDS_STREAM
from labcontract.transport import redis_client
from orchestrator import labfile
from orchestrator.labctl.api import ApiClient
from orchestrator.labs.lab import Lab, Proc, free_port, wait_for
from orchestrator.runs.client import ControllerClient
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host
from orchestrator.tokens import new_token, token_hash

HOST = "lab-local"
ADMIN_TOKEN_NAME = "lab-admin"
START_TIMEOUT_S = 60.0


@dataclass
class LabUp:
    """A running embedded lab with its web service; ``lab.stop()`` ends every process of it."""

    lab: Lab
    store_url: str
    url: str                  # the web service: http://127.0.0.1:PORT
    token: str                # an admin token (shown once)
    token_file: Path
    lab_file: Path
    notify: labfile.Notify    # the sinks its controller delivers to
    host: str
    web: Proc
    controller: Proc
    agent: Proc

    def dead(self) -> Proc | None:
        """The first of the lab's processes that exited, if one did."""
        return next((p for p in self.lab.procs if not p.alive()), None)


def start_lab_up(root: Path, *, port: int | None = None, duts: int = 2, size_mib: int = 256,
                 host: str = HOST, store_url: str | None = None, notify: labfile.Notify | None = None,
                 progress: Callable[[str], None] = lambda _line: None) -> LabUp:
    """Start everything and return once ``GET /api/whoami`` answers 200 with the admin token. ``notify``: sinks added
    to the lab file's ``[notify]`` (an existing lab file's are kept). On any failure what was started is stopped
    again before the error travels."""
    if not 1 <= duts <= 16:
        raise LabError(f"--duts {duts}: between 1 and 16")
    sinks = labfile.sinks_with(root, notify or labfile.Notify(), "labctl lab up")   # every problem before a start
    lab = Lab(root)
    try:
        lab.start_redis()
        assert lab.web_url
        progress(f"redis-server pid {lab.procs[-1].popen.pid}; ACL users and password files in {root / 'secrets'}")
        made = [lab.make_dut(f"dut{i}", size_mib) for i in range(duts)]
        store = store_url or f"sqlite:///{(root / 'store.sqlite').resolve()}"
        port = port or free_port()
        url = f"http://127.0.0.1:{port}"
        token_file = root / "web" / "admin.token"
        lab_file = labfile.write(root, broker=lab.labctl_url, store=store, api=url, token_file=token_file,
                                 notify=sinks, by="labctl lab up")
        controller = lab.start_controller(store)
        agent = lab.start_agent(host, [f"dut{i}={d.path}" for i, d in enumerate(made)])
        _wait_registered(lab, store, host, (controller, agent))
        progress(f"controller pid {controller.popen.pid}, agent {host} pid {agent.popen.pid} with "
                 + ", ".join(f"dut{i}={d.path}" for i, d in enumerate(made)))
        web = lab.start_web(store, port)
        token = reusable_token(token_file, store)        # a lab directory started again keeps its admin token
        if token is None:
            token = new_token()
            ControllerClient(redis_client(lab.web_url), stream=WEB_COMMANDS_STREAM, actor="lab-up").token_create(
                ADMIN_TOKEN_NAME + f"-{int(time.time())}", "admin", token_hash(token), None)
            write_secret(token_file, token + "\n")
        wait_web(url, token, web)
        return LabUp(lab, store, url, token, token_file, lab_file, sinks, host, web, controller, agent)
    except BaseException:
        lab.stop()
        raise


def reusable_token(token_file: Path, store_url: str) -> str | None:
    """The admin token an earlier ``lab up`` of this lab directory wrote, when the store still holds it as a live
    admin token (not revoked, not expired); None otherwise (a new one is made)."""
    from sqlalchemy import select

    from orchestrator.store.db import make_engine, sessions
    from orchestrator.store.models import ApiToken

    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not token or len(token) > 256:
        return None
    engine = make_engine(store_url)
    try:
        with sessions(engine)() as s:
            row = s.scalar(select(ApiToken).where(ApiToken.token_sha256 == token_hash(token)))
    finally:
        engine.dispose()
    if row is None or row.role != "admin" or row.revoked_at is not None or \
            (row.expires_at is not None and row.expires_at <= time.time()):
        return None
    return token


def wait_web(url: str, token: str, web: Proc, timeout: float = START_TIMEOUT_S) -> None:
    """Until ``GET /api/whoami`` answers 200 with ``token``; the web process's log when it exits first."""
    api = ApiClient(url, token, timeout_s=5)
    last: list[str] = [""]

    def answers() -> bool:
        if not web.alive():
            raise ServiceError(f"the web service exited with code {web.popen.returncode}:\n{web.tail()}")
        try:
            api.whoami()
            return True
        except LabError as e:       # not listening yet (ServiceError), the token not applied yet (401)
            last[0] = str(e)
            return False
    try:
        wait_for(answers, timeout, f"the web service at {url}", interval=0.1)
    except ServiceError as e:
        raise ServiceError(f"{e} (last answer: {last[0]})\n{web.tail()}") from None


def _wait_registered(lab: Lab, store: str, host: str, procs: tuple[Proc, ...]) -> None:
    engine = make_engine(store)
    db = sessions(engine)

    def registered() -> bool:
        for p in procs:
            if not p.alive():
                raise ServiceError(f"{p.name} exited with code {p.popen.returncode}:\n{p.tail()}")
        try:
            with db() as s:
                h = s.get(Host, host)
                return bool(h and h.last_seen and h.last_seen > time.time() - 10)
        except Exception:       # the controller has not created the schema yet
            return False
    try:
        wait_for(registered, START_TIMEOUT_S, f"agent {host} to register with the controller", interval=0.2)
    finally:
        engine.dispose()


class StopSignals:
    """SIGINT and SIGTERM for the life of the lab (the handlers before are restored by :meth:`restore`). While
    it starts, the first signal raises KeyboardInterrupt (what was started is stopped again); once it is up,
    a signal sets :attr:`stop`, so the lab stops in order instead of dying in the middle of a wait."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.starting = True
        self._before = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handler(self, _sig: int, _frame: FrameType | None) -> None:
        first = not self.stop.is_set()
        self.stop.set()
        if self.starting and first:
            raise KeyboardInterrupt

    def restore(self) -> None:
        for s, h in self._before.items():
            signal.signal(s, h)


def watch_until_stopped(stop: threading.Event, down: Callable[[], str | None], say: Callable[[str], None],
                        interval: float = 0.5) -> int:
    """Wait until ``stop`` is set (0) or ``down()`` names a part of the lab that went down (1, after saying it)."""
    while not stop.wait(interval):
        why = down()
        if why is not None:
            say(why)
            return 1
    return 0


def serve_until_stopped(up: LabUp, stop: threading.Event, say: Callable[[str], None]) -> int:
    """Keep the lab up until ``stop`` is set (0) or one of its processes exits (1, with its log's tail)."""
    def down() -> str | None:
        dead = up.dead()
        return None if dead is None else (f"{dead.name} exited with code {dead.popen.returncode}; stopping the "
                                          f"lab:\n{dead.tail()}")
    return watch_until_stopped(stop, down, say)
