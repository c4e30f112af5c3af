"""Fixtures that start real components: redis-server, controller and agent processes, fio,
loop-device DUTs, PostgreSQL. Everything is started on free ports in a temporary directory
and stopped (by pid / device name) at the end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from labcontract.protocol import COMMANDS_STREAM, EVENTS_STREAM_PREFIX, WEB_COMMANDS_STREAM
from labcontract.suite import parse_suite
from labcontract.transport import redis_client
from orchestrator.labs.lab import Dut, Lab, Proc, TlsFiles, wait_for
from orchestrator.queries import RunDetail, run_detail
from orchestrator.runs.client import ControllerClient
from orchestrator.states import TERMINAL_RUN
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host

QUICK_SUITE = """\
suite: quick
defaults: {ioengine: libaio, direct: true, runtime: 1s}
profiles:
  - {name: 4k-randread, rw: randread, bs: 4k, iodepth: 8}
  - {name: 8k-randrw, rw: randrw, bs: 8k, rwmixread: 70, iodepth: 4, numjobs: 2}
"""

# three short steps: time for a fault, a take-over or a restart to land between them
THREE_STEPS = """\
suite: three
profiles:
  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 2s}
  - {name: b, rw: randread, bs: 8k, iodepth: 4, runtime: 2s}
  - {name: c, rw: read, bs: 64k, iodepth: 4, runtime: 2s}
"""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--vmlab", action="store_true", default=False,
                     help="run the VM tier (tests/vmlab: QEMU guests; make vmtest)")
    parser.addoption("--pts-full", action="store_true", default=False,
                     help="also run the built-in snia-iops (its whole 56-cell matrix) and snia-latency on the embedded "
                          "lab (about two minutes; make test-pts, which .ci/run runs after make test)")


# The longest modules of make test (its slowest durations, 2026-11-29), started first: pytest-xdist hands modules
# (--dist loadfile) to workers in collection order, so a long module collected last ran alone at the end while the
# other workers idled (the last 6% of the tests took 16 of make test's 39 minutes). The rest keep their order; a
# module missing here only starts later.
SLOW_FIRST = (
    "tests/integration/test_labctl_api_web.py", "tests/integration/test_controller_property.py",
    "tests/system/test_site_deploy.py", "tests/integration/test_site_units.py", "tests/integration/test_app_suites.py",
    "tests/integration/test_provisioned_run.py", "tests/integration/test_agent_playbook.py",
    "tests/integration/test_report_browser.py", "tests/integration/test_playbooks.py",
    "tests/integration/test_web_api.py", "tests/system/test_net_suite.py", "tests/redteam/test_redteam_ansible.py",
    "tests/integration/test_sentinel_failover.py", "tests/integration/test_lab_share.py",
    "tests/integration/test_notifications.py", "tests/integration/test_controller_install.py",
    "tests/integration/test_pts_lab.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {m: i for i, m in enumerate(SLOW_FIRST)}
    root = Path(__file__).resolve().parent.parent

    def key(item: pytest.Item) -> int:
        try:
            return rank.get(Path(str(item.fspath)).resolve().relative_to(root).as_posix(), len(rank))
        except ValueError:
            return len(rank)
    items.sort(key=key)           # stable: a module's tests, and the VM tier's modules, keep their order


def pid_alive(pid: int) -> bool:
    """Whether a process (e.g. a fio the agent left in its own session) still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def one_workload(runtime: int, name: str = "long-randread") -> str:
    return (f"suite: single\nprofiles:\n  - {{name: {name}, rw: randread, bs: 4k, iodepth: 4, "
            f"runtime: {runtime}s}}\n")


@dataclass
class LabHandle:
    lab: Lab
    store_url: str
    sessions: sessionmaker[Session]
    host: str
    duts: dict[str, Dut]
    controller: Proc
    agent: Proc

    @property
    def broker(self) -> str:
        assert self.lab.broker_url
        return self.lab.broker_url

    def redis(self) -> Any:
        return redis_client(self.broker)

    def submit(self, suite_text: str, device: str | list[str] = "dut0", *, host: str | None = None,
               runtime: int | None = None, scale: float | None = None, max_rounds: int | None = None) -> str:
        suite = parse_suite(suite_text, "test-suite.yaml")
        devices = [device] if isinstance(device, str) else device
        run_id, reply = ControllerClient(self.redis(), timeout_s=30).submit(
            suite, host or self.host, devices, runtime, scale, max_rounds=max_rounds)
        assert reply is not None and reply.ok, reply
        return run_id

    def detail(self, run_id: str) -> RunDetail:
        with self.sessions() as s:
            return run_detail(s, run_id)

    def wait_run(self, run_id: str, timeout: float = 90) -> RunDetail:
        def ended() -> RunDetail | None:
            self.check_alive()
            d = self.detail(run_id)
            return d if d.run.state in TERMINAL_RUN else None
        result = wait_for(ended, timeout, f"run {run_id} to end", interval=0.1)
        assert isinstance(result, RunDetail)
        return result

    def wait_step_state(self, run_id: str, state: str, timeout: float = 30) -> RunDetail:
        def reached() -> RunDetail | None:
            d = self.detail(run_id)
            return d if any(st.state == state for st in d.steps) else None
        result = wait_for(reached, timeout, f"a step of {run_id} to be {state}", interval=0.05)
        assert isinstance(result, RunDetail)
        return result

    def wait_registered(self, timeout: float = 60, *, after: float = 0.0) -> None:
        def registered() -> bool:
            self.check_alive()
            try:
                with self.sessions() as s:
                    h = s.get(Host, self.host)
                    return bool(h and h.registered_at and h.registered_at > after)
            except Exception:
                return False
        wait_for(registered, timeout, f"agent {self.host} to register", interval=0.1)

    def check_alive(self) -> None:
        for p in (self.controller, self.agent):
            if p in self.lab.procs and not p.alive():
                raise AssertionError(f"{p.name} died:\n{p.tail(40)}")

    def restart_agent(self, duts: list[str] | None = None) -> None:
        t = time.time()
        self.agent = self.lab.start_agent(self.host, duts or [f"{n}={d.path}" for n, d in self.duts.items()])
        self.wait_registered(after=t)

    def restart_controller(self) -> None:
        self.controller = self.lab.start_controller(self.store_url)

    def labctl(self, *args: str, check: bool = False, broker: str | None = None) -> subprocess.CompletedProcess[str]:
        """labctl as ACL user labctl (or as the user of ``broker``, e.g. ``self.lab.web_url``)."""
        argv = [sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(self.lab.root), "--broker",
                broker or self.lab.labctl_url or self.broker, "--store", self.store_url, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=check)

    def web_client(self, actor: str | None = "token:test", timeout_s: float = 30) -> ControllerClient:
        """A client as the web service is one: broker user web, commands on lab:commands:web naming ``actor``."""
        assert self.lab.web_url
        return ControllerClient(redis_client(self.lab.web_url), timeout_s, stream=WEB_COMMANDS_STREAM, actor=actor)


def start_lab(root: Path, *, store_url: str | None = None, n_duts: int = 1, size_mib: int = 128,
              host: str = "testhost", agent_extra: tuple[str, ...] = (),
              controller_extra: tuple[str, ...] = (), tls: TlsFiles | None = None) -> LabHandle:
    """``agent_extra`` / ``controller_extra``: more command-line options for the daemons; ``tls``: the
    broker speaks TLS only (rediss://). The daemons and labctl connect as their own ACL users."""
    lab = Lab(root)
    lab.start_redis(tls=tls)
    duts = {f"dut{i}": lab.make_dut(f"dut{i}", size_mib) for i in range(n_duts)}
    url = store_url or f"sqlite:///{root / 'store.sqlite'}"
    controller = lab.start_controller(url, extra=controller_extra)
    agent = lab.start_agent(host, [f"{n}={d.path}" for n, d in duts.items()], extra=agent_extra)
    engine = make_engine(url)
    handle = LabHandle(lab, url, sessions(engine), host, duts, controller, agent)
    try:
        handle.wait_registered()
    except BaseException:
        lab.stop()
        raise
    return handle


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """A shared one-host lab (redis, controller, agent, one loop-device DUT) per test module."""
    handle = start_lab(tmp_path_factory.mktemp("lab"))
    yield handle
    handle.lab.stop()


@pytest.fixture
def fresh_lab(tmp_path: Path) -> Iterator[LabHandle]:
    """A lab of its own, for tests that kill or restart its processes."""
    handle = start_lab(tmp_path / "lab", n_duts=2)
    yield handle
    handle.lab.stop()


@pytest.fixture(scope="session")
def fio_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Real fio json+ output of the installed fio for a few workloads (1 s each)."""
    from labcontract.fiojob import render_job
    from labcontract.suite import parse_suite

    d = tmp_path_factory.mktemp("fio")
    target = d / "target.img"
    subprocess.run(["truncate", "-s", "64M", str(target)], check=True)
    suite = parse_suite(QUICK_SUITE, "quick")
    out: dict[str, bytes] = {}
    for w in suite.workloads:
        w = w.model_copy(update={"name": w.name.split(".")[0]})
        job = d / f"{w.name}.fio"
        job.write_text(render_job(w, str(target)))
        res = d / f"{w.name}.json"
        subprocess.run(["fio", "--output-format=json+", f"--output={res}", str(job)], check=True,
                       capture_output=True, timeout=60)
        out[w.name] = res.read_bytes()
    return out


def events_tail(url: str, n: int = 50) -> list[dict[str, str]]:
    """The last ``n`` entries of every agent's events stream (lab:events:<host>)."""
    r: Any = redis_client(url)
    return [fields for key in r.scan_iter(match=EVENTS_STREAM_PREFIX + "*", _type="stream")
            for _id, fields in r.xrevrange(key, count=n)]


def unique() -> str:
    return uuid.uuid4().hex[:8]


__all__ = ["COMMANDS_STREAM", "QUICK_SUITE", "LabHandle", "events_tail", "one_workload", "start_lab", "unique"]


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """Debian's headless Chromium (tests/chromium.py), one per session, a page per report: integration and
    system tests share it (two sync Playwright drivers cannot run in one thread). The test fails, never
    skips, when /usr/bin/chromium is missing."""
    from tests import chromium as browser

    with browser.chromium() as c:
        yield c
