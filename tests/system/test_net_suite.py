"""Network suites end to end: the controller runs a suite's cells on a target and an initiator host,
each a real agent inside its own network namespace of the namespace lab (tests.netlab).

Target namespace: tgtd + nbdkit serving one LUN file over two veth paths shaped with tbf to R; its
agent counts each path's NIC bytes. Initiator namespace: its agent runs fio (nbd engine) or iscsi-perf
on one path (single) or both (multi), at MTU 1500 or 9000 (set by the agents, --manage-mtu). The
broker is reached through redis-server's unix socket (the namespaces share the filesystem, not the
network). Addresses only in 198.18.128.0/20; everything removed by name/pid at the end.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labcontract.suite import parse_suite
from labcontract.transport import redis_client
from orchestrator.labs.lab import Lab, Proc, wait_for
from orchestrator.queries import RunDetail, run_detail
from orchestrator.runs.client import ControllerClient
from orchestrator.runs.netgroups import SKEW_LIMIT_MS
from orchestrator.states import TERMINAL_RUN
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Attempt, Host, NetGroup, Step
from tests.chromium import Chromium
from tests.netlab import LabSpec, NetLab

pytestmark = pytest.mark.system

R_MBIT = 200
R_GBPS = R_MBIT / 1000
TOOLS = ("ip", "tc", "tgtd", "tgtadm", "nbdkit", "fio", "iscsi-ls", "iscsi-readcapacity16", "iscsi-perf")
TARGET, INITIATOR = "net-tgt", "net-ini0"


def net_suite(tool: str, *, mtu: str = "[1500, 9000]", multipath: str = "[single, multi]", runtime: int = 5) -> str:
    return f"""\
suite: net-{tool}
network:
  paths: [a, b]
  mtu: {mtu}
  multipath: {multipath}
  tool: {tool}
profiles:
  - {{name: seq-128k-read, rw: read, bs: 128k, iodepth: 16, runtime: {runtime}s}}
"""


@dataclass
class NetRunLab:
    net: NetLab
    lab: Lab
    store_url: str
    sessions: sessionmaker[Session]
    procs: list[Proc]

    def submit(self, suite_text: str) -> str:
        suite = parse_suite(suite_text, "net-suite.yaml")
        assert self.lab.broker_url
        run_id, reply = ControllerClient(redis_client(self.lab.broker_url)).submit(
            suite, TARGET, [], initiators=[INITIATOR])
        assert reply is not None and reply.ok, reply
        return run_id

    def check_alive(self) -> None:
        for p in self.procs:
            if not p.alive():
                raise AssertionError(f"{p.name} died:\n{p.tail(40)}")

    def wait_run(self, run_id: str, timeout: float = 120) -> RunDetail:
        def ended() -> RunDetail | None:
            self.check_alive()
            with self.sessions() as s:
                d = run_detail(s, run_id)
            return d if d.run.state in TERMINAL_RUN else None
        got = wait_for(ended, timeout, f"run {run_id} to end", interval=0.2)
        assert isinstance(got, RunDetail)
        return got

    def groups(self, run_id: str) -> list[NetGroup]:
        with self.sessions() as s:
            return list(s.scalars(select(NetGroup).where(NetGroup.run_id == run_id).order_by(NetGroup.seq)))

    def labctl(self, *args: str) -> str:
        import subprocess

        assert self.lab.broker_url
        res = subprocess.run([sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(self.lab.root),
                              "--broker", self.lab.broker_url, "--store", self.store_url, *args],
                             capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "250"})
        assert res.returncode == 0, res.stderr + res.stdout
        return res.stdout


@pytest.fixture(scope="module")
def netrun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetRunLab]:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        pytest.fail(f"network suites need root and {', '.join(missing) or 'nothing else'}")
    root: Path = tmp_path_factory.mktemp("netrun")
    net = NetLab(LabSpec(rate_mbit=R_MBIT, lun_size=64 * 1024 * 1024))
    lab = Lab(root)
    try:
        net.open()
        lab.start_redis(unix_socket=True)
        url = f"sqlite:///{root / 'store.sqlite'}"
        controller = lab.start_controller(url)
        paths = net.paths_of(0)
        target = lab.start_agent(TARGET, [], netns=net.tgt_ns, metrics_port=None, extra=(
            "--manage-mtu", *[a for p in paths for a in ("--net-path", f"{p.name}={p.tgt_if}")]))
        initiator = lab.start_agent(INITIATOR, [], netns=net.ini_ns(0), metrics_port=None, extra=(
            "--manage-mtu", *[a for p in paths for a in ("--net-path", f"{p.name}={p.ini_if}@{p.tgt_addr}")]))
        handle = NetRunLab(net, lab, url, sessions(make_engine(url)), [controller, target, initiator])

        def registered() -> bool:
            handle.check_alive()
            try:
                with handle.sessions() as s:
                    return all(s.get(Host, h) is not None for h in (TARGET, INITIATOR))
            except Exception:
                return False
        wait_for(registered, 60, "the namespace agents to register", interval=0.2)
        yield handle
    finally:
        lab.stop()
        net.close()
        assert net.leftovers() == []


def _starts_together(run: RunDetail, groups: list[NetGroup]) -> None:
    for g in groups:
        assert g.complete, g.reason
        assert set(g.hosts) == {TARGET, INITIATOR}
        # the lab's criterion is SKEW_LIMIT_MS (skew_ok); on a loaded 2-CPU machine a process can wake a few hundred
        # ms late, so the test asks for the same order of magnitude and that the verdict matches the figure
        assert g.skew_ms is not None and 0 <= g.skew_ms <= 5 * SKEW_LIMIT_MS, (g.name, g.skew_ms)
        assert g.window_end is not None and g.window_start is not None and g.window_end - g.window_start >= 2.5
    steps_by_seq: dict[int, list[Step]] = {}
    for st in run.steps:
        steps_by_seq.setdefault(st.seq, []).append(st)
    for seq, steps in steps_by_seq.items():           # one step per host, dispatched in the same pass
        atts: list[Attempt] = [st.attempts[-1] for st in steps]
        assert {a.host for a in atts} == {TARGET, INITIATOR}, seq
        assert len({a.dispatched_at for a in atts}) == 1, seq


def _throughput(groups: list[NetGroup]) -> None:
    for g in groups:
        mode, mtu = g.cell["paths"], g.cell["mtu"]
        ini = {k: v for k, v in g.per_path.items() if v["role"] == "initiator"}
        assert {v["mtu"] for v in g.per_path.values()} == {mtu}, g.per_path     # as the kernel reported it
        total = g.total["initiator_gbps"]
        if mode == "single":
            assert set(ini) == {f"{INITIATOR}.a"}
            assert total >= 0.9 * R_GBPS, (g.name, total)
        else:
            assert set(ini) == {f"{INITIATOR}.a", f"{INITIATOR}.b"}
            assert total >= 1.8 * R_GBPS, (g.name, total)
            assert all(v["gbps"] >= 0.88 * R_GBPS for v in ini.values()), (g.name, ini)
        # the target's own count of the same window: at least what the initiator received, at most R per path
        assert g.total["target_tx_gbps"] >= 0.97 * total, (g.name, g.total)
        assert g.total["target_tx_gbps"] <= len(ini) * R_GBPS * 1.05, (g.name, g.total)


def test_fio_single_vs_multipath_at_both_mtus(netrun: NetRunLab, chromium: Chromium) -> None:
    run_id = netrun.submit(net_suite("fio"))
    run = netrun.wait_run(run_id)
    assert run.run.state == "SUCCEEDED", (run.run.reason, [(st.name, st.reason) for st in run.steps])
    groups = netrun.groups(run_id)
    assert [(g.cell["mtu"], g.cell["paths"]) for g in groups] == [
        (1500, "single"), (1500, "multi"), (9000, "single"), (9000, "multi")]
    _starts_together(run, groups)
    _throughput(groups)
    ini_results = [r for r in run.results.values() if r.provenance.get("role") == "initiator"]
    assert len(ini_results) == 4 and all(r.per_path for r in ini_results)
    show = netrun.labctl("run", "show", run_id)
    for text in ("single", "multi", "1500", "9000", f"{INITIATOR}.a", f"{INITIATOR}.b", "skew"):
        assert text in show, show
    # issue 13 item 6: the run's HTML report in headless Chromium: every chart drawn, nothing fetched, the
    # per-path and total Gbps beneath the charts equal to the store's
    from tests.integration.test_report_browser import check_network

    html = netrun.lab.root / f"{run_id}.html"
    netrun.labctl("report", run_id, "--html", str(html))
    page = chromium.open(html)
    assert page.problems() == [], "\n".join(page.problems())
    assert "network" in page.kinds(), page.kinds()
    assert check_network(page, run) == 4 * 2 + 2 * 1 + 2 * 2


def test_iscsi_perf_paths_and_compare_with_fio(netrun: NetRunLab) -> None:
    fio_run = netrun.submit(net_suite("fio", mtu="[9000]"))
    iscsi_run = netrun.submit(net_suite("iscsi", mtu="[9000]"))
    for rid in (fio_run, iscsi_run):
        run = netrun.wait_run(rid)
        assert run.run.state == "SUCCEEDED", (run.run.reason, [(st.name, st.reason) for st in run.steps])
        groups = netrun.groups(rid)
        assert len(groups) == 2
        _starts_together(run, groups)
        _throughput(groups)
    ini = next(r for r in netrun.wait_run(iscsi_run).results.values() if r.provenance.get("role") == "initiator")
    assert ini.provenance["net_spec"]["iqn"].startswith("iqn.2026-11.lab.storagelab:netlab-")
    assert all(p["capacity_bytes"] == 64 * 1024 * 1024 for p in (ini.per_path or {}).values())
    import json

    out = netrun.labctl("compare", fio_run, iscsi_run)
    assert f"A: {fio_run} (suite net-fio, " in out and f"B: {iscsi_run} (suite net-iscsi, " in out, out
    for label in ("MTU 9000 single path (seq-128k-read)", "MTU 9000 multipath (seq-128k-read)"):
        assert label in out, out                                     # full cell names, matched by MTU and path mode
    assert "Gbps" in out and f"{INITIATOR}.b Gbps" in out, out
    doc = json.loads(netrun.labctl("compare", fio_run, iscsi_run, "--format", "json"))
    assert doc["kind"] == "network" and len(doc["cells"]) == 2
    for cell, gf, gi in zip(doc["cells"], netrun.groups(fio_run), netrun.groups(iscsi_run), strict=True):
        assert [r["gbps"] for r in cell["runs"]] == [gf.total["initiator_gbps"], gi.total["initiator_gbps"]]
        assert cell["runs"][1]["vs_first_pct"]["gbps"] == pytest.approx(
            (gi.total["initiator_gbps"] / gf.total["initiator_gbps"] - 1) * 100)


def test_path_failure_is_recorded_with_the_time_the_other_path_carried_on(netrun: NetRunLab) -> None:
    run_id = netrun.submit(net_suite("fio", mtu="[1500]", multipath="[multi]", runtime=9))
    timer: threading.Timer | None = None
    try:
        def dispatched() -> float | None:
            with netrun.sessions() as s:
                return s.scalar(select(Attempt.dispatched_at).join(Step).where(Step.run_id == run_id).limit(1))
        at = wait_for(dispatched, 30, "the cell to be dispatched", interval=0.05)
        assert isinstance(at, float)
        start_at = at + 1.5                                      # ControllerTuning.net_start_lead_s
        pulled: list[float] = []

        def pull() -> None:
            pulled.append(time.time())
            netrun.net.set_link("ini0.b", False)
        timer = threading.Timer(max(0.0, start_at + 4 - time.time()), pull)
        timer.daemon = True
        timer.start()
        run = netrun.wait_run(run_id)
    finally:
        if timer is not None:
            timer.cancel()
        netrun.net.set_link("ini0.b", True)
    assert run.run.state == "SUCCEEDED", run.run.reason          # a pulled cable is a finding, not an error
    (g,) = netrun.groups(run_id)
    (failure,) = g.failures
    assert failure["host"] == INITIATOR and failure["path"] == "b" and failure["survivors"] == ["a"]
    assert failure["carried_on_s"] >= 3.0, failure
    assert failure["survivor_gbps"] >= 0.8 * R_GBPS, failure
    # dated by the last report whose bytes grew (about 1 s apart) near when the cable was pulled, not by the planned
    # start: under load a start is late
    assert pulled and -1.5 <= failure["stopped_at"] - pulled[0] <= 3.0, (failure, pulled)
    assert failure["stopped_at"] > g.starts[INITIATOR], failure
    show = netrun.labctl("run", "show", run_id)
    assert "path failure" in show and "b" in show, show
