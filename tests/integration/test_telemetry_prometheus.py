"""The dashboards' proof. Grafana's server cannot be installed here, so this test sends every query a
dashboard would send to a real Prometheus (deploy/prometheus's rules, the scrape intervals of its
config) that scrapes a real agent and controller while a real fio run goes through preconditioning
rounds and measured cells of a thread ladder; each panel query, annotation, variable and recording
rule must return data for that run, host and device."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate as G
from orchestrator.labctl.promtargets import agent_targets, controller_targets, write_file_sd
from orchestrator.labs.lab import free_port, wait_for
from tests.conftest import LabHandle, start_lab

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"
PROMETHEUS = "/usr/bin/prometheus"
NET_PATH = "loopback"

# Two 3 s precondition rounds (steady at round 2 with these wide limits), then the measured 8K 70/30
# cells at 1 and 2 threads x QD 4, 5 s each: every phase but purge, two positions on the ladder.
SUITE = """\
suite: telemetry
description: preconditioning rounds and a two-step thread ladder, for the dashboards' queries
phases:
  precondition: {numjobs: 2, iodepth: 4, round: 3s, max_rounds: 2, window: 2, max_range_pct: 100,
                 max_excursion_pct: 100}
defaults: {ioengine: libaio, direct: true, runtime: 5s}
profiles:
  - {name: 8k-7030, rw: randrw, bs: 8k, rwmixread: 70, ladder: {numjobs: [1, 2], iodepth: [4]}}
"""


@dataclass
class Prometheus:
    url: str
    popen: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, **params: str | list[str]) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"GET {path} {params}: HTTP {e.code}: {e.read().decode(errors='replace')}") from e
        assert body["status"] == "success", body
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: str = "1s") -> list[dict[str, Any]]:
        data = self.get("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step)
        assert data["resultType"] == "matrix"
        result: list[dict[str, Any]] = data["result"]
        return result

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


def values(result: list[dict[str, Any]]) -> list[float]:
    return [float(v) for series in result for _t, v in series["values"]]


def label_set(result: list[dict[str, Any]], label: str) -> set[str]:
    return {series["metric"].get(label, "") for series in result}


def start_prometheus(root: Path, agents: list[dict[str, Any]], controller_address: str) -> Prometheus:
    """A Prometheus on a free loopback port with the lab's config: its scrape jobs and intervals, its
    rule files; the targets are this lab's; rules evaluated each second (alerts) or as configured."""
    if not Path(PROMETHEUS).exists():
        pytest.fail(f"{PROMETHEUS} is not installed: `make test` installs it (Debian package prometheus)")
    root.mkdir(parents=True)
    write_file_sd(root / "targets" / "agents.json", agents)
    write_file_sd(root / "targets" / "controller.json", controller_targets(controller_address))
    config = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str(PROM_DIR / f) for f in config["rule_files"]]
    for job in config["scrape_configs"]:
        for sd in job["file_sd_configs"]:
            sd["files"] = [str(root / f) for f in sd["files"]]
            sd["refresh_interval"] = "1s"
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = root / "prometheus.log"
    with log.open("wb") as fh:
        popen = subprocess.Popen(
            [PROMETHEUS, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    prom = Prometheus(f"http://127.0.0.1:{port}", popen, log)

    def ready() -> bool:
        if popen.poll() is not None:
            raise AssertionError(f"prometheus exited with {popen.returncode}:\n{prom.tail()}")
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False
    try:
        wait_for(ready, 30, "prometheus to be ready", interval=0.1)
    except BaseException:
        stop_prometheus(prom)
        raise
    return prom


def stop_prometheus(prom: Prometheus) -> None:
    if prom.popen.poll() is None:
        os.kill(prom.popen.pid, signal.SIGTERM)
        try:
            prom.popen.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(prom.popen.pid, signal.SIGKILL)
            prom.popen.wait(5)


@pytest.fixture
def telemetry_lab(tmp_path: Path) -> Iterator[tuple[LabHandle, Prometheus]]:
    controller_port = free_port()
    lab = start_lab(tmp_path / "lab", controller_extra=("--metrics-port", str(controller_port)),
                    agent_extra=("--net-path", f"{NET_PATH}=lo"))
    prom: Prometheus | None = None
    try:
        with lab.sessions() as s:
            agents = agent_targets(s)
        assert agents, ("the agent registered no metrics_address in its host facts: is its exporter there "
                        "(agents/exporter.py, labctl agent --metrics-port)?\n" + lab.agent.tail())
        prom = start_prometheus(tmp_path / "prometheus", agents, f"127.0.0.1:{controller_port}")
        yield lab, prom
    finally:
        if prom is not None:
            stop_prometheus(prom)
            shutil.rmtree(tmp_path / "prometheus", ignore_errors=True)
        lab.lab.stop()


def test_every_dashboard_query_returns_data_from_a_real_run(telemetry_lab: tuple[LabHandle, Prometheus]) -> None:
    lab, prom = telemetry_lab

    def targets_up() -> bool:
        if prom.popen.poll() is not None:
            pytest.fail(f"prometheus died:\n{prom.tail()}")
        active = prom.get("/api/v1/targets", state="active")["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in active}
        return health == {"lab-agents": "up", "lab-controller": "up"}
    wait_for(targets_up, 30, "both scrape targets to be up", interval=0.2)

    start = time.time()
    run_id = lab.submit(SUITE)
    d = lab.wait_run(run_id, timeout=90)
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert [(st.kind, st.round) for st in d.steps] == [("precondition", 1), ("precondition", 2),
                                                       ("measure", 0), ("measure", 0)]
    end = time.time()

    def scraped_past_the_end() -> bool:      # the controller (every 5 s) and the agents have been scraped since
        data = prom.get("/api/v1/query", query="min(timestamp(lab_controller_queue_length)) "
                                               "and min(timestamp(lab_agent_up))")
        return bool(data["result"]) and float(data["result"][0]["value"][1]) >= end
    wait_for(scraped_past_the_end, 20, "a scrape after the run ended", interval=0.2)

    device = lab.duts["dut0"].path
    variables = {"run": run_id, "host": lab.host, "device": device, "path": NET_PATH,
                 # what Grafana computes at a 1 s step with the data source's timeInterval 1s
                 "__interval": "1s", "__rate_interval": "4s", "__range": f"{math.ceil(end - start)}s"}
    empty: list[str] = []
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for name in G.DASHBOARDS:
        dashboard = json.loads((ROOT / "dashboards" / name).read_text())
        queries = [("panel", *q) for q in G.panel_queries(dashboard)] + \
                  [("annotation", *q) for q in G.annotation_queries(dashboard)]
        assert queries
        for kind, title, expr in queries:
            concrete = G.substitute(expr, variables)
            result = prom.query_range(concrete, start, end)
            results[(title, expr)] = result
            if not result or not values(result):
                empty.append(f"{name} {kind} {title!r}: {concrete}")
        for var, selector, label in G.variable_queries(dashboard):
            got = prom.get(f"/api/v1/label/{label}/values", **{"match[]": G.substitute(selector, variables)},
                           start=f"{start:.3f}", end=f"{end:.3f}")
            expected = variables[var]
            if expected not in got:
                empty.append(f"{name} variable {var}: {expected!r} not in {got}")
    assert not empty, "queries with no data:\n" + "\n".join(empty)

    def panel(title: str, n: int = 0) -> list[dict[str, Any]]:
        return [r for (t, _e), r in results.items() if t == title][n]

    # the data is the run's: both directions of the 70/30 mix, the two rounds, the ladder, the phases
    iops = panel("IOPS per device and direction")
    assert label_set(iops, "direction") == {"read", "write"} and label_set(iops, "device") == {device}
    assert label_set(iops, "run") == {run_id} and max(values(iops)) > 0
    assert set(values(panel("Precondition round"))) == {1.0, 2.0}
    assert {1.0, 2.0} <= set(values(panel("Thread x queue-depth ladder", 0)))     # threads
    assert set(values(panel("Thread x queue-depth ladder", 1))) == {4.0}          # iodepth
    assert label_set(panel("Phase"), "phase") == {"precondition", "measure"}
    assert {st.name for st in d.steps} <= label_set(panel("Step"), "step")
    assert min(values(panel("Latency per device and direction: mean, p99, max"))) > 0

    # the recording rules were evaluated by Prometheus on the scraped series
    rules = prom.get("/api/v1/rules")["groups"]
    recorded = [r for g in rules for r in g["rules"] if r["type"] == "recording"]
    assert len(recorded) == 6
    bad = [f"{r['name']}: {r['health']} {r.get('lastError', '')}" for g in rules for r in g["rules"]
           if r["health"] != "ok"]
    assert not bad, bad
    for r in recorded:
        name = r["name"]
        assert values(prom.query_range(f'{name}{{host="{lab.host}"}}', start, end)), f"{name}: no data"
    assert max(values(prom.query_range(f'lab:fio_iops:rate5s{{device="{device}"}}', start, end))) > 0
    alerts = {r["name"] for g in rules for r in g["rules"] if r["type"] == "alerting"}
    assert alerts == {"LabAgentDown", "LabStepStalled", "LabPreconditioningNotConverging", "LabLatencyHigh",
                      "LabControllerDegraded", "LabControllerSetAside"}
