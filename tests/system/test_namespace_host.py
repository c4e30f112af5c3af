"""An agent on another host: a network namespace joined to the controller's by a veth pair.

Addresses come from 198.18.0.0/15 (reserved for benchmarking) and exist only inside the
namespaces this test makes; everything is removed at the end by name.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.labs.lab import Lab, wait_for
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host
from tests.conftest import QUICK_SUITE, LabHandle, one_workload, pid_alive

pytestmark = pytest.mark.system


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class NsHost:
    name: str
    veth_root: str
    addr_root: str
    addr_ns: str

    def link(self, up: bool) -> None:
        ip("link", "set", self.veth_root, "up" if up else "down")


@pytest.fixture
def ns_host() -> Iterator[NsHost]:
    if shutil.which("ip") is None:
        pytest.fail("iproute2 (ip) is needed for system tests")
    tag = uuid.uuid4().hex[:6]
    ns, veth_root, veth_ns = f"labsys-{tag}", f"lsr{tag}", f"lsn{tag}"
    third = random.randrange(0, 256)
    fourth = random.randrange(0, 64) * 4
    addr_root, addr_ns = f"198.19.{third}.{fourth + 1}", f"198.19.{third}.{fourth + 2}"
    ip("netns", "add", ns)
    try:
        ip("link", "add", veth_root, "type", "veth", "peer", "name", veth_ns)
        ip("link", "set", veth_ns, "netns", ns)
        ip("addr", "add", f"{addr_root}/30", "dev", veth_root)
        ip("link", "set", veth_root, "up")
        ip("-n", ns, "addr", "add", f"{addr_ns}/30", "dev", veth_ns)
        ip("-n", ns, "link", "set", veth_ns, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        yield NsHost(ns, veth_root, addr_root, addr_ns)
    finally:
        subprocess.run(["ip", "link", "del", veth_root], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def remote_lab(tmp_path: Path, ns_host: NsHost) -> Iterator[LabHandle]:
    lab = Lab(tmp_path / "lab")
    try:
        lab.start_redis(bind=("127.0.0.1", ns_host.addr_root))
        assert lab.broker_url
        remote_broker = lab.broker_url.replace("@127.0.0.1:", f"@{ns_host.addr_root}:")
        dut = lab.make_dut("dut0", 128)
        store = f"sqlite:///{tmp_path / 'lab' / 'store.sqlite'}"
        controller = lab.start_controller(store)
        agent = lab.start_agent("remote1", [f"dut0={dut.path}"], netns=ns_host.name,
                                broker=remote_broker)
        handle = LabHandle(lab, store, sessions(make_engine(store)), "remote1", {"dut0": dut}, controller, agent)
        handle.wait_registered()
        yield handle
    finally:
        lab.stop()


def test_agent_in_another_namespace_runs_a_suite(remote_lab: LabHandle, ns_host: NsHost) -> None:
    lab = remote_lab
    run_id = lab.submit(QUICK_SUITE)
    d = lab.wait_run(run_id)
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert all(r.iops > 0 for r in d.results.values())
    with lab.sessions() as s:
        host = s.get(Host, "remote1")
        assert host is not None and host.facts["hostname"] == "remote1"


def test_link_cut_mid_step_marks_it_lost_and_its_output_is_collected_on_return(remote_lab: LabHandle,
                                                                               ns_host: NsHost) -> None:
    """The agent and its fio go on behind a cut link; the controller declares the step LOST from the
    missing heartbeats, and takes fio's finished output when the link is back (no second run)."""
    lab = remote_lab
    run_id = lab.submit(one_workload(12))
    d = lab.wait_step_state(run_id, "RUNNING")
    wait_for(lambda: lab.detail(run_id).steps[0].attempts[0].pid, 10, "fio's pid")
    pid = int(lab.detail(run_id).steps[0].attempts[0].pid or 0)
    ns_host.link(False)
    cut = time.monotonic()
    lab.wait_step_state(run_id, "LOST", timeout=30)
    detected = time.monotonic() - cut
    assert detected <= 10.5, f"loss detected after {detected:.1f}s"
    wait_for(lambda: not pid_alive(pid), 30, "fio to finish behind the cut link", interval=0.2)
    ns_host.link(True)
    d = lab.wait_run(run_id, timeout=120)
    assert d.run.state == "SUCCEEDED", d.run.reason
    (att,) = d.steps[0].attempts                  # the same fio, never a second one
    assert att.state == "SUCCEEDED" and "output collected on its return" in att.reason and att.lost_at
    assert d.results[d.steps[0].id].runtime_ms >= 11_500
