"""A canary on a real lab (redis, controller, agent, loop-device DUT): ``labctl canary add`` makes the
schedule, a real canary run with too little history is recorded as such, a history is laid in the store (the
real run's rows, with 3x its IOPS), the next real canary drifts: ``labctl hosts`` shows the failed ``canary``
check and the quarantine, ``labctl hosts release`` ends it, ``labctl canary remove`` drops the schedule."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from labcontract.suite import load_suite
from orchestrator.runs.client import ControllerClient
from orchestrator.store.models import Attempt, Host, Result, Run, Schedule, Step
from tests.conftest import LabHandle
from tests.tables import column_text

pytestmark = pytest.mark.integration

SCALE = 0.05      # 20 s -> 1 s per cell


def canary_run(lab: LabHandle) -> str:
    run_id, reply = ControllerClient(lab.redis(), timeout_s=30).submit(load_suite("canary"), lab.host, ["dut0"],
                                                                          scale=SCALE)
    assert reply is not None and reply.ok, reply
    assert lab.wait_run(run_id).run.state == "SUCCEEDED"
    return run_id


def lay_history(lab: LabHandle, model_id: str, n: int, factor: float) -> None:
    """``n`` earlier canary runs like ``model_id``, each of its results with ``factor`` x its IOPS; the model's
    own results too (it is part of the history, and a real run's noise must not widen the band)."""
    with lab.sessions.begin() as s:
        model = s.get(Run, model_id)
        assert model is not None and model.ended_at is not None
        results = {r.step_id: r for r in s.scalars(select(Result).where(Result.run_id == model_id))}
        for r in results.values():
            r.iops, r.lat_mean_ns = (r.iops or 0) * factor, (r.lat_mean_ns or 0) / factor
        for i in range(n):
            rid = f"hist{i:02d}"
            at = model.ended_at - 10_000 + 100 * i
            s.add(Run(id=rid, suite_name=model.suite_name, suite_source=model.suite_source,
                      suite_text=model.suite_text, suite_sha256=model.suite_sha256, host=model.host,
                      device=model.device, devices=model.devices, runtime_override=model.runtime_override,
                      scale=model.scale, state="SUCCEEDED", submitted_at=at, started_at=at, ended_at=at + 5,
                      submitted_by="test", rerun_count=0))
            for st in model.steps:
                res = results[st.id]
                sid, aid = f"{rid}-s{st.seq:03d}", f"{rid}-s{st.seq:03d}-a1"
                s.add(Step(id=sid, run_id=rid, seq=st.seq, round=0, kind=st.kind, name=st.name, cell=st.cell,
                           workload=st.workload,
                           job_text="", state="SUCCEEDED", ended_at=at + 5))
                s.add(Attempt(id=aid, step_id=sid, number=1, host=model.host, device=model.device,
                              state="SUCCEEDED", timeout_s=60))
                wobble = 1 + 0.01 * (i % 3 - 1)
                s.add(Result(attempt_id=aid, step_id=sid, run_id=rid, kind="fio", tool="fio",
                             iops=(res.iops or 0) * wobble, bw_bytes=(res.bw_bytes or 0) * factor * wobble,
                             lat_mean_ns=(res.lat_mean_ns or 0) / wobble,
                             runtime_ms=res.runtime_ms, fio_version=res.fio_version, metrics=res.metrics,
                             provenance=res.provenance, created_at=at + 5))


def test_canary_add_judge_flag_quarantine_release_remove(lab: LabHandle) -> None:
    added = lab.labctl("canary", "add", lab.host, "dut0", "--cron", "0 3 * * *", "--quarantine")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == f"canary canary.{lab.host}.dut0 added (0 3 * * *, quarantines on drift)"
    with lab.sessions() as s:
        sch = s.get(Schedule, f"canary.{lab.host}.dut0")
        assert sch is not None and sch.submit["suite_text"] == load_suite("canary").source_text
        assert sch.expires_after_s == 6 * 3600 and sch.submit["actor"] == "canary:quarantine"
    bad = lab.labctl("canary", "add", lab.host, "nosuch")
    assert bad.returncode != 0 and "'nosuch' is not a declared DUT" in bad.stderr

    first = canary_run(lab)                       # no history yet: recorded, nothing flagged
    listed = lab.labctl("canary", "list", check=True).stdout
    assert f"canary.{lab.host}.dut0" in listed and "history too short (0 of 8)" in listed, listed

    lay_history(lab, first, 9, factor=3.0)        # the device measured 3x what it does now
    drifted = canary_run(lab)
    dut = lab.duts["dut0"].path
    with lab.sessions() as s:
        host = s.get(Host, lab.host)
        assert host is not None
        entry = host.health[f"canary {dut}"]
        assert entry["fails"] == 1 and entry["observed"] == drifted, entry
        assert entry["detail"].startswith("drift against its 10-run history: ")   # 9 laid + the first real run
        assert host.devices[0].quarantined_at is not None
    hosts = lab.labctl("hosts", check=True).stdout
    why = column_text(hosts)           # the table wraps its cells to 200 columns, by the host's CPU name etc.
    assert "[QUARANTINED]" in hosts and f"canary {dut}: failed x1: drift against" in why, hosts

    released = lab.labctl("hosts", "release", lab.host, "--device", "dut0")
    assert released.returncode == 0, released.stderr
    with lab.sessions() as s:
        host = s.get(Host, lab.host)
        assert host is not None and host.devices[0].quarantined_at is None
        assert f"canary {dut}" not in host.health
    removed = lab.labctl("canary", "remove", lab.host, "dut0")
    assert removed.returncode == 0 and removed.stdout.strip() == f"canary canary.{lab.host}.dut0 removed"
    assert f"canary.{lab.host}" not in lab.labctl("canary", "list", check=True).stdout
