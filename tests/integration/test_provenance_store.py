"""A real lab result (agent + controller on loop-device DUTs) stores its latency histogram and the
provenance a review lists: every device of the group with its driver, the host's platform facts."""

from __future__ import annotations

import pytest

from labcontract.fioresult import bin_percentiles
from orchestrator.provenance import describe
from tests.conftest import LabHandle

pytestmark = pytest.mark.integration

SUITE = """\
suite: prov
devices: 2
defaults: {runtime: 5s, ioengine: libaio, direct: true}
profiles:
  - {name: 4k, rw: randrw, bs: 4k, rwmixread: 70, iodepth: 4}
"""


def _merged(*hists: dict[str, list[list[int]]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in hists:
        for d in ("read", "write"):
            for ns, count in h[d]:
                out[ns] = out.get(ns, 0) + count
    return out


def test_group_result_stores_lat_hist_and_devices_with_driver(fresh_lab: LabHandle) -> None:
    lab = fresh_lab
    run_id = lab.submit(SUITE, ["dut0", "dut1"], runtime=1)
    d = lab.wait_run(run_id, timeout=120)
    assert d.run.state == "SUCCEEDED", (d.run.reason, [(st.name, st.reason) for st in d.steps])
    (st,) = d.steps
    res = d.results[st.id]
    hist = res.lat_hist
    assert hist is not None and hist["read"] and hist["write"]
    assert sum(c for _ns, c in hist["read"]) == res.metrics["read"]["lat"]["samples"]
    assert {k: float(v) for k, v in bin_percentiles(_merged(hist)).items()} == \
        res.metrics["combined"]["percentiles_ns"]
    # completion latency beside the total, from its own bins; the whole host's CPU over the step
    assert bin_percentiles(_merged(hist["clat"])) == res.metrics["combined"]["clat_percentiles_ns"]
    assert res.metrics["combined"]["clat_mean_ns"] <= res.metrics["combined"]["lat_mean_ns"]
    host = res.metrics["host_cpu"]
    assert host is not None and host["cpus"] >= 1 and 0 <= host["busy_pct"] <= 100 and host["us_per_io"] > 0
    sent = {a.name for at in st.attempts if at.id == res.attempt_id for a in at.artifacts}
    assert {"host-cpu.start", "host-cpu.end", "fio.json"} <= sent, sent
    assert list(hist["per_device"]) == d.run.devices
    assert res.per_device is not None
    for path, dev_hist in hist["per_device"].items():
        assert bin_percentiles(_merged(dev_hist)) == res.per_device[path]["combined"]["percentiles_ns"]

    devices = res.provenance["devices"]
    assert [x["path"] for x in devices] == d.run.devices == [lab.duts["dut0"].path, lab.duts["dut1"].path]
    assert all(x["driver"] == "loop" and x["size_bytes"] == 128 << 20 for x in devices), devices
    prov = describe(d)
    assert prov.device_label == "2 x loop 0.1 GB"
    assert [row["driver"] for row in prov.devices] == ["loop", "loop"]
    assert prov.warnings == ["runtime overridden to 1 s per cell (suite says 5 s): not the published methodology"]
    shown = lab.labctl("run", "show", run_id).stdout
    assert "None" not in shown and "runtime overridden to 1 s" in shown and lab.duts["dut1"].path in shown, shown
