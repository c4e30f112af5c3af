"""The agent's and the controller's Prometheus exporters, scraped over HTTP from real processes
while a real fio runs: every agent metric of the telemetry contract with its labels, counters
that grow, step series that vanish when the step ends, /health, ``promtool check metrics``, the
controller's runs/steps by state, and the agent's live status in Redis."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from labcontract import telemetry as T
from labcontract.live import LiveStatus
from orchestrator.labs.lab import wait_for
from orchestrator.states import RunState
from orchestrator.store.models import Host
from tests.conftest import LabHandle, start_lab

pytestmark = pytest.mark.integration

SUITE = """\
suite: telemetry
defaults: {ioengine: libaio, direct: true, runtime: 5s}
phases:
  purge: true
  precondition: {numjobs: 1, iodepth: 4, round: 5s, max_rounds: 2, window: 2}
profiles:
  - {name: 8k-7030, rw: randrw, bs: 8k, rwmixread: 70, iodepth: 4, numjobs: 2}
"""

Samples = dict[str, list[tuple[dict[str, str], float]]]
STEP_METRICS = (T.FIO_IOS, T.FIO_BYTES, T.FIO_LAT_MEAN, T.FIO_LAT_MAX, T.FIO_LAT_P99, T.FIO_THREADS, T.FIO_IODEPTH,
                T.STEP_PHASE, T.PRECONDITION_ROUND, T.STEP_ELAPSED, T.STEP_EXPECTED, T.STEP_INFO)


@pytest.fixture(scope="module")
def tlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """A lab whose agent declares a network path over the loopback interface."""
    handle = start_lab(tmp_path_factory.mktemp("telemetry"), agent_extra=("--net-path", "loopback=lo"))
    yield handle
    handle.lab.stop()


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(address: str) -> tuple[str, Samples]:
    code, body = http_get(f"http://{address}/metrics")
    assert code == 200, body
    found: Samples = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            found.setdefault(s.name, []).append((dict(s.labels), s.value))
    return body, found


def value(found: Samples, name: str, **labels: str) -> float:
    values = [v for lab, v in found.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(values) == 1, (name, labels, found.get(name))
    return values[0]


def io_counters(found: Samples, device: str) -> dict[tuple[str, str], float] | None:
    """The fio I/O and byte counters of ``device`` by direction, None until a scrape has them all."""
    counters = {}
    for m in (T.FIO_IOS, T.FIO_BYTES):
        for direction in ("read", "write"):
            values = [v for lab, v in found.get(m.sample_name, [])
                      if lab.get("device") == device and lab.get("direction") == direction]
            if len(values) != 1:
                return None
            counters[(m.sample_name, direction)] = values[0]
    return counters


def promtool_check(body: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (make test installs Debian's prometheus package)")
    res = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, f"promtool check metrics:\n{res.stdout}{res.stderr}\n--- scraped:\n{body}"


def agent_address(lab: LabHandle) -> str:
    with lab.sessions() as s:
        host = s.get(Host, lab.host)
        assert host is not None
        address = host.facts.get("metrics_address")
    assert isinstance(address, str) and address.startswith("127.0.0.1:"), address
    return address


def controller_address(lab: LabHandle) -> str:
    def logged() -> str | None:
        m = re.search(r"metrics on (127\.0\.0\.1:\d+)", lab.controller.log.read_text(errors="replace"))
        return m.group(1) if m else None
    found = wait_for(logged, 30, "the controller to log its metrics port")
    assert isinstance(found, str)
    return found


def test_agent_exporter_during_a_real_run(tlab: LabHandle) -> None:
    address = agent_address(tlab)
    assert re.search(rf"metrics on 127\.0\.0\.1:{address.split(':')[1]} ", tlab.agent.log.read_text())
    dut = tlab.duts["dut0"].path
    code, body = http_get(f"http://{address}/health")
    assert code == 200 and json.loads(body)["up"] == 1 and json.loads(body)["running"] == []

    run_id = tlab.submit(SUITE)
    complete: dict[str, tuple[str, Samples]] = {}       # phase -> a scrape with every step metric
    measure: list[tuple[float, Samples]] = []
    live_seen: list[LiveStatus] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        tlab.check_alive()
        body, found = scrape(address)
        infos = found.get(T.STEP_INFO.sample_name, [])
        phases = {lab["phase"] for lab, _ in infos}
        # an application step's gauges are not a fio run's: tests/integration/test_app_suites.py scrapes those
        if "precondition" in phases and all(found.get(m.sample_name) for m in T.AGENT_METRICS
                                            if m not in T.APP_METRICS):
            complete.setdefault("precondition", (body, found))
        if "measure" in phases and found.get(T.FIO_LAT_MEAN.sample_name):
            complete.setdefault("measure", (body, found))
            measure.append((time.monotonic(), found))
        raw = tlab.redis().get(T.LIVE_KEY_PREFIX + tlab.host)
        if raw:
            live_seen.extend(LiveStatus.model_validate(x) for x in json.loads(raw))
        if tlab.detail(run_id).run.state in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.25)
    d = tlab.wait_run(run_id)
    assert d.run.state == "SUCCEEDED", d.run.reason

    # while a precondition round ran: every agent metric, with exactly the contract's labels
    assert "precondition" in complete, "never saw a scrape with every agent metric during preconditioning"
    body, found = complete["precondition"]
    promtool_check(body)
    for m in T.AGENT_METRICS:
        for labels, _ in found.get(m.sample_name, []):
            assert sorted(labels) == sorted(m.labels), (m.sample_name, labels)
            assert labels["host"] == tlab.host
            if "device" in m.labels:
                assert labels["device"] == dut
            if m.labels == T.DIRECTION:
                assert labels["direction"] in ("read", "write")
    for direction in ("read", "write"):
        for m in (T.FIO_IOS, T.FIO_BYTES, T.FIO_LAT_MEAN, T.FIO_LAT_MAX, T.FIO_LAT_P99):
            assert value(found, m.sample_name, device=dut, direction=direction) > 0, (m.sample_name, direction)
    assert value(found, T.FIO_THREADS.sample_name, device=dut) == 1      # the precondition's 1T/4Q
    assert value(found, T.FIO_IODEPTH.sample_name, device=dut) == 4
    assert value(found, T.STEP_PHASE.sample_name, phase="precondition") == 1
    assert value(found, T.STEP_PHASE.sample_name, phase="measure") == 0
    assert value(found, T.PRECONDITION_ROUND.sample_name) == 1
    assert value(found, T.STEP_EXPECTED.sample_name) == 5
    assert 0 <= value(found, T.STEP_ELAPSED.sample_name) <= 30
    info = found[T.STEP_INFO.sample_name]
    assert [lab for lab, _ in info] == [{"host": tlab.host, "run": run_id, "step": "precondition.8k-7030.round1",
                                         "suite": "telemetry", "phase": "precondition"}]
    assert value(found, T.AGENT_FIO_RUNNING.sample_name) == 1
    assert value(found, T.NET_PATH_BYTES.sample_name, path="loopback", interface="lo", direction="rx") > 0
    lat = {k: value(found, f"lab_fio_latency_{k}_seconds", device=dut, direction="read")
           for k in ("mean", "p99", "max")}
    assert 0 < lat["mean"] <= lat["max"] and lat["p99"] <= lat["max"] * 1.01 and lat["max"] < 10

    # the measured step: the cell's own 2T/4Q, and counters that grow from scrape to scrape
    assert "measure" in complete
    promtool_check(complete["measure"][0])
    assert value(complete["measure"][1], T.FIO_THREADS.sample_name, device=dut) == 2
    # (compared by what counters guarantee, never by the time between two scrapes: on a loaded machine fio's
    # per-second status may come late, and two scrapes 1.5 s apart can read the same status)
    seen = [c for _, f in measure if (c := io_counters(f, dut)) is not None]
    for prev, cur in itertools.pairwise(seen):
        assert all(cur[k] >= prev[k] for k in prev), ("a counter went down", prev, cur)
    first = next((c for c in seen if all(v > 0 for v in c.values())), None)
    assert first is not None, f"no scrape with every I/O counter above 0 during the measured step: {seen}"
    assert any(all(c[k] > first[k] for k in first) for c in seen), ("the I/O counters never grew", seen)

    # the live status went to Redis for labctl watch, one entry per running attempt
    assert {s.phase for s in live_seen} >= {"precondition", "measure"}
    assert all(s.run_id == run_id and s.host == tlab.host for s in live_seen)
    assert any(s.devices and s.devices[0].device == dut and (s.devices[0].read.iops or 0) > 0 for s in live_seen)

    # the step ended: its series are gone, the agent's health series stay; the live key is deleted
    def idle() -> Samples | None:
        _, f = scrape(address)
        return f if value(f, T.AGENT_FIO_RUNNING.sample_name) == 0 else None
    after = wait_for(idle, 10, "the agent to report no running fio")
    assert isinstance(after, dict)
    for m in STEP_METRICS:
        assert not after.get(m.sample_name), (m.sample_name, after.get(m.sample_name))
    assert value(after, T.AGENT_UP.sample_name) == 1
    assert 0 <= value(after, T.AGENT_HEARTBEAT_AGE.sample_name) < 10
    assert value(after, T.AGENT_LAST_ERROR.sample_name) == 0
    assert value(after, T.NET_PATH_BYTES.sample_name, path="loopback", interface="lo", direction="tx") > 0
    assert tlab.redis().get(T.LIVE_KEY_PREFIX + tlab.host) is None
    code, body = http_get(f"http://{address}/health")
    health: dict[str, Any] = json.loads(body)
    assert code == 200 and health["healthy"] is True and health["running"] == []
    assert health["heartbeat_age_s"] < 3 * 3.0


def test_controller_exporter_shows_runs_steps_and_agents(tlab: LabHandle) -> None:
    address = controller_address(tlab)
    body, before = scrape(address)
    promtool_check(body)
    for m in T.CONTROLLER_METRICS:
        assert before.get(m.sample_name), m.sample_name
        for labels, _ in before[m.sample_name]:
            assert sorted(labels) == sorted(m.labels), (m.sample_name, labels)
    assert value(before, T.CTRL_AGENT_UP.sample_name, host=tlab.host) == 1
    assert 0 <= value(before, T.CTRL_AGENT_HEARTBEAT_AGE.sample_name, host=tlab.host) < 10
    done_before = value(before, T.CTRL_STEPS_COMPLETED.sample_name)

    run_id = tlab.submit("suite: one\nprofiles:\n  - {name: r, rw: randread, bs: 4k, iodepth: 4, runtime: 3s}\n"
                         "  - {name: w, rw: randwrite, bs: 4k, iodepth: 4, runtime: 1s}\n")
    tlab.wait_step_state(run_id, "RUNNING")
    body, during = scrape(address)
    promtool_check(body)
    runs = {lab["state"]: v for lab, v in during[T.CTRL_RUNS.sample_name]}
    steps = {lab["state"]: v for lab, v in during[T.CTRL_STEPS.sample_name]}
    assert set(runs) == {s.value for s in RunState}
    assert set(steps) == {"PENDING", "DISPATCHED", "RUNNING", "LOST", "SUCCEEDED", "FAILED", "CANCELLED"}
    assert runs["RUNNING"] >= 1 and steps["RUNNING"] >= 1 and steps["PENDING"] >= 1
    assert value(during, T.CTRL_RESERVATIONS.sample_name) == 1
    assert value(during, T.CTRL_QUEUE.sample_name) == runs["QUEUED"]
    assert tlab.wait_run(run_id).run.state == "SUCCEEDED"
    _, after = scrape(address)
    assert value(after, T.CTRL_STEPS_COMPLETED.sample_name) == done_before + 2
    assert value(after, T.CTRL_RESERVATIONS.sample_name) == 0
    assert value(after, T.CTRL_RUNS.sample_name, state="RUNNING") == 0
    assert value(after, T.CTRL_RUNS.sample_name, state="SUCCEEDED") == runs["SUCCEEDED"] + 1
    code, body = http_get(f"http://{address}/health")
    assert code == 200 and json.loads(body)["store"] == "ok"
    assert http_get(f"http://{address}/nothing-here")[0] == 404


def test_disabled_and_fixed_port_exporters(tlab: LabHandle) -> None:
    """``--no-metrics`` serves nothing and announces no address; a taken port fails the agent clearly."""
    from orchestrator.labs.lab import free_port

    port = free_port()
    agent = tlab.lab.start_agent("quiet-host", [f"q0={tlab.duts['dut0'].path}"], name="agent-quiet",
                                 metrics_port=None)
    busy = tlab.lab.start_agent("busy-host", [f"b0={tlab.duts['dut0'].path}"], name="agent-busy",
                                metrics_port=port)
    clash = None
    try:
        def registered(host: str) -> Host | None:
            with tlab.sessions() as s:
                h = s.get(Host, host)
                return h if h is not None and h.registered_at else None
        quiet = wait_for(lambda: registered("quiet-host"), 60, "the quiet agent to register")
        assert isinstance(quiet, Host) and quiet.facts.get("metrics_address") is None
        assert "metrics on" not in agent.log.read_text()
        wait_for(lambda: registered("busy-host"), 60, "the agent on a fixed port to register")
        assert http_get(f"http://127.0.0.1:{port}/health")[0] == 200
        clash = tlab.lab.start_agent("clash-host", [f"c0={tlab.duts['dut0'].path}"], name="agent-clash",
                                     metrics_port=port)
        clash.popen.wait(60)
        assert clash.popen.returncode == 1
        assert f"cannot serve agent-metrics on 127.0.0.1:{port}" in clash.log.read_text()
    finally:
        for p in (agent, busy, clash):
            if p is not None:
                tlab.lab.stop_proc(p)
