"""Application steps through the agent's real start path (Agent.start_step -> step kind -> StepRunner -> the real
``python -m agents.appstep``) on a loop DUT: the worked external example (ioping, read-only) and a sysbench
prepare + run on MariaDB (the run passes the interlock only because the DUT holds the filesystem the prepare
made). Every step ends released: nothing mounted, no server left."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.daemon import Agent, AgentConfig
from agents.runner import StepRunner
from agents.workloads import parse
from labcontract.apps import AppResult
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import Event, StartStep, StepEnded, StepStarted

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "external"
SIZE = 512 << 20


def wait_for(cond: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.1)


@pytest.fixture
def loop_dut(tmp_path: Path) -> Iterator[str]:
    img = tmp_path / "dut.img"
    with img.open("wb") as fh:
        fh.truncate(SIZE)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["umount", "-l", dev], capture_output=True, check=False)
        subprocess.run(["losetup", "-d", dev], check=False)


@pytest.fixture
def agent(tmp_path: Path, loop_dut: str) -> tuple[Agent, list[Event]]:
    decl = (EXAMPLE / "workloads.yaml").read_text().replace("/usr/local/lib/storagelab/ioping_workload.py",
                                                            str(EXAMPLE / "ioping_workload.py"))
    state = tmp_path / "state"
    sent: list[Event] = []
    duts = (DeclaredDut(name="dut0", path=loop_dut, kind="block", size_bytes=SIZE),)
    a = Agent(AgentConfig(host="h1", broker_url="redis://unused", state_dir=state, duts=duts,
                          workloads=parse(decl, "workloads.yaml")),
              HostFacts(hostname="h1"), StepRunner(state), sent.append)
    return a, sent


def start(a: Agent, attempt: str, app: dict[str, Any]) -> None:
    a.start_step({"v": StartStep.model_fields["v"].default, "run_id": "r1", "step_id": attempt.rsplit("-", 1)[0],
                  "attempt_id": attempt, "host": "h1", "action": "app", "kind": "app", "devices": ["dut0"],
                  "job_name": "app", "app": app, "timeout_s": 900, "dispatched_at": time.time()})


def finish(a: Agent, sent: list[Event], attempt: str, timeout: float) -> StepEnded:
    def done() -> bool:
        a.check_attempts()
        return any(isinstance(e, StepEnded) and e.attempt_id == attempt for e in sent)

    wait_for(done, timeout)
    [end] = [e for e in sent if isinstance(e, StepEnded) and e.attempt_id == attempt]
    return end


def result(end: StepEnded) -> AppResult:
    [art] = [x for x in end.artifacts if x.name == "app.json"]
    return AppResult.model_validate_json(art.content())


def not_mounted(dev: str) -> bool:
    return dev not in Path("/proc/self/mounts").read_text()


@pytest.mark.skipif(shutil.which("ioping") is None, reason="ioping is not installed (Makefile TEST_PKGS)")
def test_the_external_example_runs_ioping_on_the_dut(agent: tuple[Agent, list[Event]], loop_dut: str) -> None:
    a, sent = agent
    start(a, "r1-s000-a1", {"kind": "external", "phase": "run",
                            "external": {"workload": "ioping-latency", "params": {"count": 40}, "time": 5}})
    assert [e.attempt_id for e in sent if isinstance(e, StepStarted)] == ["r1-s000-a1"], sent
    end = finish(a, sent, "r1-s000-a1", 60)
    assert end.outcome == "exited" and end.exit_code == 0, end.reason
    res = result(end)
    assert res.tool == "ioping" and res.metrics["requests"] == 40 and res.metrics["iops"] > 0
    assert 0 < res.metrics["lat_avg_ms"] <= res.metrics["lat_p99_ms"] <= res.metrics["lat_max_ms"]
    assert len(res.series["lat_ms"]) == 40
    spec = json.loads(next(x for x in end.artifacts if x.name == "app-spec.json").content())
    assert spec["external"]["name"] == "ioping-latency" and spec["app"]["external"]["params"] == {
        "count": 40, "size": "4k", "interval": "0", "direct": True}


def test_an_undeclared_external_workload_is_refused(agent: tuple[Agent, list[Event]]) -> None:
    a, sent = agent
    start(a, "r1-s000-a1", {"kind": "external", "phase": "run", "external": {"workload": "hammerdb", "time": 5}})
    [end] = [e for e in sent if isinstance(e, StepEnded)]
    assert end.outcome == "refused" and "'hammerdb' is not declared" in end.reason and "ioping-latency" in end.reason
    assert a.runner.get("r1-s000-a1") is None


@pytest.mark.skipif(shutil.which("sysbench") is None or shutil.which("mariadbd", path="/usr/sbin:/usr/bin") is None,
                    reason="sysbench / mariadbd not installed")
def test_sysbench_prepare_then_run_on_a_loop_dut(agent: tuple[Agent, list[Event]], loop_dut: str) -> None:
    a, sent = agent
    params = {"tables": 1, "table_size": 200, "threads": [2], "time": 2, "buffer_pool_mb": 32, "log_file_mb": 8}
    start(a, "r1-s000-a1", {"kind": "sysbench", "phase": "prepare", "sysbench": params})
    end = finish(a, sent, "r1-s000-a1", 300)
    assert end.outcome == "exited" and end.exit_code == 0, end.reason
    assert not_mounted(loop_dut)
    # the DUT now carries a filesystem: only the lab's own (the marker's UUID) lets the run through the interlock
    start(a, "r1-s001-a1", {"kind": "sysbench", "phase": "run", "point": 2, "sysbench": params})
    assert [e.attempt_id for e in sent if isinstance(e, StepStarted)][-1] == "r1-s001-a1", sent[-1]
    end = finish(a, sent, "r1-s001-a1", 300)
    assert end.outcome == "exited" and end.exit_code == 0, end.reason
    res = result(end)
    assert res.tool == "sysbench" and res.metrics["tps"] > 0
    assert not_mounted(loop_dut)
    attempt = a.runner.get("r1-s001-a1")
    assert attempt is not None and attempt.file("released").exists()
