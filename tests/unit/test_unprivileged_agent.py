"""The agent without root (issue 12 item 7): SMART that needs root is "unknown (needs root)", not a failing
device; the exporters listen on the advertised address or 127.0.0.1, never every address unless asked."""

from __future__ import annotations

import inspect
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agents import health
from agents.cmd.agent import AgentOptions, advertised_address, metrics_bind_address
from labcontract.facts import DeclaredDut
from labcontract.metrics_http import MetricsServer

SDB = DeclaredDut(name="d", path="/dev/sdb", kind="block", size_bytes=1 << 30)


def done(rc: int, out: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], rc, out, "")


@pytest.fixture
def smartctl_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health.shutil, "which", lambda name: f"/usr/sbin/{name}" if name == "smartctl" else None)


def test_smart_that_needs_root_is_unknown_for_an_unprivileged_agent(monkeypatch: pytest.MonkeyPatch,
                                                                     smartctl_here: None) -> None:
    monkeypatch.setattr(health.os, "geteuid", lambda: 1000)
    check = health.smart_check(SDB, lambda cmd: done(2, '{"smart_status": {}}'))   # rc bit 1: open failed
    assert check is not None and check.ok and check.detail == "unknown (needs root)"
    failing = health.smart_check(SDB, lambda cmd: done(8, '{"smart_status": {"passed": false}}'))
    assert failing is not None and not failing.ok and "FAILED" in failing.detail   # a failing disk still fails
    passed = health.smart_check(SDB, lambda cmd: done(0, '{"smart_status": {"passed": true}}'))
    assert passed is not None and passed.ok and "PASSED" in passed.detail


def test_root_still_sees_a_smart_error(monkeypatch: pytest.MonkeyPatch, smartctl_here: None) -> None:
    monkeypatch.setattr(health.os, "geteuid", lambda: 0)
    check = health.smart_check(SDB, lambda cmd: done(2, "not json"))
    assert check is not None and not check.ok


def test_metrics_bind_defaults_to_the_advertised_host_else_loopback() -> None:
    assert metrics_bind_address(None, None) == "127.0.0.1"
    assert metrics_bind_address(None, "10.20.0.11:9464") == "10.20.0.11"
    assert metrics_bind_address(None, "10.20.0.11") == "10.20.0.11"
    assert metrics_bind_address(None, "[fd00::11]:9464") == "fd00::11"
    assert metrics_bind_address("0.0.0.0", "10.20.0.11:9464") == "0.0.0.0"      # asked for: every address
    assert advertised_address(None, metrics_bind_address(None, None), 9464) == "127.0.0.1:9464"
    assert AgentOptions(broker_url="redis://x", state_dir=Path("/x"),
                        dut_specs=()).metrics_bind is None


def test_no_exporter_listens_on_every_address_by_default() -> None:
    from orchestrator.cmd import controller
    from orchestrator.cmd import labctl as cli

    assert inspect.signature(cli.controller).parameters["metrics_bind"].default == "127.0.0.1"
    assert inspect.signature(cli.agent).parameters["metrics_bind"].default is None
    assert inspect.signature(controller.main).parameters["metrics_bind"].default == "127.0.0.1"
    server = MetricsServer(CollectorRegistry(), lambda: (True, {}), port=0)
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"
    finally:
        server.close()
