"""The run page (issue 27 item 3) in process over a SQLite store: an enterprise-synthetic run that ended SUCCEEDED
with groups NOT steady and its durations scaled shows each group's verdict, its overrides and its warnings in the
words ``labctl run show`` prints them; a step that never ran shows no progress, one that stopped part-way where it
stopped; the Rerun button only once the run ended with a step to rerun. Then the live feed of a preconditioning
run: the round it plans appears as a new step at its place, the ETA and the round (k of at most N) of the running
group, and the commands the run's new state allows."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from rich.console import Console
from sqlalchemy.orm import Session, sessionmaker

from labcontract.suite import BUILTIN_DIR
from orchestrator.queries import run_detail
from orchestrator.report import print_run
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import ApiToken, Attempt, Base, PreconditionRecord, Run, Step
from orchestrator.tokens import new_token, token_hash
from orchestrator.web.app import create_app
from orchestrator.web.config import WebConfig
from orchestrator.web.live import RunPoller

T0 = 1_700_000_000.0
SUITE = (BUILTIN_DIR / "enterprise-synthetic.yaml").read_text()
CRIT = {"window": 5, "max_range_pct": 20.0, "max_excursion_pct": 10.0, "track": "iops", "max_rounds": 8,
        "round": 3, "numjobs": 1, "iodepth": 32}


def _wl(name: str, runtime: int) -> dict[str, Any]:
    return {"name": name, "rw": "randwrite", "bs": 4096, "numjobs": 1, "iodepth": 32, "runtime": runtime,
            "ramp_time": 0}


def _run(rid: str, state: str, **kw: Any) -> Run:
    return Run(id=rid, suite_name="enterprise-synthetic", suite_source="enterprise-synthetic", suite_text=SUITE,
               suite_sha256="0" * 64, host="h1", device="/dev/x", devices=["/dev/x"], state=state,
               submitted_at=T0, started_at=T0 + 1, **kw)


def _pc_step(rid: str, seq: int, rnd: int, state: str) -> Step:
    return Step(id=f"{rid}-s{seq:03d}-r{rnd:03d}", run_id=rid, seq=seq, round=rnd, kind="precondition",
                name=f"precondition.g{seq}.round{rnd}", job_text="", state=state,
                workload=_wl(f"precondition.g{seq}", 3),
                cell={"op_mode": "stock", "profile": f"g{seq}", "round": rnd})


def _record(rid: str, seq: int, rounds: int, steady: bool | None, verdict: str,
            max_rounds: int = 8) -> PreconditionRecord:
    return PreconditionRecord(run_id=rid, seq=seq, name=f"precondition.g{seq}",
                              criteria={**CRIT, "max_rounds": max_rounds},
                              rounds=[{"round": k + 1, "iops": 1000.0 + k} for k in range(rounds)], steady=steady,
                              reached_round=rounds if steady else None, verdict=verdict,
                              ended_at=None if steady is None else T0 + 100)


def seed_ended(s: Session) -> None:
    """An enterprise-synthetic run scaled by 0.05 and capped at 8 rounds that ended SUCCEEDED: group 0 steady at
    round 5, groups 1 and 2 NOT steady after 8 rounds; a measured step failed after 3 of its 10 s, two were
    cancelled without fio ever starting (one never dispatched, one dispatched)."""
    rid = "ent1"
    s.add(_run(rid, "SUCCEEDED", scale=0.05, max_rounds=8, ended_at=T0 + 500))
    s.flush()
    for seq, n, steady in ((0, 5, True), (1, 8, False), (2, 8, False)):
        for k in range(1, n + 1):
            s.add(_pc_step(rid, seq, k, "SUCCEEDED"))
        verdict = (f"steady at round {n}: window 1-5 range 3.1% ≤ 20%, excursion 1.2% ≤ 10% of mean 41,230" if steady
                   else f"not steady after {n} rounds (max_rounds 8): not steady after {n} rounds: last window 4-8 "
                        "range 31.0% > 20%, excursion 12.4% > 10% of mean 40,100")
        s.add(_record(rid, seq, n, steady, verdict))
    wl = _wl("m", 10)
    s.add(Step(id="ent1-m1", run_id=rid, seq=10, name="m1", kind="measure", job_text="", state="FAILED",
               workload=wl, reason="fio exited with code 1", cell={"op_mode": "stock", "profile": "p"}))
    s.add(Step(id="ent1-m2", run_id=rid, seq=11, name="m2", kind="measure", job_text="", state="CANCELLED",
               workload=wl, cell={"op_mode": "stock", "profile": "q"}))
    s.add(Step(id="ent1-m3", run_id=rid, seq=12, name="m3", kind="measure", job_text="", state="CANCELLED",
               workload=wl, cell={"op_mode": "stock", "profile": "r"}))
    s.flush()
    s.add(Attempt(id="ent1-m1-a1", step_id="ent1-m1", number=1, host="h1", device="/dev/x", state="FAILED",
                  timeout_s=60, started_at=T0 + 200, fio_started_at=T0 + 201, fio_ended_at=T0 + 204,
                  ended_at=T0 + 205))
    s.add(Attempt(id="ent1-m3-a1", step_id="ent1-m3", number=1, host="h1", device="/dev/x", state="CANCELLED",
                  timeout_s=60, started_at=T0 + 210, ended_at=T0 + 211))


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str],
                                                                    sessionmaker[Session]]]:
    d = tmp_path_factory.mktemp("runpage")
    url = f"sqlite:///{d / 'store.sqlite'}"
    engine = make_engine(url)
    Base.metadata.create_all(engine)
    db = sessions(engine)
    tokens = {role: new_token() for role in ("viewer", "engineer")}
    with db.begin() as s:
        seed_ended(s)
        for role, tok in tokens.items():
            s.add(ApiToken(name=f"{role}-unit", role=role, token_sha256=token_hash(tok), created_at=T0))
    cfg = WebConfig(store_url=url, broker_url="redis://127.0.0.1:1/0", secret_file=d / "session.key",
                    cache_dir=d / "cache", artifact_dir=d / "artifacts", command_timeout_s=1)
    with TestClient(create_app(cfg, sessions=db)) as client:
        yield client, tokens, db


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment))).strip()


def _labctl_show(db: sessionmaker[Session], rid: str) -> list[str]:
    console = Console(record=True, width=400, color_system=None)
    with db() as s:
        print_run(console, run_detail(s, rid))
    return console.export_text().splitlines()


def test_the_page_says_what_labctl_run_show_says(app: Any) -> None:
    client, tokens, db = app
    page = client.get("/runs/ent1", headers={"Authorization": f"Bearer {tokens['engineer']}"})
    assert page.status_code == 200, page.text[:500]
    shown = _labctl_show(db, "ent1")
    lines = [ln for ln in shown if ln.startswith("precondition ")]
    assert len(lines) == 3 and sum("NOT steady" in ln for ln in lines) == 2, shown
    verdicts = [_text(m) for m in re.findall(r'<span class="pc-line">(.*?)</span>', page.text, flags=re.S)]
    assert verdicts == lines, (verdicts, lines)
    assert "precondition 4K random write 100% 1T32Q (g1): NOT steady, 8 round(s): not steady after 8 rounds " \
           "(max_rounds 8)" in lines[1]
    # the warnings, as labctl prints them
    warnings = [ln for ln in shown if ln.startswith("WARNING: ")]
    assert warnings and any("durations scaled by 0.05" in w for w in warnings), shown
    listed = [_text(m) for m in re.findall(r'<li class="notice">(.*?)</li>', page.text, flags=re.S)]
    assert listed == warnings
    # the overrides it was submitted with, as labctl's Run section lists them
    over = _text(re.search(r'<dd id="overrides">(.*?)</dd>', page.text, flags=re.S).group(1))  # type: ignore[union-attr]
    assert "scale x0.05" in over and "max rounds 8 (suite says" in over, over
    assert any(re.match(r"\s+scale\s+x0\.05$", ln) for ln in shown)
    assert any(re.match(r"\s+max rounds\s+8 \(suite says \d+\)$", ln) for ln in shown), shown
    # honest progress: the failed step stopped at 3 s of 10, the cancelled ones never ran
    widths = dict(re.findall(r'<tr data-step="([^"]+)".*?class="fill" style="width: ([\d.]+)%', page.text,
                             flags=re.S))
    assert (widths["ent1-m1"], widths["ent1-m2"], widths["ent1-m3"]) == ("30.0", "0.0", "0.0"), widths
    assert widths["ent1-s000-r001"] == "100.0"
    # an ended run with a failed step: Rerun; no cancel, no pause
    commands = page.text.split('id="commands"', 1)[1].split("<template", 1)[0]
    assert 'id="rerun"' in commands and 'id="cancel"' not in commands and 'id="pause"' not in commands
    api = client.get("/api/runs/ent1", headers={"Authorization": f"Bearer {tokens['viewer']}"}).json()
    assert {st["id"]: st["progress"] for st in api["steps"]}["ent1-m1"] == 0.3


def test_the_live_feed_plans_rounds_eta_and_commands(app: Any) -> None:
    _client, _tokens, db = app
    now = time.time()
    rid = "pc2"
    with db.begin() as s:
        s.add(_run(rid, "RUNNING", max_rounds=4))
        s.flush()
        s.add(_pc_step(rid, 0, 1, "SUCCEEDED"))
        s.add(_pc_step(rid, 0, 2, "RUNNING"))
        s.add(Step(id="pc2-m1", run_id=rid, seq=1, name="m1", kind="measure", job_text="", state="PENDING",
                   workload=_wl("m1", 20)))
        s.add(_record(rid, 0, 1, None, "not steady after 1 round: a window needs 5 rounds", 4))
        s.flush()
        s.add(Attempt(id="pc2-r2-a1", step_id="pc2-s000-r002", number=1, host="h1", device="/dev/x",
                      state="RUNNING", timeout_s=60, fio_started_at=now - 1))
    poll = RunPoller(db, None, rid)
    (ev,) = poll()
    st = ev.data
    assert st["actions"] == ["cancel", "pause"]
    (g,) = st["preconditioning"]
    assert (g["running"], g["max_rounds"], g["rounds"], g["state"]) == (2, 4, 1, "running"), g
    assert "a window needs 5 rounds" in g["line"]
    eta = st["eta"]
    # round 2 (3 s, 1 s in) and the measured 20 s are planned; rounds 3 and 4 may still come (3 s each)
    assert 20 < eta["eta_s"] < 23 and eta["eta_max_s"] == pytest.approx(eta["eta_s"] + 6, abs=0.2), eta
    assert "left" in eta["text"] and "up to" in eta["text"]
    # round 2 ends, round 3 is planned: the new step, at its place (before the measured step)
    with db.begin() as s:
        r2 = s.get(Step, "pc2-s000-r002")
        assert r2 is not None
        r2.state = "SUCCEEDED"
        s.add(_pc_step(rid, 0, 3, "PENDING"))
        rec = s.query(PreconditionRecord).filter_by(run_id=rid).one()
        rec.rounds = [*rec.rounds, {"round": 2, "iops": 1001.0}]
        rec.verdict = "not steady after 2 rounds: a window needs 5 rounds"
    (ev,) = poll()
    new = {x["id"]: x for x in ev.data["steps"]}
    assert new["pc2-s000-r003"]["index"] == 2 and new["pc2-s000-r003"]["state"] == "PENDING", ev.data
    assert ev.data["preconditioning"][0]["rounds"] == 2 and ev.data["preconditioning"][0]["running"] is None
    # the run is paused, then cancelled: resume, then rerun, without a reload
    with db.begin() as s:
        run = s.get(Run, rid)
        assert run is not None
        run.state = "PAUSED"
    assert poll()[0].data["actions"] == ["cancel", "resume"]
    with db.begin() as s:
        run = s.get(Run, rid)
        assert run is not None
        run.state = "CANCELLED"
        for sid in ("pc2-s000-r003", "pc2-m1"):
            step = s.get(Step, sid)
            assert step is not None
            step.state = "CANCELLED"
    evs = poll()
    assert [e.name for e in evs] == ["status", "end"]
    assert evs[0].data["actions"] == ["rerun"] and evs[1].data["actions"] == ["rerun"]
    progress = {x["id"]: x["progress"] for x in evs[0].snapshot.data["steps"]} if evs[0].snapshot else {}
    assert progress and progress["pc2-m1"] == 0.0 and progress["pc2-s000-r003"] == 0.0, progress


def test_a_failed_step_shows_where_it_stopped_in_the_feed(app: Any) -> None:
    _client, _tokens, db = app
    (ev, _end) = RunPoller(db, None, "ent1")()
    progress = {x["id"]: x["progress"] for x in ev.data["steps"]}
    assert (progress["ent1-m1"], progress["ent1-m2"], progress["ent1-m3"]) == (0.3, 0.0, 0.0), progress
    assert ev.data["eta"] == {"eta_s": 0.0, "eta_max_s": 0.0, "text": "nothing left to run"}
    assert [g["state"] for g in ev.data["preconditioning"]] == ["steady", "NOT steady", "NOT steady"]


def test_override_rows_name_repeat_and_max_rounds(tmp_path: Path) -> None:
    from orchestrator.runfacts import overridden, override_rows

    run = _run("x", "SUCCEEDED", scale=0.5, max_rounds=3)
    run.steps = [Step(id=f"x-{k}", seq=k, name=f"m.rep{k}", kind="measure", job_text="", state="SUCCEEDED",
                      cell={"profile": "p", "repeat": k}) for k in (1, 2, 3)]
    rows = dict(override_rows(run))
    assert rows["repeat"] == "3 per cell (suite says 1)" and rows["scale"] == "x0.5"
    assert rows["max rounds"].startswith("3 (suite says ")
    assert [k for k, _ in overridden(override_rows(run))] == ["scale", "max rounds", "repeat"]


def test_step_progress_is_honest() -> None:
    from orchestrator.web.runview import step_progress

    wl = _wl("m", 10)
    assert step_progress("SUCCEEDED", wl, None, None, T0) == 1.0
    assert step_progress("CANCELLED", wl, None, T0, T0) == 0.0              # never ran
    assert step_progress("FAILED", wl, T0, T0 + 4, T0 + 60) == 0.4          # stopped at 4 s of 10
    assert step_progress("FAILED", wl, T0, T0 + 40, T0 + 60) == 0.99        # overran, still not done
    assert step_progress("PENDING", wl, T0, T0 + 4, T0 + 60) == 0.0         # set back by a rerun: not run yet
    assert step_progress("RUNNING", wl, T0, None, T0 + 5) == 0.5
    assert step_progress("RUNNING", wl, T0, None, T0 + 5, (2.0, 8.0)) == 0.25   # the agent's own figures first
    assert step_progress("RUNNING", wl, T0, None, T0 + 50) == 0.99


def test_an_imported_run_names_its_lab(app: Any) -> None:
    client, tokens, db = app
    headers = {"Authorization": f"Bearer {tokens['viewer']}"}
    assert 'id="run-lab"' not in client.get("/runs/ent1", headers=headers).text     # this lab's run
    with db.begin() as s:
        s.get(Run, "ent1").lab = "site-b"  # type: ignore[union-attr]
    try:
        page = client.get("/runs/ent1", headers=headers).text
        lab = re.search(r'<dd id="run-lab">(.*?)</dd>', page, flags=re.S)
        assert lab and _text(lab.group(1)).startswith("site-b (imported"), page[:2000]
    finally:
        with db.begin() as s:
            s.get(Run, "ent1").lab = ""  # type: ignore[union-attr]
