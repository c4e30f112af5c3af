"""The agent and controller collectors, the live publication and the /metrics + /health endpoint,
without services: a real Agent object with hand-made live status, a real SQLite store."""

from __future__ import annotations

import inspect
import json
import shutil
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agents.cmd.agent import advertised_address
from agents.daemon import Agent, AgentConfig, LivePublisher
from agents.exporter import AgentCollector, parse_net_path
from agents.runner import Attempt, StepRunner
from labcontract import telemetry as T
from labcontract.errors import ConfigError
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.live import AppLive, DeviceLive, DirectionLive, LiveStatus
from labcontract.metrics_http import MetricsServer, split_host_port
from labcontract.protocol import StartStep, Submit
from orchestrator.artifacts import ArtifactStore
from orchestrator.config import ControllerTuning
from orchestrator.controller import Controller
from orchestrator.controller.exporter import ControllerCollector
from orchestrator.store.db import make_engine, migrate, sessions
from orchestrator.store.models import Host


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def samples(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] of one scrape (every family, even without samples)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        out.setdefault(fam.name if fam.type != "counter" else fam.name + "_total", [])
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def one(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    values = [v for lab, v in found.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(values) == 1, (name, labels, found.get(name))
    return values[0]


def make_agent(tmp_path: Path, clock: Clock | None = None) -> Agent:
    config = AgentConfig(host="h1", broker_url="redis://unused", state_dir=tmp_path,
                         duts=(DeclaredDut(name="dut0", path="/dev/sdx", kind="block", size_bytes=1 << 30),),
                         heartbeat_s=2.0)
    agent = Agent(config=config, facts=HostFacts(hostname="h1"), runner=StepRunner(tmp_path), publish=lambda e: None)
    agent.started_at = (clock or Clock())()
    return agent


def status(attempt: str, phase: Any, devices: tuple[DeviceLive, ...], *, started: float, rnd: int = 0) -> LiveStatus:
    return LiveStatus(host="h1", attempt_id=attempt, run_id=f"run-{attempt}", step_id=f"{attempt}-s",
                      step_name=f"step {attempt}", suite="demo", phase=phase, round=rnd, started_at=started,
                      elapsed_s=1.0, expected_s=60.0, devices=devices, updated_at=started + 1)


DEV = DeviceLive(device="/dev/sdx", threads=4, iodepth=32,
                 read=DirectionLive(ios_total=1000, bytes_total=4096000, iops=500.0, lat_mean_ns=100_000.0,
                                    lat_max_ns=2_000_000.0, lat_p99_ns=900_000.0),
                 write=DirectionLive(ios_total=10, bytes_total=40960, iops=0.0))


@pytest.fixture
def net_dir(tmp_path: Path) -> Path:
    stats = tmp_path / "net" / "eth9" / "statistics"
    stats.mkdir(parents=True)
    (stats / "rx_bytes").write_text("123456\n")
    (stats / "tx_bytes").write_text("654321\n")
    return tmp_path / "net"


def test_agent_collector_exports_an_app_steps_last_second(tmp_path: Path) -> None:
    clock = Clock()
    agent = make_agent(tmp_path, clock)
    app = AppLive(t=clock.t, point=8, tps=1234.5, qps=24690.0, lat_avg_ms=6.5, lat_p95_ms=9.0, lat_p99_ms=12.0,
                  errors_per_s=0.5, device="dut0")
    agent.live = (status("a3", "app", (), started=clock.t - 5).model_copy(update={"app": app}),)
    agent.running_ids = ("a3",)
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent, [], clock=clock))
    found = samples(registry)
    for m in T.APP_METRICS:
        [(labels, _value)] = found[m.sample_name]
        assert labels == {"host": "h1", "device": "dut0"}, m.sample_name
    assert one(found, "lab_app_tps") == 1234.5 and one(found, "lab_app_point") == 8
    assert one(found, "lab_app_latency_p99_seconds") == pytest.approx(0.012)
    assert {lab["phase"]: v for lab, v in found["lab_step_phase"]}["app"] == 1


def test_agent_collector_exports_every_agent_metric_with_its_labels(tmp_path: Path, net_dir: Path) -> None:
    clock = Clock()
    agent = make_agent(tmp_path, clock)
    agent.live = (status("a1", "measure", (DEV,), started=clock.t - 30),
                  status("a2", "precondition", (DEV.model_copy(update={"device": "/dev/sdy"}),),
                         started=clock.t - 10, rnd=4))
    agent.running_ids = ("a1", "a2")
    agent.last_heartbeat_at, agent.last_error_at = clock.t - 1.5, clock.t - 100
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent, [("front", "eth9"), ("gone", "nosuchif0")], sys_class_net=net_dir,
                                     clock=clock))
    found = samples(registry)
    for m in T.AGENT_METRICS:
        if m in T.APP_METRICS:
            continue            # an application step's: test_agent_collector_exports_an_app_steps_last_second
        assert found.get(m.sample_name), f"{m.sample_name} has no series"
        for labels, _ in found[m.sample_name]:
            assert tuple(sorted(labels)) == tuple(sorted(m.labels)), m.sample_name
    assert one(found, "lab_fio_ios_total", device="/dev/sdx", direction="read") == 1000
    assert one(found, "lab_fio_bytes_total", device="/dev/sdx", direction="write") == 40960
    assert one(found, "lab_fio_latency_mean_seconds", device="/dev/sdx", direction="read") == pytest.approx(1e-4)
    assert one(found, "lab_fio_latency_max_seconds", device="/dev/sdx", direction="read") == pytest.approx(2e-3)
    assert one(found, "lab_fio_latency_p99_seconds", device="/dev/sdx", direction="read") == pytest.approx(9e-4)
    # no write completed in the last interval: no latency gauges for it (not a zero)
    assert [lab for lab, _ in found["lab_fio_latency_mean_seconds"] if lab["direction"] == "write"] == []
    assert one(found, "lab_fio_threads", device="/dev/sdy") == 4
    assert one(found, "lab_fio_iodepth", device="/dev/sdx") == 32
    assert {lab["phase"]: v for lab, v in found["lab_step_phase"]} == {"purge": 0, "precondition": 1, "measure": 1}
    assert one(found, "lab_precondition_round") == 4
    assert one(found, "lab_step_elapsed_seconds") == pytest.approx(30)     # the step that started first
    assert one(found, "lab_step_expected_seconds") == 60
    info = one(found, "lab_step_info", run="run-a2", step="step a2", suite="demo", phase="precondition")
    assert info == 1 and len(found["lab_step_info"]) == 2
    assert one(found, "lab_agent_up") == 1
    assert one(found, "lab_agent_heartbeat_age_seconds") == pytest.approx(1.5)
    assert one(found, "lab_agent_fio_running") == 2
    assert one(found, "lab_agent_last_error_timestamp_seconds") == clock.t - 100
    assert one(found, "lab_net_path_bytes_total", path="front", interface="eth9", direction="rx") == 123456
    assert one(found, "lab_net_path_bytes_total", path="front", interface="eth9", direction="tx") == 654321
    assert all(lab["path"] == "front" for lab, _ in found["lab_net_path_bytes_total"])   # missing iface: none

    # the steps end: their series disappear, health stays
    agent.live, agent.running_ids = (), ()
    found = samples(registry)
    step_metrics = [m for m in T.AGENT_METRICS if m.labels[:2] in (("host", "device"), ("host", "phase"))
                    or m in (T.PRECONDITION_ROUND, T.STEP_ELAPSED, T.STEP_EXPECTED, T.STEP_INFO)]
    assert len(step_metrics) == 12 + len(T.APP_METRICS)
    for m in step_metrics:
        assert found.get(m.sample_name, []) == [], m.sample_name
    assert one(found, "lab_agent_fio_running") == 0 and one(found, "lab_agent_up") == 1


def test_agent_health_turns_503_after_three_heartbeat_intervals(tmp_path: Path) -> None:
    clock = Clock()
    agent = make_agent(tmp_path, clock)
    collector = AgentCollector(agent, clock=clock)
    clock.t += 5.9                     # never heartbeated yet: counted from the agent's start
    healthy, body = collector.health()
    assert healthy and body["heartbeat_age_s"] == pytest.approx(5.9) and body["heartbeat_limit_s"] == 6.0
    agent.last_heartbeat_at = clock.t
    agent.running_ids = ("r1-s000-a1",)
    clock.t += 6.5
    healthy, body = collector.health()
    assert not healthy and body["up"] == 1 and body["running"] == ["r1-s000-a1"]


class FakeRedis:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def set(self, key: str, value: bytes, ex: int) -> None:
        self.calls.append(("set", key, value, ex))

    def delete(self, key: str) -> None:
        self.calls.append(("delete", key))


def test_live_publisher_sets_a_list_with_a_ttl_and_deletes_when_idle() -> None:
    r = FakeRedis()
    pub = LivePublisher(r, "h1")
    st = status("a1", "measure", (DEV,), started=1.0)
    pub.send([st])
    (op, key, value, ex), = r.calls
    assert (op, key, ex) == ("set", T.LIVE_KEY_PREFIX + "h1", 5)
    assert [LiveStatus.model_validate(x) for x in json.loads(value)] == [st]
    pub.send([])
    assert r.calls[-1] == ("delete", "lab:live:h1")


def test_agent_refreshes_live_status_at_once_when_attempts_change(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    sent: list[tuple[LiveStatus, ...]] = []
    agent.publish_live = lambda statuses: sent.append(tuple(statuses))
    agent.update_live()
    assert sent == [()]                                  # a stale key of an earlier life is removed
    agent.update_live()
    assert sent == [()]                                  # nothing runs: nothing more is sent
    path = tmp_path / "attempts" / "r1-s000-a1"
    path.mkdir(parents=True)
    msg = StartStep(run_id="r1", step_id="r1-s000", attempt_id="r1-s000-a1", host="h1", action="purge",
                    devices=("/dev/sdx",), job_name="purge", kind="purge", timeout_s=10, dispatched_at=1.0)
    (path / "start.json").write_text(msg.model_dump_json())
    (path / "state.json").write_text(json.dumps({"launched_at": 5.0}))
    agent._running = (Attempt("r1-s000-a1", path),)      # what check_attempts found running
    agent.update_live()                                  # changed: at once, not after live_s
    assert agent.running_ids == ("r1-s000-a1",)
    assert [s.attempt_id for s in sent[-1]] == ["r1-s000-a1"] and sent[-1][0].phase == "purge"
    agent._running = ()
    agent.update_live()
    assert sent[-1] == () and agent.live == () and agent.running_ids == ()


# --------------------------------------------------------------------------- controller


SUITE = ("suite: two\nprofiles:\n  - {name: a, rw: randread, bs: 4k, runtime: 1}\n"
         "  - {name: b, rw: randread, bs: 4k, runtime: 1}\n")


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[tuple[Controller, Clock, Any]]:
    from labcontract.protocol import Register

    engine = make_engine(f"sqlite:///{tmp_path / 'store.sqlite'}")
    migrate(engine)
    db = sessions(engine)
    clock = Clock()

    class NoDispatch:
        def start(self, msg: Any) -> None: ...
        def start_many(self, msgs: Any) -> None: ...
        def cancel(self, host: str, msg: Any) -> None: ...
        def report(self, host: str, msg: Any) -> None: ...

    c = Controller(db, None, NoDispatch(), ArtifactStore(tmp_path / "art"), ControllerTuning(),  # type: ignore[arg-type]
                   clock=clock)
    for host, dev in (("h1", "/dev/loop1"), ("h2", "/dev/loop2")):
        c.handle_event(Register(host=host, agent_version="0.1.0", facts=HostFacts(hostname=host),
                                duts=(DeclaredDut(name="dut0", path=dev, kind="block", size_bytes=1 << 30),)))
    yield c, clock, db
    engine.dispose()


def test_controller_collector_counts_by_state(ctl: tuple[Controller, Clock, Any]) -> None:
    c, clock, db = ctl
    for run_id, host in (("r1", "h1"), ("r2", "h1"), ("r3", "h2")):
        reply = c.submit(Submit(run_id=run_id, suite_source="s.yaml", suite_text=SUITE, host=host,
                                devices=("dut0",), reply_to="-"))
        assert reply.ok, reply
    c.schedule()                         # r1 and r3 start (one step each dispatched); r2 waits for h1's device
    clock.t += 30                        # h2 ... and h1 fall silent
    with db.begin() as s:
        h1 = s.get(Host, "h1")
        h1.last_seen = clock.t - 2
    registry = CollectorRegistry()
    last_pass = clock.t - 1
    collector = ControllerCollector(db, ControllerTuning(heartbeat_timeout_s=10), clock=clock,
                                    last_pass=lambda: last_pass)
    registry.register(collector)
    found = samples(registry)
    for m in T.CONTROLLER_METRICS:
        assert found.get(m.sample_name), m.sample_name
        for labels, _ in found[m.sample_name]:
            assert tuple(sorted(labels)) == tuple(sorted(m.labels)), m.sample_name
    runs = {lab["state"]: v for lab, v in found["lab_controller_runs"]}
    assert runs == {"QUEUED": 1, "RUNNING": 2, "PAUSED": 0, "SUCCEEDED": 0, "FAILED": 0, "CANCELLED": 0, "EXPIRED": 0}
    steps = {lab["state"]: v for lab, v in found["lab_controller_steps"]}
    assert steps["DISPATCHED"] == 2 and steps["PENDING"] == 4 and steps["SUCCEEDED"] == 0
    assert one(found, "lab_controller_queue_length") == 1
    assert one(found, "lab_controller_reservations") == 2
    assert one(found, "lab_controller_steps_completed_total") == 0
    assert one(found, "lab_controller_steps_failed_total") == 0
    assert one(found, "lab_controller_agent_up", host="h1") == 1
    assert one(found, "lab_controller_agent_up", host="h2") == 0
    assert one(found, "lab_controller_agent_heartbeat_age_seconds", host="h2") == pytest.approx(30)
    healthy, body = collector.health()
    assert healthy and body["store"] == "ok"
    clock.t += 120
    assert collector.health()[0] is False             # the loop has not passed for two minutes


# --------------------------------------------------------------------------- HTTP


def get(url: str, accept: str | None = None, timeout: float = 5) -> tuple[int, str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_metrics_server_serves_metrics_and_health(tmp_path: Path) -> None:
    clock = Clock()
    agent = make_agent(tmp_path, clock)
    agent.live = (status("a1", "measure", (DEV,), started=clock.t - 3),)
    collector = AgentCollector(agent, clock=clock)
    registry = CollectorRegistry()
    registry.register(collector)
    server = MetricsServer(registry, collector.health, bind="127.0.0.1", port=0).start()
    try:
        assert server.port > 0 and server.address == f"127.0.0.1:{server.port}"
        base = f"http://127.0.0.1:{server.port}"
        code, ctype, body = get(base + "/metrics")
        assert code == 200 and ctype.startswith("text/plain") and "lab_fio_ios_total{" in body
        code, ctype, body = get(base + "/metrics", accept="application/openmetrics-text; version=1.0.0")
        assert code == 200 and ctype.startswith("application/openmetrics-text") and body.endswith("# EOF\n")
        assert "# TYPE lab_step info" in body
        code, ctype, body = get(base + "/health")
        assert (code, ctype) == (200, "application/json") and json.loads(body)["healthy"] is True
        clock.t += 60
        code, _, body = get(base + "/health")
        assert code == 503 and json.loads(body)["up"] == 1
        assert get(base + "/nope")[0] == 404
        if shutil.which("promtool"):
            res = subprocess.run(["promtool", "check", "metrics"], input=get(base + "/metrics")[2],
                                 capture_output=True, text=True)
            assert res.returncode == 0, res.stdout + res.stderr
    finally:
        server.close()


def test_addresses_and_options() -> None:
    assert parse_net_path("front=ens1f0") == ("front", "ens1f0")
    for bad in ("front", "=eth0", "a=", "a=../x"):
        with pytest.raises(ConfigError):
            parse_net_path(bad)
    assert split_host_port("h:9464") == ("h", 9464)
    assert split_host_port("h") == ("h", None)
    assert split_host_port("[::1]:80") == ("::1", 80)
    assert advertised_address("127.0.0.1", "0.0.0.0", 4321) == "127.0.0.1:4321"
    assert advertised_address("lab-07.example:9999", "0.0.0.0", 4321) == "lab-07.example:9999"
    assert advertised_address(None, "10.1.2.3", 4321) == "10.1.2.3:4321"
    assert advertised_address(None, "0.0.0.0", 4321).endswith(":4321")
    # the CLI's defaults are the contract's ports
    from orchestrator.cmd import labctl as cli

    for fn, port in ((cli.agent, T.DEFAULT_AGENT_METRICS_PORT), (cli.controller, T.DEFAULT_CONTROLLER_METRICS_PORT)):
        assert inspect.signature(fn).parameters["metrics_port"].default == port


def test_a_scraper_that_leaves_before_the_answer_costs_a_debug_line_not_a_traceback(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """A scrape cut by the scraper's own timeout (a slow host under TCG) printed a BrokenPipeError traceback into
    the controller's journal at every scrape: the exporter notes it at debug and goes on serving."""
    import logging
    import socket
    import threading

    from prometheus_client.core import GaugeMetricFamily

    closed = threading.Event()

    class Slow:
        def collect(self) -> Any:
            closed.wait(30)                          # answers only once the scraper has gone
            g = GaugeMetricFamily("lab_big", "a large answer", labels=["i"])
            for i in range(60_000):
                g.add_metric([str(i)], float(i))
            yield g

    registry = CollectorRegistry()
    registry.register(Slow())  # type: ignore[arg-type]
    server = MetricsServer(registry, lambda: (True, {}), bind="127.0.0.1", port=0).start()
    caplog.set_level(logging.DEBUG, logger="labcontract.metrics_http")
    try:
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))   # close with a reset
        s.close()
        closed.set()
        deadline = time.monotonic() + 30
        while "left before the answer" not in caplog.text and time.monotonic() < deadline:
            threading.Event().wait(0.05)
        assert "left before the answer" in caplog.text
        # and it goes on serving (60,000 series: seconds on a loaded machine)
        code, _ctype, body = get(f"http://127.0.0.1:{server.port}/metrics", timeout=60)
        assert code == 200 and "lab_big" in body
    finally:
        closed.set()
        server.close()
    assert "Traceback" not in capsys.readouterr().err
