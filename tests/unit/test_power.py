"""Host power from a BMC (agents.power, labcontract.power): read from a real Redfish service (sushy-static serving
DMTF's public mockup, tests/redfish.py), a hung BMC, hostile answers and configurations."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import pytest

from agents.daemon import Agent, AgentConfig
from agents.power import (
    BmcConfig,
    BmcError,
    PowerSampler,
    RedfishPower,
    environment_watts,
    load_bmc,
    odata_path,
    power_control_watts,
)
from agents.runner import StepRunner
from labcontract.errors import ConfigError, ProtocolError
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.power import ARTIFACT as POWER_ARTIFACT
from labcontract.power import MAX_WATTS, HostPower, describe, parse_host_power, per_watt, summarise
from labcontract.protocol import Event, StartStep, StepEnded
from orchestrator.labs.lab import wait_for
from tests.redfish import MOCKUP, WATTS, redfish_mockup, silent_bmc
from tests.tlscerts import make_certs


def config(tmp_path: Path, url: str, **extra: object) -> tuple[BmcConfig, str]:
    (tmp_path / "pw").write_text("secret-pw\n")
    f = tmp_path / "bmc.yaml"
    f.write_text(json.dumps({"url": url, "user": "lab", "password_file": str(tmp_path / "pw"), **extra}))
    return load_bmc(f)


def test_reads_the_mockup_power_control(tmp_path: Path) -> None:
    with redfish_mockup(tmp_path / "sushy.log") as bmc:
        src = RedfishPower(*config(tmp_path, bmc.url))
        assert src.read() == (WATTS, "Power.PowerControl")
        assert src.discover() == ("/redfish/v1/Chassis/1U/Power", "Power.PowerControl")
        sampler = PowerSampler(src).start()
        wait_for(lambda: sampler.readings() > 0, 10, "a reading")
        power = sampler.result()
    assert power.measured and power.avg_w == WATTS and power.peak_w == WATTS and power.samples >= 1
    assert "secret" not in power.model_dump_json()
    # the password never reaches the sushy log as text (HTTP Basic carries it encoded, to the BMC alone)
    assert "secret-pw" not in (tmp_path / "sushy.log").read_text()


def test_environment_metrics_when_there_is_no_power_resource(tmp_path: Path) -> None:
    mock = tmp_path / "mock"
    shutil.copytree(MOCKUP, mock)
    shutil.rmtree(mock / "Chassis" / "1U" / "Power")
    chassis = json.loads((mock / "Chassis" / "1U" / "index.json").read_text())
    del chassis["Power"]
    (mock / "Chassis" / "1U" / "index.json").write_text(json.dumps(chassis))
    with redfish_mockup(tmp_path / "sushy.log", mockup=mock) as bmc:
        src = RedfishPower(*config(tmp_path, bmc.url, chassis="1U"))
        assert src.read() == (374.0, "EnvironmentMetrics.PowerWatts")


def test_tls_verified_with_the_ca_file_and_refused_without(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    with redfish_mockup(tmp_path / "sushy.log", certs=certs) as bmc:
        assert RedfishPower(*config(tmp_path, bmc.url, ca_file=str(certs.ca))).read()[0] == WATTS
        with pytest.raises(BmcError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            RedfishPower(*config(tmp_path, bmc.url)).read()          # verification is on by default
        with pytest.raises(BmcError, match="certificate"):
            RedfishPower(*config(tmp_path, bmc.url, ca_file=str(certs.other_ca))).read()


def test_a_hung_bmc_never_holds_the_caller(tmp_path: Path) -> None:
    with silent_bmc() as url:
        src = RedfishPower(*config(tmp_path, url, timeout_s=0.5))
        sampler = PowerSampler(src).start()
        t0 = time.monotonic()
        power = sampler.result()
        assert time.monotonic() - t0 < 0.2                  # never waits for the request under way
        assert not power.measured and "did not answer" in describe(power)
        with pytest.raises(BmcError, match="timed out"):
            src.read()


def test_config_errors_all_at_once_naming_the_file(tmp_path: Path) -> None:
    f = tmp_path / "bmc.yaml"
    f.write_text("url: ftp://user:pw@bmc/\nuser: ''\npassword_file: /nonexistent\ntimeout_s: 0\nextra: 1\n")
    with pytest.raises(ConfigError) as e:
        load_bmc(f)
    msg = str(e.value)
    assert str(f) in msg and "--bmc" in msg
    for key in ("url", "user", "timeout_s", "extra", "password_file: cannot read /nonexistent"):
        assert key in msg
    f.write_text("url: https://bmc.lab\nuser: lab\npassword_file: /dev/zero\nca_file: /nonexistent.pem\n")
    with pytest.raises(ConfigError, match=r"password_file: /dev/zero: over 4096 bytes.*ca_file"):
        load_bmc(f)


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, MAX_WATTS + 1, True, "344", None])
def test_hostile_readings_are_refused(value: object) -> None:
    assert power_control_watts({"PowerControl": [{"PowerConsumedWatts": value}]}) is None
    assert environment_watts({"PowerWatts": {"Reading": value}}) is None


@pytest.mark.parametrize("link", ["http://evil.example/redfish/v1/x", "/redfish/v1/../../etc", "/etc/passwd",
                                  "//evil.example/redfish/v1/", 42, None])
def test_links_outside_the_service_are_refused(link: object) -> None:
    with pytest.raises(BmcError):
        odata_path({"@odata.id": link})


def test_summary_bounds_and_wording() -> None:
    p = summarise("http://bmc", "Power.PowerControl", 1.0, 100.0, 110.0, [300.0, 400.0, math.nan], 0, None)
    assert (p.samples, p.failures, p.avg_w, p.peak_w, p.min_w) == (2, 1, 350.0, 400.0, 300.0)
    assert describe(p) == "350 W avg, 400 W peak (2 of 10 s read, under half the step)"
    assert per_watt(35_000.0, p) == 100.0
    assert describe(None) == "not measured" and per_watt(1.0, None) is None
    none = summarise("http://bmc", None, 1.0, 100.0, 101.0, [], 3, "GET /redfish/v1/Chassis: HTTP 401")
    assert describe(none) == "not measured (GET /redfish/v1/Chassis: HTTP 401)" and per_watt(1.0, none) is None
    with pytest.raises(ProtocolError):
        parse_host_power(json.dumps({"endpoint": "x", "avg_w": -5}).encode())
    with pytest.raises(ProtocolError):
        parse_host_power(b"{" + b" " * (300 << 10) + b"}")
    assert parse_host_power(p.model_dump_json().encode()) == p
    assert HostPower(endpoint="x").coverage == 0.0


def test_the_agent_sends_the_steps_power_and_a_restart_says_it_lost_it(tmp_path: Path) -> None:
    """A real fio step on a file DUT through the agent, its BMC the mockup: host-power.json goes with its end; an
    attempt collected by an agent restarted meanwhile says its readings were lost."""
    dut = tmp_path / "dut0.img"
    with dut.open("wb") as fh:
        fh.truncate(64 << 20)
    state = tmp_path / "state"
    sent: list[Event] = []
    runner = StepRunner(state)
    a = Agent(AgentConfig(host="h1", broker_url="redis://unused", state_dir=state,
                          duts=(DeclaredDut(name="dut0", path=str(dut), kind="file", size_bytes=64 << 20),)),
              HostFacts(hostname="h1"), runner, sent.append)
    workload = {"name": "p", "rw": "write", "bs": 4096, "runtime": 2, "time_based": True, "footprint": "4%",
                "ioengine": "psync", "direct": False}

    def start(aid: str) -> None:
        a.start_step({"v": StartStep.model_fields["v"].default, "run_id": "r1", "step_id": "r1-s000", "host": "h1",
                      "devices": [str(dut)], "job_name": "p", "timeout_s": 60, "dispatched_at": time.time(),
                      "attempt_id": aid, "action": "fio", "workload": workload})

    def ended(aid: str) -> StepEnded | None:
        a.check_attempts()
        return next((e for e in sent if isinstance(e, StepEnded) and e.attempt_id == aid), None)

    with redfish_mockup(tmp_path / "sushy.log") as bmc:
        runner.power = RedfishPower(*config(tmp_path, bmc.url))
        start("r1-s000-a1")
        end = wait_for(lambda: ended("r1-s000-a1"), 60, "the step's end")
        assert isinstance(end, StepEnded) and end.outcome == "exited"
        (art,) = [x for x in end.artifacts if x.name == POWER_ARTIFACT]
        power = parse_host_power(art.content())
        assert power.measured and power.avg_w == WATTS and power.samples >= 2 and power.seconds >= 2
        assert power.series == (WATTS,) * power.samples
        # the agent restarts while a step runs: the new one has no readings of it
        start("r1-s000-a2")
        attempt = runner.get("r1-s000-a2")
        assert attempt is not None
        runner._power.pop("r1-s000-a2").stop()      # what a restart loses: the sampler lived in the old process
        wait_for(lambda: not runner.running(attempt), 30, "fio to end")
        again = StepRunner(state)
        again.power = runner.power
        end2 = again.collect(attempt, "h1")
        (art2,) = [x for x in end2.artifacts if x.name == POWER_ARTIFACT]
        lost = parse_host_power(art2.content())
        assert not lost.measured and "restarted" in describe(lost)
