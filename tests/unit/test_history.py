"""History series and regressions (orchestrator.stats.history) over a real SQLite store built from the project's
models: known histories (a step, noise only, a single spike, an improvement), acknowledgement through the
controller, metrics missing in older runs, histories too short, the last-point rule, and the notification of a
scheduled run that regressed."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import InputError
from labcontract.protocol import Acknowledge
from orchestrator.controller import Controller
from orchestrator.controller.notify import Notifier
from orchestrator.stats.history import (
    THRESHOLD_PCT,
    find_regressions,
    history_status,
    load_series,
    parse_since,
    regressions,
    regressions_for_run,
)
from orchestrator.store.models import Attempt, NetGroup, Result, Run, Step

T0 = 1_800_000_000.0
DAY = 86400.0
Figures = Mapping[str, float | None]      # iops, lat_us, bw (MB/s)


def add_run(s: Session, rid: str, t: float, cells: Mapping[str, Sequence[Figures]], *, host: str = "h1",
            suite: str = "nightly", model: str = "FAST-SSD", firmware: str = "1.0", op_mode: str = "stock",
            submitted_by: str = "labctl", state: str = "SUCCEEDED", notified: bool = True,
            job_text: str = "") -> None:
    """One ended run: per cell (a profile name) one measured step per repeat, each with its result."""
    run = Run(id=rid, suite_name=suite, suite_source="x.yaml", suite_text="x", suite_sha256="0" * 64, host=host,
              device="/dev/nvme0n1", devices=["/dev/nvme0n1"], state=state, submitted_at=t - 60, started_at=t,
              ended_at=t + 600, submitted_by=submitted_by, notified_at=t + 601 if notified else None,
              topology=None)    # set as the controller does: a JSON null, not SQL NULL
    s.add(run)
    seq = 0
    for profile, repeats in cells.items():
        for k, fig in enumerate(repeats, start=1):
            sid = f"{rid}-{seq}"
            cell: dict[str, Any] = {"op_mode": op_mode, "profile": profile}
            if len(repeats) > 1:
                cell["repeat"] = k
            s.add(Step(id=sid, run_id=rid, seq=seq, name=f"{profile}#{k}", kind="measure", cell=cell, job_text=job_text,
                       state="SUCCEEDED", ended_at=t + 10 * seq))
            s.add(Attempt(id=f"{sid}-a1", step_id=sid, number=1, host=host, device="/dev/nvme0n1",
                          state="SUCCEEDED", timeout_s=60))
            lat, bw = fig.get("lat_us"), fig.get("bw")
            s.add(Result(attempt_id=f"{sid}-a1", step_id=sid, run_id=rid, iops=fig.get("iops"),
                         bw_bytes=None if bw is None else bw * 1e6, lat_mean_ns=None if lat is None else lat * 1e3,
                         runtime_ms=1000, metrics={}, created_at=t + 10 * seq,
                         provenance={"device": {"path": "/dev/nvme0n1", "model": model, "firmware": firmware}}))
            seq += 1


def noisy(n: int, mean: float, cov: float = 0.02, seed: int = 7) -> list[float]:
    return [float(x) for x in np.random.default_rng(seed).normal(mean, mean * cov, n)]


def store_history(db: sessionmaker[Session], iops: Sequence[float], *, prefix: str = "r", host: str = "h1",
                  t0: float = T0, **kw: Any) -> list[str]:
    """One run a day, one cell (4k-randread) with the given IOPS; the run ids in order."""
    ids = [f"{prefix}{i:03d}" for i in range(len(iops))]
    with db.begin() as s:
        for i, (rid, v) in enumerate(zip(ids, iops, strict=True)):
            add_run(s, rid, t0 + i * DAY, {"4k-randread": [{"iops": v}]}, host=host, **kw)
    return ids


@pytest.fixture
def db(env: Any) -> sessionmaker[Session]:
    got: sessionmaker[Session] = env[3]
    return got


def test_a_step_down_of_20_percent_is_one_regression_at_the_first_run_after_it(db: sessionmaker[Session]) -> None:
    values = noisy(12, 10_000) + noisy(12, 8_000, seed=21)
    ids = store_history(db, values)
    with db() as s:
        regs = regressions(s)
    assert len(regs) == 1
    r = regs[0]
    assert (r.run_id, r.metric, r.host, r.model, r.firmware, r.suite) == (ids[12], "iops", "h1", "FAST-SSD", "1.0",
                                                                          "nightly")
    assert r.cell == "4k-randread (stock)" and dict(r.cell_key) == {"op_mode": "stock", "profile": "4k-randread"}
    assert r.before == pytest.approx(np.mean(values[:12])) and r.after == pytest.approx(np.mean(values[12:]))
    assert r.change_pct == pytest.approx(-20, abs=2.5) and r.confidence >= 0.95 and r.rule == "change"
    assert len(r.id) == 12 and not r.acknowledged
    with db() as s:
        assert [x.id for x in regressions_for_run(s, ids[12])] == [r.id]
        assert regressions_for_run(s, ids[11]) == [] and regressions_for_run(s, ids[13]) == []
        assert regressions(s, since=T0 + 12 * DAY) == regs and regressions(s, since=T0 + 13 * DAY) == []
        assert regressions(s, host="h2") == []


def test_noise_only_a_single_spike_and_an_improvement_are_not_regressions(db: sessionmaker[Session]) -> None:
    store_history(db, noisy(30, 10_000, cov=0.03), prefix="n", suite="noise")
    spike = noisy(24, 10_000, seed=3)
    spike[10] *= 0.6
    store_history(db, spike, prefix="s", suite="spike")
    store_history(db, noisy(12, 10_000) + noisy(12, 12_000, seed=9), prefix="u", suite="better")
    with db.begin() as s:       # latency that drops by 20%: better too
        for i, lat in enumerate(noisy(12, 100) + noisy(12, 80, seed=4)):
            add_run(s, f"l{i:03d}", T0 + i * DAY, {"4k-randwrite": [{"lat_us": lat}]}, suite="latency")
    with db() as s:
        regs, status = find_regressions(s)
    assert regs == [] and status.series == 4 and status.too_short == 0 and status.message() is None


def test_latency_up_is_worse_and_a_small_change_is_below_the_threshold(db: sessionmaker[Session]) -> None:
    with db.begin() as s:
        for i, (lat, iops) in enumerate(zip(noisy(12, 100, cov=0.005) + noisy(12, 125, cov=0.005, seed=5),
                                            noisy(12, 10_000, cov=0.003) + noisy(12, 9_800, cov=0.003, seed=6),
                                            strict=True)):
            add_run(s, f"r{i:03d}", T0 + i * DAY, {"4k-randwrite": [{"lat_us": lat, "iops": iops}]})
    with db() as s:
        regs = regressions(s)
    # IOPS dropped by 2% (a real change, below THRESHOLD_PCT); latency rose by 25%
    assert THRESHOLD_PCT == 5.0
    assert [(r.metric, r.run_id) for r in regs] == [("lat_mean_us", "r012")]
    assert regs[0].change_pct == pytest.approx(25, abs=2)


def test_an_acknowledged_regression_is_not_listed_again_but_is_with_all(env: Any) -> None:
    ctl: Controller = env[0]
    db: sessionmaker[Session] = env[3]
    store_history(db, noisy(12, 10_000) + noisy(12, 8_000, seed=8))
    with db() as s:
        (reg,) = regressions(s)
    ctl.handle_command(Acknowledge(regression_id=reg.id, reason="new firmware, expected", reply_to="-")
                       .model_dump_json())
    ctl.handle_command(Acknowledge(regression_id=reg.id, reason="again", reply_to="-").model_dump_json())
    with db() as s:
        assert regressions(s) == []
        assert regressions_for_run(s, reg.run_id) == []
        (again,) = regressions(s, include_acknowledged=True)
    assert again.id == reg.id and again.acknowledged and again.ack_reason == "new firmware, expected"


def test_older_runs_missing_a_metric_or_the_cell_are_skipped_not_zero(db: sessionmaker[Session]) -> None:
    lat = noisy(12, 100) + noisy(12, 130, seed=2)
    with db.begin() as s:
        for i in range(24):
            cells: dict[str, list[Figures]] = {"4k-randread": [{"iops": 10_000.0 + i,
                                                                "lat_us": lat[i] if i >= 4 else None}]}
            if i >= 17:      # a cell the suite gained later: 7 runs only
                cells["128k-read"] = [{"bw": 3000.0 - i}]
            add_run(s, f"r{i:03d}", T0 + i * DAY, cells)
    with db() as s:
        series = {(dict(x.ident.cell_key)["profile"], x.ident.metric): x for x in load_series(s)}
        regs, status = find_regressions(s)
    assert set(series) == {("4k-randread", "iops"), ("4k-randread", "lat_mean_us"), ("128k-read", "mb_s")}
    assert len(series["4k-randread", "iops"].values) == 24
    assert series["4k-randread", "lat_mean_us"].run_ids[0] == "r004"        # r000-r003 lacked it: no zeros
    assert min(series["4k-randread", "lat_mean_us"].values) > 50
    assert len(series["128k-read", "mb_s"].values) == 7
    assert [(r.metric, r.run_id) for r in regs] == [("lat_mean_us", "r012")]
    assert (status.series, status.too_short) == (2, 1)
    assert status.message() == "1 series too short (need 8 runs)"


def test_a_five_run_history_is_too_short_and_said_so(db: sessionmaker[Session]) -> None:
    ids = store_history(db, [10_000, 10_000, 10_000, 10_000, 5_000])
    with db() as s:
        regs, status = find_regressions(s)
        assert regressions_for_run(s, ids[-1]) == []
        assert history_status(s).message() == "1 series too short (need 8 runs)"
    assert regs == [] and (status.series, status.too_short, status.need) == (0, 1, 8)


def test_the_last_run_is_judged_against_the_history_before_it(db: sessionmaker[Session]) -> None:
    base = noisy(15, 10_000)
    ids = store_history(db, [*base, 7_000.0])
    with db() as s:
        (reg,) = regressions_for_run(s, ids[-1])
        assert regressions(s) == [reg]
    assert reg.rule == "last" and reg.before == pytest.approx(np.mean(base[:14])) and reg.after == 7_000
    assert reg.change_pct == pytest.approx(-30, abs=2) and reg.confidence > 0.99
    # three more low nights: the detector now sees a change point at the same run, under the same id
    more = store_history(db, noisy(3, 7_000, seed=11), prefix="x", t0=T0 + 16 * DAY)
    with db() as s:
        (later,) = regressions(s)
        assert regressions_for_run(s, more[-1]) == []
    assert later.rule == "change" and later.id == reg.id and later.run_id == ids[-1]


def test_a_last_run_within_its_noise_or_above_it_is_not_flagged(db: sessionmaker[Session]) -> None:
    base = noisy(15, 10_000)
    ids = store_history(db, [*base, 9_800.0], prefix="a", suite="a")
    ids2 = store_history(db, [*base, 13_000.0], prefix="b", suite="b")
    with db() as s:
        assert regressions_for_run(s, ids[-1]) == [] and regressions_for_run(s, ids2[-1]) == []


def test_a_run_value_is_the_mean_of_its_repeats(db: sessionmaker[Session]) -> None:
    with db.begin() as s:
        add_run(s, "r1", T0, {"4k-randread": [{"iops": 9_000.0}, {"iops": 10_000.0}, {"iops": 11_500.0}]})
        add_run(s, "r2", T0 + DAY, {"4k-randread": [{"iops": 10_000.0}, {"iops": None}]})
    with db() as s:
        (ser,) = load_series(s, metrics=("iops",))
    assert ser.run_ids == ["r1", "r2"] and ser.values == [pytest.approx(10_166.666, rel=1e-6), 10_000.0]


def test_the_firmware_and_op_mode_at_the_time_of_the_run_make_separate_series(db: sessionmaker[Session]) -> None:
    # 12 runs on firmware 1.0, 12 slower ones after the update to 2.0: two flat series, no regression
    store_history(db, noisy(12, 10_000), prefix="a", firmware="1.0")
    store_history(db, noisy(12, 8_000, seed=8), prefix="b", firmware="2.0", t0=T0 + 12 * DAY)
    store_history(db, noisy(12, 6_000, seed=9), prefix="c", op_mode="hp:20", t0=T0 + 24 * DAY)
    with db() as s:
        series = load_series(s, metrics=("iops",))
        assert regressions(s) == []
    assert sorted((x.ident.firmware, dict(x.ident.cell_key)["op_mode"], len(x.values)) for x in series) == [
        ("1.0", "hp:20", 12), ("1.0", "stock", 12), ("2.0", "stock", 12)]


def test_since_takes_a_duration_or_a_date() -> None:
    assert parse_since("7d", T0) == T0 - 7 * DAY
    assert parse_since("2026-11-01T00:00:00+00:00", T0) == 1_793_491_200.0
    with pytest.raises(InputError, match="--since"):
        parse_since("last tuesday", T0)


def test_a_scheduled_run_that_regressed_is_notified_with_its_regressions(env: Any, tmp_path: Path) -> None:
    ctl: Controller = env[0]
    db: sessionmaker[Session] = env[3]
    sink = tmp_path / "notify.jsonl"
    ctl.notifier = Notifier(files=[sink])
    ids = store_history(db, noisy(15, 10_000), submitted_by="schedule:nightly")
    with db.begin() as s:
        add_run(s, "last", T0 + 20 * DAY, {"4k-randread": [{"iops": 6_000.0}]}, submitted_by="schedule:nightly",
                notified=False)
        add_run(s, "manual", T0 + 21 * DAY, {"4k-randread": [{"iops": 6_000.0}]}, suite="other", notified=False)
    ctl.notify()
    bodies = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [(b["event"], b["run"]) for b in bodies] == [("run.ended", "last"), ("run.regressed", "last"),
                                                         ("run.ended", "manual")]
    ended, regressed, manual = bodies
    assert [r["run_id"] for r in ended["regressions"]] == ["last"] and "regressions" not in manual
    (reg,) = regressed["regressions"]
    assert regressed["schedule"] == "nightly" and reg["metric"] == "iops" and reg["change_pct"] < -30
    assert reg["cell_key"] == {"op_mode": "stock", "profile": "4k-randread"} and ids[0] != "last"
    assert 0.5 < reg["noise_cov_pct"] < 3 and reg["detectable_pct"] == pytest.approx(
        max(3 * reg["noise_cov_pct"], THRESHOLD_PCT))
    assert ended["history"] == "1 regression in 1 cell against a history of up to 16 runs"
    ctl.notify()        # marked notified: nothing twice
    assert len(sink.read_text().splitlines()) == 3


def test_the_api_lists_regressions_for_a_viewer_and_refuses_an_unknown_id(env: Any, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from orchestrator.store.models import ApiToken
    from orchestrator.tokens import new_token, token_hash
    from orchestrator.web.app import create_app
    from orchestrator.web.config import WebConfig

    db: sessionmaker[Session] = env[3]
    store_history(db, noisy(12, 10_000) + noisy(12, 8_000, seed=21))
    store_history(db, [10_000.0] * 5, prefix="s", suite="short")
    viewer, engineer = new_token(), new_token()
    with db.begin() as s:
        s.add(ApiToken(name="v", role="viewer", token_sha256=token_hash(viewer), created_at=T0))
        s.add(ApiToken(name="e", role="engineer", token_sha256=token_hash(engineer), created_at=T0))
    cfg = WebConfig(store_url=f"sqlite:///{tmp_path / 'store.sqlite'}", broker_url="redis://127.0.0.1:1/0",
                    secret_file=tmp_path / "session.key", cache_dir=tmp_path / "cache",
                    artifact_dir=tmp_path / "art", command_timeout_s=1)
    with TestClient(create_app(cfg, sessions=db)) as client:
        got = client.get("/api/regressions", params={"since": "3650d"}, headers={"Authorization": f"Bearer {viewer}"})
        assert got.status_code == 200, got.text
        body = got.json()
        assert (body["series"], body["too_short"], body["need"]) == (1, 1, 8)
        assert [r["run_id"] for r in body["regressions"]] == ["r012"]
        bad = client.get("/api/regressions", params={"since": "someday"}, headers={"Authorization": f"Bearer {viewer}"})
        assert bad.status_code == 422 and "since" in bad.text
        ack = client.post("/api/regressions/0123456789ab/ack", json={"reason": "x"},
                          headers={"Authorization": f"Bearer {engineer}"})
        assert ack.status_code == 404
        assert client.post(f"/api/regressions/{body['regressions'][0]['id']}/ack", json={},
                           headers={"Authorization": f"Bearer {viewer}"}).status_code == 403


def test_a_network_run_series_is_its_groups_window_total(db: sessionmaker[Session]) -> None:
    gbps = noisy(12, 9.4, cov=0.01) + noisy(12, 7.0, cov=0.01, seed=21)
    with db.begin() as s:
        for i, g in enumerate(gbps):
            rid = f"net{i:03d}"
            s.add(Run(id=rid, suite_name="net", suite_source="x", suite_text="x", suite_sha256="0" * 64, host="tgt",
                      device="", devices=[], state="SUCCEEDED", submitted_at=T0 + i * DAY, started_at=T0 + i * DAY,
                      topology={"target": "tgt", "initiators": ["ini"], "tool": "iperf3"}))
            s.flush()
            s.add(NetGroup(run_id=rid, seq=0, name="tcp-1500", cell={"profile": "tcp", "mtu": 1500, "paths": "single"},
                           hosts=["tgt", "ini"], starts={}, total={"initiator_gbps": g, "target_gbps": g},
                           per_path={}, per_host={}, failures=[], complete=True, created_at=T0 + i * DAY))
    with db() as s:
        (ser,) = load_series(s)
        regs = regressions(s)
    assert (ser.ident.metric, ser.ident.model, ser.ident.firmware, len(ser.values)) == ("gbps", "", "", 24)
    assert [(r.metric, r.run_id) for r in regs] == [("gbps", "net012")]


def test_labctl_regressions_prints_the_table_the_too_short_count_and_refuses_a_bad_since(
        env: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cmd.labctl import app

    db: sessionmaker[Session] = env[3]
    store_history(db, noisy(12, 10_000) + noisy(12, 8_000, seed=21))
    store_history(db, [10_000.0] * 5, prefix="s", suite="short")
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    with db() as s:
        (reg,) = regressions(s)
    res = CliRunner().invoke(app, ["--store", store, "regressions"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("h1 · FAST-SSD fw 1.0 · suite nightly")
    assert any(line.startswith(reg.id) and "r012" in line and f"{reg.change_pct:+.1f}%" in line for line in lines)
    assert lines[-1] == "1 series too short (need 8 runs)"
    assert max(len(line.rstrip()) for line in lines) <= 100
    none = CliRunner().invoke(app, ["--store", store, "regressions", "--since", "2030-01-01"])
    assert none.exit_code == 0 and none.output.startswith("no regressions since 2030-01-01 (1 series judged)")
    bad = CliRunner().invoke(app, ["--store", store, "regressions", "--since", "yesterday-ish"])
    assert bad.exit_code == 1 and "--since" in bad.output


# --- issue 26: a regression keeps its id ----------------------------------------------------------------------


def _series(values: Sequence[float]) -> Any:
    from orchestrator.stats.history import Series, SeriesId

    ident = SeriesId("h1", "FAST-SSD", "1.0", "nightly", (("op_mode", "stock"), ("profile", "4k-randread")), "iops")
    return Series(ident, [f"r{i:03d}" for i in range(len(values))], [T0 + i * DAY for i in range(len(values))],
                  list(values))


def test_a_regression_keeps_its_run_and_id_from_the_first_night_it_is_flagged() -> None:
    # 40 nights at 100k IOPS (CoV 2%), then 80k: replayed night by night over 50 seeds. The step was flagged at
    # r040 by the last-point rule, at r039 by the detector the next night (2 points after the step), then at
    # r040 again: an acknowledgement made the first morning did not cover the second, and the night that had
    # just ended showed none.
    from orchestrator.stats.history import judge_series

    for seed in range(50):
        rng = np.random.default_rng(seed)
        values = [*(100_000 * (1 + 0.02 * rng.standard_normal(40))), *(80_000 * (1 + 0.02 * rng.standard_normal(12)))]
        first = None
        for night in range(41, len(values) + 1):
            near = {r.id: r.run_id for r in judge_series(_series(values[:night])) or [] if r.run_id >= "r035"}
            if first is None and near:
                first = next(iter(near.items()))
                assert first[1] == "r040", (seed, night, near)
            elif first is not None:
                assert first[0] in near, (seed, night, near)
        assert first is not None, seed


def test_the_last_run_rule_band_is_three_standard_deviations() -> None:
    from orchestrator.stats.history import judge_series

    ref = [97.0, 103.0] * 10          # mean 100, sd sqrt(180 / 19) = 3.078: 3 sd = 9.23, above 5% of the mean
    band = 3 * (180 / 19) ** 0.5
    beyond = judge_series(_series([*ref, 100.0, 100.0 - band - 0.05])) or []
    assert [(r.rule, r.run_id) for r in beyond] == [("last", "r021")]
    assert beyond[0].before == pytest.approx(100.0)
    assert not judge_series(_series([*ref, 100.0, 100.0 - band + 0.05]))
    # with a quiet history the band is THRESHOLD_PCT of the mean instead
    quiet = [100.0, 100.2] * 10
    assert not judge_series(_series([*quiet, 100.0, 100.1 * (1 - THRESHOLD_PCT / 100) + 0.01]))
    assert judge_series(_series([*quiet, 100.0, 100.1 * (1 - THRESHOLD_PCT / 100) - 0.01]))


JOB = "[global]\nfilename=/dev/nvme0n1\nioengine={engine}\ndirect=1\nruntime=60\n\n[4k-randread]\nrw=randread\n" \
      "bs=4k\niodepth={qd}\n"


def test_a_suite_edited_under_its_name_starts_a_new_series_and_says_so(env: Any, tmp_path: Path) -> None:
    # A nightly at libaio QD16 for 20 nights, then edited under the same name to psync QD1: IOPS fell 72%. One
    # series by the suite's name judged the new runs against the old ones; the fingerprint of what the cells ran
    # starts a new series, too short to judge, and every place that reads the history says why.
    from orchestrator.runhistory import run_history

    ctl: Controller = env[0]
    db: sessionmaker[Session] = env[3]
    old = store_history(db, noisy(20, 100_000), job_text=JOB.format(engine="libaio", qd=16),
                        submitted_by="schedule:nightly")
    new = store_history(db, noisy(3, 28_000, seed=8), prefix="e", t0=T0 + 20 * DAY,
                        job_text=JOB.format(engine="psync", qd=1), submitted_by="schedule:nightly")
    with db() as s:
        regs, status = find_regressions(s)
        assert regs == [] and status.changed == (new[0],)
        assert status.message() == f"1 series too short (need 8 runs); the suite changed on {new[0]}: new series, " \
                                   "history too short"
        h = run_history(s, new[-1])
        assert h is not None and h.summary() == f"the suite changed on {new[0]}: new series, history too short " \
                                                "(3 runs, the detector needs 8)"
        series = load_series(s)
        assert sorted((len(x.values), x.changed_from) for x in series) == [(3, new[0]), (20, None)]
    # the same workload on another device path, or a new device name, stays one series
    store_history(db, noisy(2, 100_000, seed=9), prefix="d", t0=T0 + 30 * DAY,
                  job_text=JOB.format(engine="libaio", qd=16).replace("nvme0n1", "nvme3n1"))
    with db() as s:
        assert sorted(len(x.values) for x in load_series(s)) == [3, 22]
    # the notification of the nightly says it too
    sink = tmp_path / "notify.jsonl"
    ctl.notifier = Notifier(files=[sink])
    with db.begin() as s:
        add_run(s, "e-last", T0 + 40 * DAY, {"4k-randread": [{"iops": 27_500.0}]}, submitted_by="schedule:nightly",
                notified=False, job_text=JOB.format(engine="psync", qd=1))
    ctl.notify()
    (body,) = [json.loads(line) for line in sink.read_text().splitlines()]
    assert body["regressions"] == [] and body["history"] == (
        f"the suite changed on {new[0]}: new series, history too short (4 runs, the detector needs 8)")
    assert old[0] != new[0]
