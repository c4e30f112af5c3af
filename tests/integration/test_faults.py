"""Faults done for real: an agent SIGKILLed until its step is LOST, then back (the orphaned fio is
stopped, the step retried after a re-purge, never two fio at once); a DUT that disappears from under
its agent (quarantine, ``labctl hosts``, ``labctl queue``, ``labctl hosts release``)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from orchestrator.labs.lab import wait_for
from orchestrator.queries import RunDetail, heartbeat_timeout
from orchestrator.store.models import Host
from tests.conftest import LabHandle, one_workload, pid_alive, start_lab
from tests.tables import column_text

pytestmark = pytest.mark.integration


REPURGE_SUITE = one_workload(18).replace("profiles:", "phases: {purge: true}\nretry: {max_attempts: 2, "
                                                     "when: [lost], repurge: true}\nprofiles:")


def test_agent_killed_until_lost_has_its_orphan_stopped_and_the_step_retried(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    run_id = lab.submit(REPURGE_SUITE)
    def measuring() -> RunDetail | None:             # the purge done, the measurement running
        d = lab.detail(run_id)
        ok = d.steps[0].state == "SUCCEEDED" and any(st.state == "RUNNING" for st in d.steps[1:])
        return d if ok else None
    d = wait_for(measuring, 60, "the purge to end and the measurement to run", interval=0.05)
    assert isinstance(d, RunDetail)
    measure = next(st for st in d.steps if st.kind == "measure")
    wait_for(lambda: lab.detail(run_id).steps[1].attempts[0].pid, 10, "the measurement's fio pid")
    pid = int(lab.detail(run_id).steps[1].attempts[0].pid or 0)
    lab.lab.stop_proc(lab.agent, signal.SIGKILL)
    killed = time.monotonic()
    assert pid_alive(pid), "fio must survive its agent"
    lost = lab.wait_step_state(run_id, "LOST", timeout=20)     # the watchdog's bound (10 s): well within the wait
    detected = time.monotonic() - killed
    with lab.sessions() as s:       # never declared lost before the controller's own heartbeat timeout
        host = s.get(Host, lab.host)
        assert host is not None and host.last_seen is not None
        last_seen, limit = host.last_seen, heartbeat_timeout(s)
    lost_at = next(st for st in lost.steps if st.id == measure.id).attempts[0].lost_at
    assert lost_at is not None and lost_at - last_seen >= limit, (lost_at, last_seen, limit, detected)
    assert pid_alive(pid), "the orphan still runs while its host is away"
    lab.restart_agent()
    d = lab.wait_run(run_id, timeout=90)
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert not pid_alive(pid)
    step = next(st for st in d.steps if st.id == measure.id)
    first, second = step.attempts
    assert first.state == "FAILED" and "orphaned fio was stopped" in first.reason and first.lost_at
    assert second.state == "SUCCEEDED" and d.results[step.id].attempt_id == second.id
    kinds = [(st.kind, st.state) for st in d.steps]
    assert kinds == [("purge", "SUCCEEDED"), ("purge", "SUCCEEDED"), ("measure", "SUCCEEDED")], kinds
    repurge = d.steps[1]
    assert repurge.name.startswith("repurge.") and repurge.attempts[0].fio_started_at
    # never two at once: the orphan ended before the re-purge began, which ended before the retry began
    assert first.fio_ended_at is not None and repurge.attempts[0].fio_started_at >= first.fio_ended_at
    assert second.fio_started_at >= (repurge.attempts[0].fio_ended_at or 0)
    assert 17_500 <= d.results[step.id].runtime_ms <= 19_500  # the retry ran whole


def reattach(lab: LabHandle, name: str) -> None:
    """Attach the DUT's backing file again on whatever loop device is free (``losetup -f``: another process
    may have taken the old number meanwhile, so never that number by name), and, when the number changed,
    restart the agent declaring the DUT at its new path."""
    dut = lab.duts[name]
    new = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(dut.backing)], check=True,
                         capture_output=True, text=True).stdout.strip()
    old, dut.loop = dut.loop, new          # what lab.stop() detaches: ours, never another process's device
    if new != old:
        dut.path = new
        lab.lab.stop_proc(lab.agent)
        lab.restart_agent()


@contextmanager
def squatter(loop: str, directory: Path) -> Iterator[None]:
    """Plays the other process that takes the loop number a DUT just left (a file of another size on it),
    as other work on the machine does; the number is left alone if someone already took it."""
    image = directory / "squatter.img"
    subprocess.run(["truncate", "-s", "8M", str(image)], check=True)
    subprocess.run(["losetup", loop, str(image)], capture_output=True)
    try:
        yield
    finally:
        held = subprocess.run(["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)],
                              capture_output=True, text=True).stdout.split()
        for device in held:                  # found by its backing file: only what the squatter holds
            subprocess.run(["losetup", "-d", device], capture_output=True)


@pytest.fixture
def odd_lab(tmp_path: Path) -> Iterator[LabHandle]:
    """A lab whose DUT has a size no other lab's has (97 MiB): the loop number it leaves may be taken at once by a
    lab of a test running beside this one (pytest-xdist), and a device of the same size there would pass for it."""
    handle = start_lab(tmp_path / "lab", size_mib=97)
    yield handle
    handle.lab.stop()


def test_a_vanished_dut_is_quarantined_until_released(odd_lab: LabHandle, tmp_path: Path) -> None:
    lab = odd_lab
    dut = lab.duts["dut0"]
    assert dut.loop, "needs a loop device (root)"
    left = dut.loop
    subprocess.run(["losetup", "-d", left], check=True)
    try:
        with squatter(left, tmp_path):      # another process takes the number it left at once: not the DUT either
            def quarantined() -> bool:
                out = lab.labctl("hosts").stdout
                return "QUARANTINED" in out
            wait_for(quarantined, 60, "the DUT to be quarantined", interval=0.5)
            listing = lab.labctl("hosts").stdout
            why = column_text(listing)                              # the reasons column, however it wrapped
            assert "present check failed 3" in why and "has size" in why, listing
            reattach(lab, "dut0")
        assert dut.loop != left and dut.path == dut.loop, "back on a loop device of its own"
    finally:
        if dut.loop == left:                    # failed before it was back: leave the lab whole
            reattach(lab, "dut0")
    assert "QUARANTINED" in lab.labctl("hosts").stdout, "back, but still quarantined until released"
    run_id = lab.submit(one_workload(1))
    queue = lab.labctl("queue").stdout
    assert run_id in queue and "quarantined" in queue, queue
    assert lab.detail(run_id).run.state == "QUEUED"
    released = lab.labctl("hosts", "release", lab.host)
    assert released.returncode == 0 and f"released {lab.host}" in released.stdout, released.stderr
    d = lab.wait_run(run_id, timeout=60)
    assert d.run.state == "SUCCEEDED", d.run.reason
    again = lab.labctl("hosts", "release", lab.host)
    assert again.returncode == 1 and "nothing of" in again.stderr
