"""The canary's judgement (orchestrator.canary): synthetic histories judged (stable, a 25% drop, too short, a
rise), and on a real SQLite store the verdict as a health entry, the quarantine through orchestrator.runs.health
when the DUT's canary schedule asks for it, and the release."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from orchestrator import canary
from orchestrator.runs import health
from orchestrator.store.models import Device, Host, Run, Schedule
from tests.unit.test_compare import add_run, figures, make_store

CELL = ("4k-randread", "iops")
PATH = "/dev/loop9"


def series(n: int, mean: float = 100_000.0, sd_pct: float = 1.0, seed: int = 7) -> list[dict[tuple[str, str], float]]:
    rng = random.Random(seed)
    return [{CELL: rng.gauss(mean, mean * sd_pct / 100)} for _ in range(n)]


def test_a_stable_device_is_ok() -> None:
    v = canary.judge(series(12), {CELL: 101_000.0})
    assert v.state == "ok" and not v.flagged and v.history == 12
    assert v.detail.startswith("within its 12-run history; largest change 4k-randread iops +")


def test_a_25_percent_drop_is_flagged_with_its_figures() -> None:
    v = canary.judge(series(12), {CELL: 75_000.0, ("128k-seqread", "mb_s"): 3000.0})
    assert v.flagged and [(d.cell, d.metric) for d in v.drifts] == [CELL]
    d = v.drifts[0]
    assert -26 < d.change_pct < -24 and d.limit_pct == pytest.approx(5.0)   # the 5% floor: sd is 1%
    assert v.detail.startswith("drift against its 12-run history: 4k-randread iops -2")
    assert " -> 75,000; limit ±5.0%" in v.detail


def test_a_rise_drifts_too_and_a_noisy_history_widens_the_band() -> None:
    assert canary.judge(series(10), {CELL: 125_000.0}).flagged
    noisy = [{CELL: 100_000.0 * (1 + 0.06 * (-1) ** i)} for i in range(10)]   # sd 6.3%: the band is 19%
    assert canary.judge(noisy, {CELL: 88_000.0}).state == "ok"
    assert canary.judge(noisy, {CELL: 80_000.0}).flagged


def test_five_runs_are_too_short_and_never_flag() -> None:
    v = canary.judge(series(5), {CELL: 10.0})
    assert v.state == "too short" and not v.flagged and v.detail == "history too short (5 of 8)"
    assert canary.judge([], {CELL: 1.0}).detail == "history too short (0 of 8)"
    assert canary.judge(series(9), {}).state == "no figures"


def test_a_metric_missing_in_older_runs_is_judged_on_the_runs_that_have_it() -> None:
    hist = series(10)
    for h in hist[:4]:
        h[("4k-randread", "lat_mean_us")] = 100.0   # only 4 runs measured it: not judged
    v = canary.judge(hist, {CELL: 100_000.0, ("4k-randread", "lat_mean_us"): 500.0})
    assert v.state == "ok"


# --- on a store ------------------------------------------------------------------------------------

@pytest.fixture
def db(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    sessions = make_store(tmp_path / "store.sqlite")
    with sessions() as s:
        s.add(Host(name="h1", facts={}, health={}))
        s.add(Device(host="h1", name="dut0", path=PATH, kind="file", size_bytes=1 << 30, declared=True))
        s.commit()
    yield sessions


def canary_run(s: Session, rid: str, iops: float, at: float) -> Run:
    run = add_run(s, rid, [({"op_mode": "stock", "profile": "4k-randread"}, figures(iops))], suite="canary",
                  devices=(PATH,), at=at)
    run.ended_at = at + 30
    s.commit()
    return run


def history(s: Session, n: int) -> None:
    for i, v in enumerate(series(n)):
        canary_run(s, f"h{i:02d}", v[CELL], 1000.0 + 100 * i)


def test_a_drifted_canary_fails_its_health_entry_and_a_good_one_resets_it(db: sessionmaker[Session]) -> None:
    with db() as s:
        history(s, 10)
        v = canary.on_run_end(s, canary_run(s, "drop", 70_000.0, 5000.0), 6000.0)
        assert v is not None and v.flagged
        host = s.get(Host, "h1")
        assert host is not None
        entry = host.health[f"canary {PATH}"]
        assert entry["fails"] == 1 and entry["observed"] == "drop" and "-30." in entry["detail"]
        assert host.devices[0].quarantined_at is None            # no schedule asked for quarantine
        again = canary.on_run_end(s, canary_run(s, "drop2", 70_000.0, 5100.0), 6100.0)
        assert again is not None and again.flagged and host.health[f"canary {PATH}"]["fails"] == 2
        ok = canary.on_run_end(s, canary_run(s, "back", 100_000.0, 5200.0), 6200.0)
        assert ok is not None and ok.state == "ok" and host.health[f"canary {PATH}"]["fails"] == 0


def test_a_short_history_records_its_length(db: sessionmaker[Session]) -> None:
    with db() as s:
        history(s, 5)
        v = canary.on_run_end(s, canary_run(s, "new", 10.0, 5000.0), 6000.0)
        assert v is not None and v.detail == "history too short (5 of 8)"
        host = s.get(Host, "h1")
        assert host is not None and host.health[f"canary {PATH}"]["fails"] == 0


def test_only_like_runs_make_the_history(db: sessionmaker[Session]) -> None:
    with db() as s:
        history(s, 10)
        for r in s.query(Run).filter(Run.id.in_(["h00", "h01", "h02"])):
            r.runtime_override = 1                                   # another runtime: another history
        s.commit()
        v = canary.on_run_end(s, canary_run(s, "new", 100_000.0, 5000.0), 6000.0)
        assert v is not None and v.detail == "history too short (7 of 8)"
        assert canary.on_run_end(s, add_run(s, "demo1", [], suite="demo", devices=(PATH,)), 1.0) is None


def test_quarantine_flag_quarantines_through_the_health_path(db: sessionmaker[Session],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    with db() as s:
        s.add(Schedule(name=canary.schedule_name("h1", "dut0"), cron="0 3 * * *",
                       submit={"host": "h1", "devices": ["dut0"], "actor": canary.QUARANTINE_ACTOR},
                       next_fire_at=1e10, created_at=1.0))
        history(s, 10)
        run = canary_run(s, "drop", 74_000.0, 5000.0)
        canary.after_run_end(run, 6000.0)           # the controller's hook: the run's own session
        host = s.get(Host, "h1")
        assert host is not None
        dev = host.devices[0]
        assert dev.quarantined_at == 6000.0 and dev.quarantine_reason.startswith("canary of run drop drifted: ")
        assert health.unavailable(host, [PATH]) is not None                        # out of scheduling
        assert any("quarantined" in r.getMessage() for r in caplog.records)
        assert health.release(host, "dut0") == [PATH]
        assert dev.quarantined_at is None and f"canary {PATH}" not in host.health


def test_without_the_flag_nothing_is_quarantined(db: sessionmaker[Session]) -> None:
    with db() as s:
        s.add(Schedule(name="canary.h1.dut0", cron="0 3 * * *", submit={"host": "h1", "devices": ["dut0"]},
                       next_fire_at=1e10, created_at=1.0))
        history(s, 10)
        canary.after_run_end(canary_run(s, "drop", 60_000.0, 5000.0), 6000.0)
        host = s.get(Host, "h1")
        assert host is not None and host.devices[0].quarantined_at is None
        assert host.health[f"canary {PATH}"]["fails"] == 1


def test_labctl_and_the_web_api_add_a_canary_alike() -> None:
    """labctl keeps its own copy of the default cron (orchestrator.canary is not imported at its start)."""
    from orchestrator import canary
    from orchestrator.labctl import canary as labctl_canary

    assert labctl_canary.DEFAULT_CRON == canary.DEFAULT_CRON
