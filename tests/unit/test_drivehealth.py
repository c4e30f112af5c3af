"""Drive health around a step (labcontract.drivehealth, agents.drivehealth, the runner's readings, the report's
rows): the tools' real output parsed, the root helper's socket protocol, the readings around a real fio step on a
file DUT, the rows a report prints. The VM tier reads a real (emulated) NVMe controller through the deployed
helper (tests/vmlab/test_1_deploy.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agents import drivehealth as agent_health
from agents.daemon import Agent, AgentConfig
from agents.runner import StepRunner
from labcontract.drivehealth import (
    ARTIFACT,
    ARTIFACT_MAX_BYTES,
    DriveHealth,
    HealthReading,
    HealthSnapshot,
    bytes_written,
    nvme_smart_snapshot,
    parse_drive_health,
    smartctl_snapshot,
)
from labcontract.errors import ProtocolError
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import Event, StartStep, StepEnded
from orchestrator.provenance import drive_health_rows

# nvme-cli 2.4 (Debian 12) on QEMU 7.2's NVMe controller, as the VM tier printed it: counters as strings, Kelvin
QEMU_SMART_LOG = """{
  "critical_warning":0, "temperature":323, "avail_spare":0, "spare_thresh":0, "percent_used":0,
  "endurance_grp_critical_warning_summary":0, "data_units_read":"9", "data_units_written":"0",
  "host_read_commands":"194", "host_write_commands":"0", "controller_busy_time":"0", "power_cycles":"0",
  "power_on_hours":"0", "unsafe_shutdowns":"0", "media_errors":"0", "num_err_log_entries":"0",
  "warning_temp_time":0, "critical_comp_time":0, "thm_temp1_trans_count":0, "thm_temp2_trans_count":0,
  "thm_temp1_total_time":0, "thm_temp2_total_time":0}"""

SMARTCTL = json.dumps({"smart_status": {"passed": True}, "temperature": {"current": 34},
                       "power_on_time": {"hours": 17520}})


def test_nvme_cli_output_is_read_as_it_is_printed() -> None:
    s = nvme_smart_snapshot(QEMU_SMART_LOG)
    assert (s.source, s.temperature_c, s.data_units_read, s.host_read_commands, s.media_errors) == (
        "nvme smart-log", 50, 9, 194, 0)
    assert (s.critical_warning, s.throttle_transitions, s.throttle_seconds) == (0, 0, 0)
    newer = nvme_smart_snapshot(json.dumps({"critical_warning": {"value": 4}, "temperature": 35,
                                            "data_units_written": 1.5e6, "media_errors": "1,204"}))
    assert (newer.critical_warning, newer.temperature_c, newer.data_units_written, newer.media_errors) == (
        4, 35, 1_500_000, 1204)
    with pytest.raises(ValueError):
        nvme_smart_snapshot("[1, 2]")
    with pytest.raises(ValueError):
        nvme_smart_snapshot(json.dumps({"temperature": 10**6}))        # out of range: refused, not stored
    s = smartctl_snapshot(SMARTCTL)
    assert (s.source, s.temperature_c, s.healthy, s.power_on_hours) == ("smartctl", 34, True, 17520)


def test_the_artifact_is_bounded_and_typed() -> None:
    ok = DriveHealth(before=(HealthReading(name="d", path="/dev/nvme0n1", at=1.0,
                                           snapshot=HealthSnapshot(source="nvme smart-log")),))
    assert parse_drive_health(ok.model_dump_json().encode()) == ok
    with pytest.raises(ProtocolError, match="over"):
        parse_drive_health(b" " * (ARTIFACT_MAX_BYTES + 1))
    with pytest.raises(ProtocolError, match=r"x\.json: 1 problem"):
        parse_drive_health(b'{"before": [], "evil": 1}', "x.json")
    many = {"before": [{"name": "d", "path": "/dev/x", "at": 1.0}] * 65}
    with pytest.raises(ProtocolError):
        parse_drive_health(json.dumps(many).encode())


def fake_run(outputs: dict[str, tuple[int, str]]) -> Callable[[Sequence[str]], subprocess.CompletedProcess[str]]:
    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        rc, out = outputs[argv[0]]
        if rc < 0:
            raise subprocess.TimeoutExpired(list(argv), 15)
        return subprocess.CompletedProcess(list(argv), rc, out, "permission denied" if rc else "")
    return run


def test_which_devices_are_read_and_how_a_failure_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agents.drivehealth.shutil.which", lambda name: f"/usr/sbin/{name}")
    run = fake_run({"nvme": (0, QEMU_SMART_LOG), "smartctl": (4, SMARTCTL)})
    got = agent_health.read_all([("n", "/dev/nvme0n1"), ("s", "/dev/sda"), ("l", "/dev/loop3"),
                                 ("f", "/var/lib/x.img")], run)
    assert [(r.name, r.snapshot.source if r.snapshot else None) for r in got] == [
        ("n", "nvme smart-log"), ("s", "smartctl")]        # smartctl's exit code is the drive's state, not an error
    (denied,) = agent_health.read_all([("n", "/dev/nvme0n1")], fake_run({"nvme": (1, "")}))
    assert denied.snapshot is None and denied.error == "nvme smart-log: exit 1: permission denied"
    (hung,) = agent_health.read_all([("n", "/dev/nvme0n1")], fake_run({"nvme": (-1, "")}))
    assert hung.error and "timed out" in hung.error


def serve_once(path: Path, answer: bytes) -> threading.Thread:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.sendall(answer)
        srv.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_the_helper_socket_is_asked_and_its_answer_judged(tmp_path: Path) -> None:
    readings = (HealthReading(name="n", path="/dev/nvme0n1", at=1.0, snapshot=nvme_smart_snapshot(QEMU_SMART_LOG)),
                HealthReading(name="other", path="/dev/nvme1n1", at=1.0, error="x"))
    sock = tmp_path / "h.sock"
    t = serve_once(sock, DriveHealth(before=readings).model_dump_json().encode())
    source = agent_health.source_for(sock)
    assert isinstance(source, agent_health.HelperSource)
    assert source.read([("n", "/dev/disk/by-id/nvme-x")]) == readings[:1]     # the step's DUTs only
    t.join(5)
    bad = tmp_path / "bad.sock"
    t = serve_once(bad, b"x" * (ARTIFACT_MAX_BYTES + 10))
    (r,) = agent_health.HelperSource(bad).read([("n", "/dev/nvme0n1")])
    assert r.snapshot is None and r.error and "passed" in r.error
    t.join(5)
    (gone,) = agent_health.HelperSource(tmp_path / "none.sock").read([("n", "/dev/nvme0n1")])
    assert gone.error and "none.sock" in gone.error


def test_the_helper_reads_only_its_own_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agents.drivehealth.shutil.which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(agent_health, "_run", fake_run({"nvme": (0, QEMU_SMART_LOG)}))
    conf = tmp_path / "drive-health.json"
    conf.write_text(json.dumps({"duts": [{"name": "nvme0", "path": "/dev/nvme0n1"},
                                         {"name": "l", "path": "/dev/loop7`touch x`"}]}))
    answer = DriveHealth.model_validate_json(agent_health.helper_answer(conf))
    assert [r.name for r in answer.before] == ["nvme0"] and answer.before[0].snapshot is not None
    for bad in ({"duts": [{"name": "x", "path": "/etc/shadow"}]}, {"duts": "all"}, [1]):
        conf.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=r"drive-health\.json"):
            agent_health.helper_answer(conf)


class Counting:
    """A source whose drive counts 100 data units more at each reading; with ``lock``, each reading checks from
    another thread that the agent's lock is free meanwhile (a heartbeat never waits on a drive)."""

    name = "test"

    def __init__(self, lock: Any = None) -> None:
        self.calls: list[list[tuple[str, str]]] = []
        self.lock = lock
        self.lock_free: list[bool] = []

    def read(self, duts: Sequence[tuple[str, str]]) -> tuple[HealthReading, ...]:
        self.calls.append(list(duts))
        if self.lock is not None:
            def probe() -> None:
                got = self.lock.acquire(timeout=10)
                self.lock_free.append(got)
                if got:
                    self.lock.release()
            t = threading.Thread(target=probe)
            t.start()
            t.join(15)
        snap = HealthSnapshot(source="nvme smart-log", temperature_c=40 + len(self.calls),
                              data_units_written=100 * len(self.calls), media_errors=0)
        return tuple(HealthReading(name=n, path=p, at=time.time(), snapshot=snap) for n, p in duts)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Agent, list[Event], Path]]:
    dut = tmp_path / "dut0.img"
    with dut.open("wb") as fh:
        fh.truncate(64 << 20)
    state = tmp_path / "state"
    sent: list[Event] = []
    runner = StepRunner(state)
    a = Agent(AgentConfig(host="h1", broker_url="redis://unused", state_dir=state,
                          duts=(DeclaredDut(name="dut0", path=str(dut), kind="file", size_bytes=64 << 20),)),
              HostFacts(hostname="h1"), runner, sent.append)
    yield a, sent, tmp_path


def test_a_fio_step_is_read_before_its_launch_and_after_its_end(agent: tuple[Agent, list[Event], Path]) -> None:
    a, sent, tmp = agent
    source = Counting(a._lock)
    a.runner.health = source
    workload = {"name": "p", "rw": "write", "bs": 4096, "runtime": 1, "footprint": "4%", "ioengine": "psync",
                "direct": False}
    a.start_step({"v": StartStep.model_fields["v"].default, "run_id": "r1", "step_id": "r1-s000", "host": "h1",
                  "devices": [str(tmp / "dut0.img")], "job_name": "p", "timeout_s": 60, "dispatched_at": time.time(),
                  "attempt_id": "r1-s000-a1", "action": "fio", "workload": workload})
    assert source.calls == [[("dut0", str(tmp / "dut0.img"))]]          # before the launch
    deadline = time.monotonic() + 30
    while not [e for e in sent if isinstance(e, StepEnded)]:
        assert time.monotonic() < deadline
        a.check_attempts()
        time.sleep(0.05)
    (end,) = [e for e in sent if isinstance(e, StepEnded)]
    assert end.outcome == "exited" and len(source.calls) == 2
    assert source.lock_free == [True, True]        # read outside the agent's lock, before and after
    (art,) = [x for x in end.artifacts if x.name == ARTIFACT]
    health = parse_drive_health(art.content())
    (b,), (af,) = health.before, health.after
    assert b.snapshot and af.snapshot and bytes_written(b.snapshot, af.snapshot) == 100 * 512_000
    assert b.at <= af.at
    # purge and app steps are not read (StepKind.reads_health)
    assert not os.path.exists(tmp / "state" / "attempts" / "r1-s000-a1" / (ARTIFACT + ".tmp"))


def _detail(healths: list[DriveHealth | None]) -> Any:
    steps, results = [], {}
    for i, h in enumerate(healths):
        st = SimpleNamespace(id=f"s{i}", name=f"step{i}", seq=i, round=1)
        steps.append(st)
        results[st.id] = SimpleNamespace(provenance={"drive_health": h.model_dump(mode="json")} if h else {})
    return SimpleNamespace(steps=steps, results=results)


def _pair(name: str, before: dict[str, Any], after: dict[str, Any]) -> DriveHealth:
    def r(at: float, **kw: Any) -> HealthReading:
        return HealthReading(name=name, path="/dev/nvme0n1", at=at, snapshot=HealthSnapshot(source="nvme smart-log",
                                                                                            **kw))
    return DriveHealth(before=(r(1.0, **before),), after=(r(2.0, **after),))


def test_the_report_says_what_the_drive_said() -> None:
    detail = _detail([
        _pair("nvme0", dict(temperature_c=40, data_units_written=1000, media_errors=0, percent_used=3),
              dict(temperature_c=55, data_units_written=3000, media_errors=0, percent_used=3)),
        None,
        _pair("nvme0", dict(temperature_c=50, data_units_written=3100, media_errors=0, percent_used=3),
              dict(temperature_c=52, data_units_written=4100, media_errors=2, critical_warning=4, percent_used=4)),
    ])
    rows = dict(drive_health_rows(detail))
    line = rows["drive health: nvme0"]
    assert line.startswith("nvme smart-log around 2 step(s); temperature 40 → 52 °C (highest 55 °C); "
                           "the drive counted 1.54 GB written during the steps; media errors 0 → 2 (+2 during")
    assert "critical warning 0x04" in line and "4% of its rated endurance used" in line
    assert rows["drive health: nvme0, after step step2"] == "critical warning 0x04, 2 new media error(s)"
    failed = DriveHealth(before=(HealthReading(name="nvme0", path="/dev/nvme0n1", at=1.0, error="nvme: exit 1"),))
    assert drive_health_rows(_detail([failed])) == [("drive health: nvme0", "not read: nvme: exit 1 (step step0)")]
    assert drive_health_rows(_detail([None])) == []


def test_the_heartbeats_smart_check_from_a_helpers_reading() -> None:
    def reading(**kw: Any) -> HealthReading:
        return HealthReading(name="n", path="/dev/nvme0n1", at=1.0, **kw)
    fine = agent_health.smart_check(reading(snapshot=nvme_smart_snapshot(QEMU_SMART_LOG)))
    assert (fine.check, fine.ok, fine.detail) == ("smart", True, "critical_warning=0x00 avail_spare=0% percent_used=0%")
    warned = agent_health.smart_check(reading(snapshot=HealthSnapshot(source="nvme smart-log", critical_warning=4)))
    assert not warned.ok and warned.detail.startswith("critical_warning=0x04")
    verdict = smartctl_snapshot(json.dumps({"smart_status": {"passed": False}}))
    failed = agent_health.smart_check(reading(snapshot=verdict))
    assert (failed.ok, failed.detail) == (False, "SMART overall-health FAILED")
    tool = agent_health.smart_check(reading(error="nvme smart-log: exit 5: I/O error"))
    assert (tool.ok, tool.detail) == (False, "nvme smart-log: exit 5: I/O error")       # the drive failed to answer
    away = agent_health.smart_check(reading(error="drive-health helper /run/x.sock: [Errno 111] refused"))
    assert away.ok and away.detail.startswith("unknown (drive-health helper")             # says nothing of the drive
