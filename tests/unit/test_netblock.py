"""Network tool ``block``: the initiator's device found from its iSCSI sessions' udev links and /sys (laid out here
as the kernel lays them out: the VM tier runs it on a real kernel), path failures and the failover window from NIC
and fio series, the controller's window totals with fio's own I/O, hostile failures refused, the suite's read-only
rule and what ``labctl run show`` prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.netblock import BlockTarget, path_failures, resolve, run_block
from agents.netstep import INITIATOR_TOOLS
from labcontract.errors import NetStepError, SuiteError
from labcontract.protocol import NetStart
from labcontract.suite import Workload, parse_suite
from orchestrator.netreport import failure_lines
from orchestrator.runs.netgroups import aggregate, checked_failures, checked_io
from orchestrator.store.models import NetGroup

IQN = "iqn.2026-11.lab.storage:t1"
PEERS = {"a": "10.30.1.10", "b": "10.30.2.10"}


def lab(tmp_path: Path, *, lun: int = 0, holders: dict[str, str] | None = None, uuid: str = "mpath-36001405ab",
        slaves: tuple[str, ...] = ("sdb", "sdc"), extra_target: bool = False) -> tuple[Path, Path]:
    """/dev/disk/by-path and /sys/block of an initiator logged in on both paths (sdb over a, sdc over b)."""
    dev, by_path, sys_block = tmp_path / "dev", tmp_path / "dev/disk/by-path", tmp_path / "sys/block"
    by_path.mkdir(parents=True)
    for disk, peer in (("sdb", PEERS["a"]), ("sdc", PEERS["b"])):
        (dev / disk).touch()
        (by_path / f"ip-{peer}:3260-iscsi-{IQN}-lun-{lun}").symlink_to(dev / disk)
        (by_path / f"ip-{peer}:3260-iscsi-{IQN}-lun-{lun}-part1").symlink_to(dev / disk)
        (sys_block / disk / "holders").mkdir(parents=True)
    if extra_target:
        (dev / "sdd").touch()
        (by_path / f"ip-{PEERS['a']}:3260-iscsi-iqn.2026-11.other:t2-lun-{lun}").symlink_to(dev / "sdd")
    for disk, dm in (holders if holders is not None else {"sdb": "dm-0", "sdc": "dm-0"}).items():
        (sys_block / disk / "holders" / dm).touch()
        (sys_block / dm / "dm").mkdir(parents=True, exist_ok=True)
        (sys_block / dm / "dm" / "uuid").write_text(uuid + "\n")
        (sys_block / dm / "dm" / "name").write_text("mpatha\n")
        (sys_block / dm / "slaves").mkdir(exist_ok=True)
        for s in slaves:
            (sys_block / dm / "slaves" / s).touch()
    return by_path, sys_block


def spec(names: tuple[str, ...] = ("a", "b"), iqn: str | None = IQN, lun: int = 0) -> dict[str, Any]:
    return {"iqn": iqn, "lun": lun, "iscsi_port": 3260,
            "paths": [{"name": n, "iface": f"ens{i}", "peer": PEERS[n]} for i, n in enumerate(names)]}


def test_one_path_reads_its_disk_and_several_read_the_multipath_map_that_holds_exactly_them(tmp_path: Path) -> None:
    by_path, sys_block = lab(tmp_path)
    single = resolve(spec(("a",)), by_path=by_path, sys_block=sys_block)
    assert single == BlockTarget("/dev/sdb", {"a": "sdb"})
    multi = resolve(spec(), by_path=by_path, sys_block=sys_block)
    assert multi == BlockTarget("/dev/dm-0", {"a": "sdb", "b": "sdc"}, "mpatha")
    # the IQN left to the host: the one target logged in on the path
    assert resolve(spec(("b",), iqn=None), by_path=by_path, sys_block=sys_block).device == "/dev/sdc"


@pytest.mark.parametrize(("layout", "step", "message"), [
    ({}, spec(lun=3), r"path a: no iSCSI session to 10\.30\.1\.10:3260 with LUN 3 of iqn\.2026-11\.lab"),
    ({}, spec(("a",), iqn="iqn.2026-11.lab.storage:t1*"), "no iSCSI session"),       # compared, never globbed
    ({"extra_target": True}, spec(("a",), iqn=None), r"2 targets logged in through 10\.30\.1\.10:3260 .*network\.iqn"),
    ({"holders": {"sdb": "dm-0"}}, spec(), r"not held by one dm-multipath map \(a: sdb held by dm-0; b: sdc held by "
                                           r"nothing\)"),
    ({"holders": {"sdb": "dm-0", "sdc": "dm-1"}}, spec(), "not held by one dm-multipath map"),
    ({"uuid": "LVM-abc"}, spec(), "dm-0, which holds the paths' disks, is not a dm-multipath map"),
    ({"slaves": ("sdb", "sdc", "sdd")}, spec(), r"mpatha also has paths the step does not name \(sdd\)"),
])
def test_a_device_that_is_not_what_the_step_names_is_refused_with_the_reason(
        tmp_path: Path, layout: dict[str, Any], step: dict[str, Any], message: str) -> None:
    by_path, sys_block = lab(tmp_path, **layout)
    with pytest.raises(NetStepError, match=message):
        resolve(step, by_path=by_path, sys_block=sys_block)


def nic(rates: list[float], t0: float = 100.0) -> dict[str, Any]:
    """A path's NIC series at 10 Hz: ``rates`` bytes per second, one per second."""
    return {"series": [[t0 + i + k / 10, t0 + i + (k + 1) / 10, r / 10, 0.0, r / 20, r / 20]
                       for i, r in enumerate(rates) for k in range(10)]}


def io(ios: list[float], t0: float = 100.0) -> list[list[float]]:
    return [[t0 + i, t0 + i + 1, n * 16384, n] for i, n in enumerate(ios)]


def test_a_path_that_stops_is_a_failure_with_the_survivors_time_and_the_failover_window() -> None:
    paths = {"a": nic([20e6] * 5 + [200.0] * 15), "b": nic([20e6] * 20)}
    # fio completes nothing for 4 s after path a stops: multipath failing the path and requeueing its I/O
    (f,) = path_failures(paths, io([1000] * 5 + [0] * 4 + [1200] * 11), 100.0, 120.0)
    assert (f["path"], f["stopped_at"], f["resumed_at"], f["survivors"]) == ("a", 105.0, None, ["b"])
    assert f["carried_on_s"] == 15.0 and f["survivor_gbps"] == pytest.approx(0.16)
    assert f["io_stalled_s"] == 4.0
    back = path_failures({"a": nic([20e6] * 5 + [0.0] * 6 + [20e6] * 9), "b": nic([20e6] * 20)}, io([1000] * 20),
                         100.0, 120.0)
    assert [(f["stopped_at"], f["resumed_at"], f["io_stalled_s"]) for f in back] == [(105.0, 111.0, 0.0)]
    # under STALL_S (2 s) is a dip, not a failure; a path that never carried I/O is not judged
    assert path_failures({"a": nic([20e6] * 5 + [0.0] + [20e6] * 4), "c": nic([0.0] * 10)}, io([10] * 10),
                         100.0, 110.0) == []


def test_window_totals_take_the_paths_gbps_from_their_nics_and_the_iops_from_fio() -> None:
    def out(role: str) -> dict[str, Any]:
        paths = {n: {"gbps": 0.16, "bytes": 20e6 * 10, "seconds": 10.0, **nic([20e6] * 10)} for n in ("a", "b")}
        return {"role": role, "mtu": {"a": 9000, "b": 9000}, "started_at": 100.0, "ended_at": 110.0, "paths": paths,
                **({"io": {"series": io([2000] * 10), "lat_mean_ns": 4e6}, "measure_from": 101.0, "measure_to": 109.0}
                   if role == "initiator" else {})}
    agg = aggregate({"tgt": out("target"), "ini": out("initiator")})
    assert agg["window_s"] == 8.0
    assert agg["per_path"]["ini.a"]["gbps"] == pytest.approx(0.16) and agg["per_path"]["ini.a"]["iops"] is None
    assert agg["total"]["initiator_gbps"] == pytest.approx(0.32) and agg["total"]["target_gbps"] == pytest.approx(0.32)
    assert agg["total"]["initiator_iops"] == pytest.approx(2000) and agg["total"]["lat_mean_ns"] == 4e6


@pytest.mark.parametrize("bad", [
    "x", [1] * 65, [{"path": 1}], [{"path": "a" * 65, "stopped_at": 1, "carried_on_s": 1, "survivor_gbps": 1}],
    [{"path": "a", "stopped_at": "soon", "carried_on_s": 1, "survivor_gbps": 1}],
    [{"path": "a", "stopped_at": float("nan"), "carried_on_s": 1, "survivor_gbps": 1}],
    [{"path": "a", "stopped_at": 1, "carried_on_s": True, "survivor_gbps": 1}],
    [{"path": "a", "stopped_at": 1, "carried_on_s": 1, "survivor_gbps": 1, "io_stalled_s": "4"}],
    [{"path": "a", "stopped_at": 1, "carried_on_s": 1, "survivor_gbps": 1, "survivors": [1]}],
    [{"path": "a", "stopped_at": 1, "carried_on_s": 1, "survivor_gbps": 1, "survivors": ["b"] * 9}],
])
def test_an_agents_failures_that_are_not_numbers_and_names_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="failures"):
        checked_failures(bad)


def test_run_show_prints_the_failure_with_its_failover_window() -> None:
    f = {"host": "ini", "path": "a", "stopped_at": 105.0, "resumed_at": None, "survivors": ["b"],
         "carried_on_s": 14.0, "survivor_gbps": 0.16, "io_stalled_s": 4.0}
    assert checked_failures([f]) == [f]
    g = NetGroup(name="r.mtu9000.multi", starts={"ini": 100.0}, window_start=101.0, failures=[f])
    assert failure_lines([g]) == ["path failure: r.mtu9000.multi: ini path a stopped +5.0s after the start; b carried "
                                  "on 14.0s at 0.160 Gbps; no I/O completed for 4.0s (the failover window)"]
    back = {**f, "resumed_at": 111.0}
    assert "a stopped +5.0s after the start, back 6.0s later; b" in failure_lines([NetGroup(
        name="r", starts={"ini": 100.0}, failures=[back])])[0]


def test_tool_block_reads_only_and_is_a_tool_of_the_protocol_and_the_agent() -> None:
    base = "suite: s\nnetwork: {paths: [a, b], tool: block}\nprofiles:\n"
    ok = parse_suite(base + "  - {name: r, rw: randread, bs: 4k, runtime: 5s}\n", "s.yaml")
    assert ok.network is not None and ok.network.tool == "block"
    with pytest.raises(SuiteError) as e:
        parse_suite(base + "  - {name: w, rw: randwrite, bs: 4k, runtime: 5s}\n"
                           "  - {name: m, rw: randrw, rwmixread: 100, bs: 4k, runtime: 5s}\n", "s.yaml")
    assert str(e.value).count("network.tool block reads the target's LUN") == 2, str(e.value)
    assert NetStart(role="initiator", paths=("a",), mtu=1500, tool="block", start_at=1.0, seconds=5).tool == "block"
    assert set(INITIATOR_TOOLS) == {"fio", "iscsi", "block"}


def test_the_job_is_refused_before_fio_when_it_would_write(tmp_path: Path) -> None:
    w = Workload(name="w", rw="randwrite", bs=4096, runtime=1)
    with pytest.raises(NetStepError, match="tool block only reads"):
        run_block({"paths": []}, BlockTarget("/dev/sdb", {"a": "sdb"}), w, tmp_path)
    assert not (tmp_path / "block.fio").exists()


@pytest.mark.parametrize("bad", [
    "x", {}, {"read_bw_bytes": 1.0}, {"read_bw_bytes": "1", "write_bw_bytes": 0},
    {"read_bw_bytes": float("nan"), "write_bw_bytes": 0}, {"read_bw_bytes": -1, "write_bw_bytes": 0},
    {"read_bw_bytes": 1, "write_bw_bytes": 0, "lat_mean_ns": float("inf")},
    {"read_bw_bytes": 1, "write_bw_bytes": 0, "errors": True},
    {"read_bw_bytes": 1, "write_bw_bytes": 0, "series": [["a", 1, 2, 3]]},
    {"read_bw_bytes": 1, "write_bw_bytes": 0, "series": "x"},
])
def test_an_agents_io_figures_that_are_not_finite_numbers_are_refused(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        checked_io(bad)


def test_an_agents_io_figures_are_kept_with_their_series_per_second() -> None:
    io = checked_io({"read_bw_bytes": 2e6, "write_bw_bytes": 0, "lat_mean_ns": 4e6, "lat_p99_ns": None,
                     "series": [[100.0, 100.5, 1e6, 60.0], [100.5, 101.0, 1e6, 62.0]]})
    assert io["series"] == [[100.0, 101.0, 2e6, 122.0]] and io["lat_mean_ns"] == 4e6
