"""The overnight queue through the real CLI and controller: not-before, queue view, pause/resume,
cancel, end notifications, and bad times refused with nothing queued."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from orchestrator.config import ControllerTuning
from orchestrator.labs.lab import wait_for
from orchestrator.queries import RunDetail
from orchestrator.runs.client import ControllerClient
from orchestrator.store.models import ControllerLease, Run
from tests.conftest import LabHandle, start_lab

pytestmark = pytest.mark.integration

TWO_STEPS = ("suite: two\nprofiles:\n  - {name: first, rw: randread, bs: 4k, iodepth: 4, runtime: 6s}\n"
             "  - {name: second, rw: randread, bs: 4k, iodepth: 4, runtime: 1s}\n")


@pytest.fixture
def qlab(tmp_path: Path) -> Iterator[tuple[LabHandle, Path]]:
    sink = tmp_path / "notifications.jsonl"
    handle = start_lab(tmp_path / "lab", controller_extra=("--notify-file", str(sink)))
    yield handle, sink
    handle.lab.stop()


def test_queue_pause_resume_cancel_and_notifications(qlab: tuple[LabHandle, Path], tmp_path: Path) -> None:
    lab, sink = qlab
    suite = tmp_path / "two.yaml"
    suite.write_text(TWO_STEPS)
    later = lab.labctl("submit", str(suite), "--host", lab.host, "--device", "dut0", "--at", "+1h",
                       "--priority", "3", check=True).stdout.strip()
    now = lab.labctl("submit", str(suite), "--host", lab.host, "--device", "dut0", check=True).stdout.strip()
    lab.wait_step_state(now, "RUNNING")
    client = ControllerClient(lab.redis(), timeout_s=30)
    reply = client.pause(now)      # at once: labctl's own start-up can outlast the first step on a loaded machine
    assert reply is not None and reply.ok, reply
    at_pause = {st.id: st.state for st in lab.detail(now).steps}
    waiting = [sid for sid, state in at_pause.items() if state == "PENDING"]
    assert waiting, f"the pause came after every step had started: {at_pause}"
    queue = lab.labctl("queue", check=True).stdout
    assert later in queue and "not before" in queue and now in queue and "PAUSED" in queue

    # what a pause guarantees: the running step finishes, and no step pending at the pause starts
    def settled() -> RunDetail | None:
        d = lab.detail(now)
        return None if any(st.state in ("DISPATCHED", "RUNNING") for st in d.steps) else d
    wait_for(settled, 60, f"the running step of {now} to finish", interval=0.1)
    for _ in range(2):     # two command round trips: a scheduling pass has run since the step ended
        again = client.pause(now)
        assert again is not None and not again.ok and "is PAUSED" in again.errors[0], again
    d = lab.detail(now)
    assert [st.state for st in d.steps] == ["SUCCEEDED", "PENDING"], [st.state for st in d.steps]
    assert all(not st.attempts for st in d.steps if st.id in waiting), "a step started while paused"
    assert "paused (holds its devices)" in lab.labctl("queue", check=True).stdout
    assert lab.labctl("resume", now, check=True).stdout.strip() == f"{now} resumed"
    assert lab.wait_run(now).run.state == "SUCCEEDED"
    res = lab.labctl("resume", now)
    assert res.returncode == 1 and "not paused" in res.stderr
    assert lab.labctl("pause", later, check=True).stdout.strip() == f"{later} paused"     # a queued run too
    assert lab.labctl("cancel", later, check=True).returncode == 0
    assert lab.wait_run(later).run.state == "CANCELLED"

    def notified() -> list[dict[str, object]]:
        if not sink.exists():
            return []
        lines = [json.loads(x) for x in sink.read_text().splitlines()]
        return lines if {x["run"] for x in lines} >= {now, later} else []
    lines = wait_for(notified, 30, "both end notifications")
    assert isinstance(lines, list)
    by_run = {x["run"]: x for x in lines}
    assert by_run[now]["state"] == "SUCCEEDED" and by_run[now]["steps"] == {"succeeded": 2}
    assert by_run[later]["state"] == "CANCELLED" and by_run[later]["reason"].startswith("cancelled")


def test_bad_times_are_refused_and_nothing_is_queued(qlab: tuple[LabHandle, Path], tmp_path: Path) -> None:
    lab, _sink = qlab
    suite = tmp_path / "two.yaml"
    suite.write_text(TWO_STEPS)
    with lab.sessions() as s:
        before = s.scalar(select(func.count()).select_from(Run))
    res = lab.labctl("submit", str(suite), "--host", lab.host, "--device", "dut0", "--at", "tonight 25:00",
                     "--expires-after", "soon")
    assert res.returncode == 1
    assert "--at: 'tonight 25:00': not a time of day" in res.stderr
    assert "--expires-after: not a duration: 'soon'" in res.stderr
    with lab.sessions() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == before
        # the running controller said its heartbeat timeout in its lease (readers call hosts down by it)
        assert s.scalar(select(ControllerLease.heartbeat_timeout_s)) == ControllerTuning().heartbeat_timeout_s


def test_schedule_add_list_rm_through_the_cli(qlab: tuple[LabHandle, Path]) -> None:
    lab, _sink = qlab
    bad = lab.labctl("schedule", "add", "nightly", "demo", "--cron", "0 25 * * *", "--host", lab.host,
                     "--device", "dut0")
    assert bad.returncode == 1 and "--cron: '0 25 * * *' is not a cron expression" in bad.stderr
    ok = lab.labctl("schedule", "add", "nightly", "demo", "--cron", "0 22 * * 1-5", "--host", lab.host,
                    "--device", "dut0", "--expires-after", "10h", "--runtime", "1")
    assert ok.returncode == 0, ok.stderr
    listing = lab.labctl("schedule", "list", check=True).stdout
    assert "nightly" in listing and "0 22 * * 1-5" in listing and "22:00" in listing
    assert lab.labctl("schedule", "rm", "nightly", check=True).stdout.strip() == "schedule nightly removed"
    assert "nightly" not in lab.labctl("schedule", "list", check=True).stdout
