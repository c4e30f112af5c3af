"""Red team, the agent's side (issue 12 items 1, 5): start messages sent straight to the agent's Celery queue,
as anyone who can reach Redis could, and suites that try to exhaust the controller. On the real lab: redis-server,
controller and agent processes, fio, loop devices. Each case: refused with the reason, nothing created or run,
an undeclared loop device's checksum unchanged, the agent and the controller alive (and still running steps)."""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labcontract.protocol import COMMANDS_STREAM, REPLY_PREFIX, TASK_START, StartStep, Submit, agent_queue
from orchestrator.controller.celery_wire import QueuePusher, TaskEncoder
from orchestrator.controller.dispatch import Dispatcher
from orchestrator.labs.lab import Dut, wait_for
from tests.conftest import LabHandle, one_workload, unique

pytestmark = pytest.mark.integration


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def undeclared(lab: LabHandle) -> Iterator[Dut]:
    """A loop device on the agent's machine that its host never declared."""
    dut = lab.lab.make_dut(f"undeclared-{unique()}", 16)
    yield dut


class RawSender:
    """Celery start tasks with any payload at all, pushed the way the controller's dispatcher pushes them."""

    def __init__(self, lab: LabHandle) -> None:
        self.disp = Dispatcher(lab.broker, expires_s=120)
        self.encoder: TaskEncoder = self.disp.encoder
        self.pusher: QueuePusher = self.disp.pusher
        self.host = lab.host

    def start(self, payload: dict[str, Any]) -> None:
        queue = agent_queue(self.host)
        self.pusher.push([(queue, self.encoder.encode(TASK_START, [payload], queue=queue, expires_s=120,
                                                       argsrepr="(redteam)"))])


@pytest.fixture(scope="module")
def sender(lab: LabHandle) -> Iterator[RawSender]:
    s = RawSender(lab)
    yield s
    s.disp.close()


def start_payload(lab: LabHandle, attempt_id: str, **workload: Any) -> dict[str, Any]:
    msg = StartStep(run_id="redteam", step_id="redteam-s000", attempt_id="redteam-s000-a1", host=lab.host,
                    devices=(lab.duts["dut0"].path,), job_name="p", timeout_s=60, dispatched_at=time.time())
    data = msg.model_dump(mode="json")
    data["workload"] = {"name": "p", "rw": "read", "bs": 4096, "runtime": 1, **workload}
    data["attempt_id"] = attempt_id
    return data


def agent_log(lab: LabHandle) -> str:
    return lab.agent.log.read_text(errors="replace")


def wait_logged(lab: LabHandle, text: str) -> str:
    def found() -> str | None:
        lab.check_alive()
        log = agent_log(lab)
        return next((line for line in log.splitlines() if text in line), None)
    line = wait_for(found, 30, f"the agent to log {text!r}", interval=0.05)
    assert isinstance(line, str)
    return line


def fio_processes_under(root: Path) -> list[int]:
    """fio processes whose working directory is inside ``root`` (an agent's attempt directories)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cmd and os.path.basename(cmd[0].decode(errors="replace")) == "fio" and cwd.startswith(str(root)):
            out.append(int(entry.name))
    return out


def attempts_dir(lab: LabHandle) -> Path:
    return lab.lab.root / "agents" / lab.host / "attempts"


def test_footprint_injection_is_refused_and_nothing_runs(lab: LabHandle, sender: RawSender, undeclared: Dut,
                                                         tmp_path: Path) -> None:
    assert undeclared.loop, "needs root and losetup: an undeclared loop device"
    marker = tmp_path / "ROOTED"
    before = sha(undeclared.backing)
    attempt = f"rt-{unique()}-a1"
    evil = f"1%\nexec_prerun=touch {marker}\n[evil]\nfilename={undeclared.loop}\nrw=write\n;%"
    sender.start(start_payload(lab, attempt, footprint=evil))
    line = wait_logged(lab, f"rejected start of attempt '{attempt}'")
    assert "footprint" in line and "neither a percentage" in line
    assert not marker.exists()
    assert not (attempts_dir(lab) / attempt).exists()
    assert not list(attempts_dir(lab).glob(f"*{attempt}*"))
    assert fio_processes_under(lab.lab.root) == []
    assert sha(undeclared.backing) == before
    lab.check_alive()


# "./../../ESCAPED": the old agent made its temporary directory "../../ESCAPED.tmp" and renamed it to
# agents/ESCAPED, beside its state directory; the others failed with a traceback and no refusal
@pytest.mark.parametrize("attempt_id", ["./../../ESCAPED", "x/../../../ESCAPED", "../ESCAPED", "..", "a/b"])
def test_a_path_traversal_attempt_id_creates_nothing_outside(lab: LabHandle, sender: RawSender,
                                                             attempt_id: str) -> None:
    sender.start({**start_payload(lab, attempt_id), "run_id": f"rt{unique()}"})
    wait_logged(lab, f"rejected start of attempt {attempt_id!r}")
    assert not list(lab.lab.root.rglob("*ESCAPED*"))
    assert sorted(p.name for p in (lab.lab.root / "agents").iterdir()) == [lab.host]
    assert fio_processes_under(lab.lab.root) == []
    lab.check_alive()


def test_a_valid_start_naming_an_undeclared_device_is_refused(lab: LabHandle, sender: RawSender,
                                                               undeclared: Dut) -> None:
    assert undeclared.loop
    before = sha(undeclared.backing)
    attempt = f"rt-{unique()}-a1"
    sender.start({**start_payload(lab, attempt, rw="write"), "devices": [undeclared.loop]})
    line = wait_logged(lab, f"refused attempt {attempt}")
    assert f"refuses device {undeclared.loop}: not a declared DUT of this host" in line
    assert not (attempts_dir(lab) / attempt).exists()
    assert sha(undeclared.backing) == before


def test_the_lab_still_runs_steps_after_the_attacks(lab: LabHandle) -> None:
    d = lab.wait_run(lab.submit(one_workload(1)), timeout=90)
    assert d.run.state == "SUCCEEDED", d.run.reason
    lab.check_alive()


# --- suites that try to exhaust the controller --------------------------------------------------------------

def anchors_bomb(levels: int = 9) -> str:
    """About 1 KB: a swept list whose last value, once expanded, holds 9**(levels-1) lists (the old loader
    expanded it and built the repr of every value for its error message)."""
    lines = ["suite: bomb", "profiles:", "  - name: p", "    rw: randrw", "    bs: 4k", "    sweep:",
             "      rwmixread:", "        - &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"        - &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def million_cells() -> str:
    vals = ", ".join(str(v) for v in range(100))
    return ("suite: cells\ndefaults: {runtime: 99999999999999}\nprofiles:\n  - {name: p, rw: randrw, bs: 1P, "
            "sweep: {rwmixread: [" + vals + "], percentage_random: [" + vals + "], iodepth: ["
            + ", ".join(str(v) for v in range(1, 101)) + "]}}\n")


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def submit_raw(lab: LabHandle, text: str, devices: tuple[str, ...] = ("dut0",)) -> tuple[list[str], float]:
    """A Submit with the suite text as is (labctl would refuse it locally first), and the controller's errors."""
    reply_to = REPLY_PREFIX + uuid.uuid4().hex
    cmd = Submit(run_id=f"rt{unique()}", suite_source="redteam.yaml", suite_text=text, host=lab.host,
                 devices=devices, reply_to=reply_to)
    r = lab.redis()
    t0 = time.monotonic()
    r.xadd(COMMANDS_STREAM, {"data": cmd.model_dump_json()})
    got = r.blpop([reply_to], timeout=60)
    took = time.monotonic() - t0
    assert got is not None, "the controller did not answer"
    reply = json.loads(got[1])
    assert reply["ok"] is False
    return list(reply["errors"]), took


@pytest.mark.parametrize(("text", "expected"), [
    (one_workload(1).replace("runtime: 1s", "runtime: 99999999999999").replace("bs: 4k", "bs: 1P"),
     ["profiles[0].bs: block size '1P' is over the ceiling of 64m",
      "profiles[0].runtime: 99999999999999 is out of range (must be <= 604800)"]),
    (anchors_bomb(), ["line 9: not valid YAML: YAML aliases are not allowed in a suite (*l0); write the values out"]),
    (million_cells(), ["defaults.runtime: 99999999999999 is out of range (must be <= 604800)",
                       "profiles[0].bs: block size '1P' is over the ceiling of 64m",
                       "cell_limit: the suite's dimensions make 1000000 measured cells (op_modes x network x each "
                       "profile's sweep and ladder sizes), over the ceiling of 10000"]),
    (one_workload(1).replace("bs: 4k", "bs: 4k, footprint: 1g"),
     ["profile long-randread.footprint: footprint 1g is larger than device dut0"]),
])
def test_a_hostile_suite_is_refused_fast_with_every_problem(lab: LabHandle, text: str, expected: list[str]) -> None:
    pid = lab.controller.popen.pid
    peak_before = peak_rss_kib(pid)
    errors, took = submit_raw(lab, text)
    assert took < 5, f"the controller took {took:.1f}s to refuse"
    assert peak_rss_kib(pid) - peak_before < 100 * 1024, "the controller's memory grew by more than 100 MiB"
    for e in expected:
        assert any(got.startswith(e) for got in errors), (e, errors)
    lab.check_alive()
