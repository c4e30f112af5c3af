"""Network suites: schema, plan, the controller's cell dispatch (one start for every host), the window
totals of a cell, and the agent's path declarations."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.exporter import parse_net_decl
from agents.netstep import NetStepError, _iscsi_failures, ensure_mtu
from labcontract.errors import ConfigError, SuiteError
from labcontract.facts import HostFacts, NetPathDecl
from labcontract.protocol import Artifact, Heartbeat, Register, StepEnded, StepStarted, Submit
from labcontract.suite import builtin_suites, count_steps, load_suite, parse_suite
from orchestrator.controller import Controller
from orchestrator.runs.netgroups import aggregate
from orchestrator.runs.planner import NetHosts, plan
from orchestrator.runs.scheduling import decide, devices_of
from orchestrator.store.models import Host, NetGroup, Run

NET = """\
suite: net
network:
  paths: [a, b]
  mtu: [1500, 9000]
  multipath: [single, multi]
profiles:
  - {name: seq-128k-read, rw: read, bs: 128k, runtime: 5s}
  - {name: block-64k, rw: randrw, bs: 64k, rwmixread: 100, percentage_random: 25, runtime: 5s}
"""


def test_mtu_and_path_mode_are_dimensions() -> None:
    s = parse_suite(NET, "net.yaml")
    assert s.network is not None and s.network.tool == "fio"
    assert len(s.cells) == 2 * 2 * 2
    names = [c.workload.name for c in s.cells]
    assert names[:4] == ["seq-128k-read.mtu1500.single", "block-64k.mtu1500.single",
                         "seq-128k-read.mtu1500.multi", "block-64k.mtu1500.multi"]
    assert {(c.dims["mtu"], c.dims["paths"]) for c in s.cells} == {
        (1500, "single"), (1500, "multi"), (9000, "single"), (9000, "multi")}
    assert s.network.paths_for("single") == ("a",) and s.network.paths_for("multi") == ("a", "b")
    assert count_steps(list(s.cells), s.phases, s.network) == 16


def test_network_suite_problems_are_reported_together() -> None:
    bad = NET.replace("  mtu: [1500, 9000]", "  mtu: [1500, 4000]").replace("paths: [a, b]", "paths: [a, a]") \
        + "op_modes: [stock, 'hp:20']\nphases: {precondition: {round: 5s}}\n"
    with pytest.raises(SuiteError) as e:
        parse_suite(bad, "bad.yaml")
    text = str(e.value)
    for what in ("network.paths: a value is listed twice", "network.mtu[1]", "op_modes: a network suite runs in "
                 "stock mode only", "phases.precondition: not available in a network suite"):
        assert what in text, text
    iscsi_mixed = NET.replace("  multipath: [single, multi]", "  tool: iscsi").replace(
        "percentage_random: 25", "rwmixread: 70") .replace("rwmixread: 100, ", "")
    with pytest.raises(SuiteError) as e:
        parse_suite(iscsi_mixed, "iscsi.yaml")
    assert "profiles[1].rw: network.tool iscsi (iscsi-perf) only reads" in str(e.value)
    with pytest.raises(SuiteError) as e:
        parse_suite(NET.replace("network:\n", "network:\n  target: t1\n  initiators: [t1]\n"), "x.yaml")
    assert "network.initiators: t1 is also the target" in str(e.value)


def test_plan_is_one_step_per_host_per_cell_with_the_same_seq() -> None:
    s = parse_suite(NET, "net.yaml")
    steps = plan(s, [], net_hosts=NetHosts("tgt", ("ini0", "ini1")))
    assert len(steps) == 8 * 3
    first = steps[:3]
    assert {st.seq for st in first} == {0} and [st.host for st in first] == ["tgt", "ini0", "ini1"]
    assert [st.cell["role"] for st in first] == ["target", "initiator", "initiator"]
    assert all(st.kind == "net" and st.cell["net_paths"] == ["a"] for st in first)
    multi = [st for st in steps if st.cell["paths"] == "multi"]
    assert all(st.cell["net_paths"] == ["a", "b"] for st in multi)
    assert steps[0].name == "seq-128k-read.mtu1500.single@tgt"


def test_builtin_network_suites_plan_with_placeholders() -> None:
    for name in ("network-paths", "network-iscsi", "network-pattern-125"):
        assert name in builtin_suites()
        s = load_suite(name)
        steps = plan(s, [])
        assert steps and {st.host for st in steps} == {"${TARGET}", "${INITIATOR0}"}
        assert len(steps) == count_steps(list(s.cells), s.phases, s.network) <= s.cell_limit


def _register(ctl: Controller, host: str, paths: tuple[NetPathDecl, ...]) -> None:
    ctl.handle_event(Register(host=host, agent_version="0.1.0", duts=(),
                              facts=HostFacts(hostname=host, fio_version="fio-3.33", net_paths=paths)))


def _net_submit(ctl: Controller, **kw: Any) -> Any:
    return ctl.submit(Submit(run_id=kw.pop("run_id", "n1"), suite_source="net.yaml", suite_text=kw.pop("text", NET),
                             host=kw.pop("host", "tgt"), devices=kw.pop("devices", ()),
                             initiators=kw.pop("initiators", ("ini0",)), reply_to="-"))


def test_submission_checks_every_host_and_path(env: Any) -> None:
    ctl, *_ = env
    _register(ctl, "tgt", (NetPathDecl(name="a", iface="eth1"),))
    _register(ctl, "ini0", (NetPathDecl(name="a", iface="eth1"),
                            NetPathDecl(name="b", iface="eth2", peer="198.18.1.1")))
    r = _net_submit(ctl, initiators=("ini0", "ghost"), devices=("dut0",))
    assert not r.ok
    assert set(r.errors) == {
        "--device: a network suite measures paths, not DUTs: name no device",
        "network.paths: target tgt declares no path 'b' (declared: a)",
        "network.paths: initiator ini0 path 'a' has no peer address (the target's portal: --net-path "
        "NAME=IFACE@ADDRESS)",
        "--initiator: unknown host 'ghost' (no agent registered under that name)"}


def test_a_cell_starts_on_every_host_at_once_and_ends_in_a_window_total(env: Any) -> None:
    ctl, disp, clock, db = env
    _register(ctl, "tgt", (NetPathDecl(name="a", iface="t1"), NetPathDecl(name="b", iface="t2")))
    _register(ctl, "ini0", (NetPathDecl(name="a", iface="i1", peer="198.18.1.1"),
                            NetPathDecl(name="b", iface="i2", peer="198.18.1.5")))
    assert _net_submit(ctl).ok
    ctl.schedule()
    starts = disp.starts()
    assert [(m.host, m.action, m.net.role if m.net else None) for m in starts] == [
        ("tgt", "net", "target"), ("ini0", "net", "initiator")]
    tgt, ini = starts
    assert tgt.net and ini.net and tgt.net.start_at == ini.net.start_at == clock.t + ctl.tuning.net_start_lead_s
    assert tgt.net.seconds == ini.net.seconds + 2 and ini.net.paths == ("a",) and ini.net.mtu == 1500
    assert tgt.devices == ini.devices == ()
    ctl.schedule()
    assert len(disp.starts()) == 2                      # the run holds its paths until the cell ends
    with db() as s:
        run = s.get(Run, "n1")
        assert run is not None and devices_of(run) == {(h, f"net:{p}") for h in ("tgt", "ini0") for p in "ab"}
    t0 = clock.t + 1.5
    for m in starts:
        ctl.handle_event(StepStarted(host=m.host, attempt_id=m.attempt_id, pid=1, fio_started_at=t0,
                                     job_sha256=""))
    ctl.handle_event(_ended(tgt.attempt_id, "tgt", _output("target", t0, 7.0, rate=25e6)))
    with db() as s:
        assert s.query(NetGroup).count() == 0            # not before every host's step has ended
    ctl.handle_event(_ended(ini.attempt_id, "ini0", _output("initiator", t0 + 0.02, 5.0, rate=24e6)))
    with db() as s:
        (g,) = s.query(NetGroup).all()
        assert g.complete and g.hosts == ["tgt", "ini0"] and g.name == "seq-128k-read.mtu1500.single"
        assert g.skew_ms == pytest.approx(20.0)
        assert g.total["initiator_gbps"] == pytest.approx(0.192) and g.total["target_gbps"] == pytest.approx(0.2)
        assert g.per_path["ini0.a"]["mtu"] == 1500
    ctl.schedule()
    assert [m.step_id for m in disp.starts()[2:]] == ["n1-s001-h0", "n1-s001-h1"]


def _output(role: str, start: float, seconds: float, *, rate: float) -> dict[str, Any]:
    series = [[start + i, start + i + 1, rate, rate / 131072] for i in range(int(seconds))]
    if role == "target":
        series = [[*iv, rate, 0.0] for iv in series]
    path = {"gbps": rate * 8 / 1e9, "iops": rate / 131072, "lat_mean_ns": 1e6, "bytes": rate * seconds,
            "seconds": seconds, "completed": True, "series": series}
    return {"role": role, "tool": "fio", "mtu": {"a": 1500}, "started_at": start, "ended_at": start + seconds,
            "paths": {"a": path}, "failures": [],
            "total": {"gbps": rate * 8 / 1e9, "bytes": rate * seconds, "seconds": seconds, "iops": rate / 131072}}


def _ended(attempt_id: str, host: str, out: dict[str, Any]) -> StepEnded:
    return StepEnded(host=host, attempt_id=attempt_id, outcome="exited", exit_code=0, fio_started_at=1.0,
                     fio_ended_at=2.0, artifacts=(Artifact.of("net.json", json.dumps(out).encode()),))


def test_window_totals_prorate_the_edges_and_measure_skew() -> None:
    tgt = _output("target", 100.0, 10.0, rate=25e6)
    ini = _output("initiator", 100.05, 6.0, rate=20e6) | {"measure_from": 101.05, "measure_to": 106.05}
    agg = aggregate({"tgt": tgt, "ini": ini})
    assert agg["skew_ms"] == pytest.approx(50.0) and agg["skew_ok"]
    assert (agg["window_start"], agg["window_end"]) == (101.05, 106.05)
    assert agg["per_path"]["ini.a"]["gbps"] == pytest.approx(0.16)
    assert agg["per_path"]["tgt.a"]["gbps"] == pytest.approx(0.2)       # 5 s of the target's 10, pro rata
    assert agg["total"]["initiator_iops"] == pytest.approx(20e6 / 131072)
    assert agg["per_host"]["ini"]["role"] == "initiator"
    with pytest.raises(ValueError, match="do not overlap"):
        aggregate({"tgt": tgt, "ini": _output("initiator", 200.0, 5.0, rate=1.0)})
    late = aggregate({"tgt": tgt, "ini": _output("initiator", 100.25, 6.0, rate=20e6)})
    assert late["skew_ms"] == pytest.approx(250.0) and not late["skew_ok"]


def test_path_declarations() -> None:
    assert parse_net_decl("a=ens1f0@198.18.0.1") == NetPathDecl(name="a", iface="ens1f0", peer="198.18.0.1")
    assert parse_net_decl("b=ens1f1") == NetPathDecl(name="b", iface="ens1f1")
    for bad in ("a", "a=", "=x", "a=x@nohost", "a=../x"):
        with pytest.raises(ConfigError):
            parse_net_decl(bad)


def test_mtu_mismatch_names_the_interface() -> None:
    with pytest.raises(NetStepError, match=r"path a \(lo\) has MTU 65536, the step wants 1500"):
        ensure_mtu([{"name": "a", "iface": "lo"}], 1500, manage=False)


def test_iscsi_path_that_stops_is_a_failure_with_the_time_the_other_carried_on() -> None:
    def series(rates: list[float]) -> list[list[float]]:
        return [[100.0 + i, 101.0 + i, r, r / 131072] for i, r in enumerate(rates)]
    paths = {"a": {"series": series([25e6] * 8)}, "b": {"series": series([25e6] * 3 + [0.0] * 5)}}
    (f,) = _iscsi_failures(paths, 108.0)
    assert f["path"] == "b" and f["stopped_at"] == 103.0 and f["survivors"] == ["a"]
    assert f["carried_on_s"] == 5.0 and f["survivor_gbps"] == pytest.approx(0.2)


def test_network_runs_reserve_every_host_and_path_together(env: Any) -> None:
    ctl, disp, clock, db = env
    _register(ctl, "tgt", (NetPathDecl(name="a", iface="t1"), NetPathDecl(name="b", iface="t2")))
    for ini in ("ini0", "ini1"):
        _register(ctl, ini, (NetPathDecl(name="a", iface="i1", peer="198.18.1.1"),
                             NetPathDecl(name="b", iface="i2", peer="198.18.1.5")))
    assert _net_submit(ctl, run_id="n1").ok
    assert _net_submit(ctl, run_id="n2", initiators=("ini1",)).ok    # shares the target: waits
    ctl.schedule()
    assert {m.run_id for m in disp.starts()} == {"n1"}
    with db() as s:
        runs = [s.get(Run, "n1"), s.get(Run, "n2")]
        hosts = {h.name: h for h in s.query(Host).all()}
        d = decide([r for r in runs if r is not None], hosts, clock.t, ctl.host_up)
        assert d.waits["n2"].startswith("device(s) net:a, net:b held by run(s) n1"), d.waits["n2"]
    clock.t += 30                                   # the target falls silent: nothing else starts on it
    for host in ("ini0", "ini1"):
        ctl.handle_event(_heartbeat(host))
    with db() as s:
        runs = [s.get(Run, "n1"), s.get(Run, "n2")]
        hosts = {h.name: h for h in s.query(Host).all()}
        d = decide([r for r in runs if r is not None], hosts, clock.t, ctl.host_up)
        assert d.waits["n2"] == "host tgt is down"


def _heartbeat(host: str) -> Heartbeat:
    return Heartbeat(host=host)
