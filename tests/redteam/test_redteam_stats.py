"""Red team on repeats, summaries, compare, the run history's regressions, the canary and ``labctl analyze
changes`` (issue 16), on the controller with a real SQLite store (``tests.unit.conftest.env``), the web app in
process (FastAPI's TestClient, as tests/unit/test_history.py) and the pure functions.

Plain tests are attacks that were already refused (they document what was tried); the ``finding N`` tests assert
the SAFE behaviour of a hole the red team found and closed:

1. Acknowledge took any well-formed id from any lab:commands writer: regression_acks grew without bound (every
   history query reads it whole). Now bounded (MAX_ACKS), past it refused with the reason.
2. ``since=0001-01-01`` (API, labctl) raised ValueError: a 500 / a traceback. Now an InputError (422).
3. GET /api/regressions (a viewer) and the ack route (an engineer) each read the whole history (seconds at
   10,000 runs) on a server thread with no bound: a loop of parallel requests took every thread. Now at most
   MAX_READS at once and MAX_WAITING waiting, beyond Busy (429).
4. Submit.repeat took ``true`` and ``"3"`` as counts. Now a strict integer.
5. A stored figure that is Infinity/NaN (an agent's fio JSON) or 1e308 reached summarize(): InputError or
   OverflowError in run show, the report, the export's cells table and compare. Now it is no value (n < planned).
6. ``labctl analyze changes`` with 1e308 values: OverflowError in the detector. Now refused per row.
7. A canary run that judged nothing (another --runtime, an edited suite text, any suite named canary) reset the
   DUT's drift count to 0. Now only a canary judged ok clears it.
8. A network submission naming an initiator twice died in the controller on the store's unique step key (no
   reply, a dead letter); one naming more initiators than its suite made steps past the suite's cell_limit
   (times its repeat). Both are now refused with the reason (orchestrator.runs.netgroups.net_problems).
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

import tests.unit.test_history as th
import tests.unit.test_repeats as trep
from labcontract.errors import InputError, ProtocolError, SuiteError
from labcontract.protocol import (
    COMMANDS_STREAM,
    PROTOCOL_VERSION,
    WEB_COMMANDS_STREAM,
    Acknowledge,
    StepEnded,
    Submit,
    decode_command,
)
from labcontract.suite import parse_suite, repeat_problems
from orchestrator import canary
from orchestrator.controller import Controller, admin
from orchestrator.controller.commands import actor_of
from orchestrator.store.models import RegressionAck, Run
from tests.unit.conftest import env  # noqa: F401

HEX = "0123456789abcdef"


def _ids(n: int) -> list[str]:
    return [f"{i:012x}" for i in range(n)]


def _raw(kind: str, **fields: Any) -> str:
    return json.dumps({"v": PROTOCOL_VERSION, "type": kind, "reply_to": "-", **fields})


# ------------------------------------------------------------------ acknowledge


def test_finding1_acknowledgements_flood_is_bounded(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    ctl: Controller = env[0]
    db: sessionmaker[Session] = env[3]
    monkeypatch.setattr(admin, "MAX_ACKS", 5)
    replies = [ctl.acknowledge(Acknowledge(regression_id=rid, reply_to="-"), "labctl") for rid in _ids(8)]
    assert [r.ok for r in replies] == [True] * 5 + [False] * 3
    assert "5 regression acknowledgements are stored already" in replies[-1].errors[0]
    with db() as s:
        assert s.scalar(select(func.count()).select_from(RegressionAck)) == 5
    again = ctl.acknowledge(Acknowledge(regression_id=_ids(1)[0], reason="replay", reply_to="-"), "labctl")
    assert again.ok                                 # a replay of a stored one is no new row: still answered ok
    with db() as s:
        row = s.get(RegressionAck, _ids(1)[0])
        assert row is not None and row.reason == ""  # the first record is kept, the replay changes nothing
    ctl.handle_command(_raw("acknowledge", regression_id="f" * 12))    # through the intake: refused, no crash
    with db() as s:
        assert s.get(RegressionAck, "f" * 12) is None


def test_acknowledge_ids_and_reasons_are_bounded_and_the_actor_is_the_stream_s() -> None:
    for rid in ("ABCDEF012345", "a" * 13, "a" * 11, "../../etc/pa", "a" * 10_000, 123456789012):
        with pytest.raises(ProtocolError):
            decode_command(_raw("acknowledge", regression_id=rid))
    with pytest.raises(ProtocolError):
        decode_command(_raw("acknowledge", regression_id="a" * 12, reason="x" * 1025))
    spoof = Acknowledge(regression_id="a" * 12, actor="admin", reply_to="-")
    assert actor_of(spoof, COMMANDS_STREAM) == "labctl"         # a labctl user cannot name another actor
    assert actor_of(spoof, WEB_COMMANDS_STREAM) == "admin"       # only the web service (its broker user) can


# ------------------------------------------------------------------ the web API


def _client(env: Any, tmp_path: Path) -> tuple[Any, dict[str, str], dict[str, str]]:  # noqa: F811
    from fastapi.testclient import TestClient

    from orchestrator.store.models import ApiToken
    from orchestrator.tokens import new_token, token_hash
    from orchestrator.web.app import create_app
    from orchestrator.web.config import WebConfig

    db: sessionmaker[Session] = env[3]
    viewer, engineer = new_token(), new_token()
    with db.begin() as s:
        s.add(ApiToken(name="v", role="viewer", token_sha256=token_hash(viewer), created_at=th.T0))
        s.add(ApiToken(name="e", role="engineer", token_sha256=token_hash(engineer), created_at=th.T0))
    cfg = WebConfig(store_url=f"sqlite:///{tmp_path / 'store.sqlite'}", broker_url="redis://127.0.0.1:1/0",
                    secret_file=tmp_path / "session.key", cache_dir=tmp_path / "cache",
                    artifact_dir=tmp_path / "art", command_timeout_s=1)
    client = TestClient(create_app(cfg, sessions=db))
    return client, {"Authorization": f"Bearer {viewer}"}, {"Authorization": f"Bearer {engineer}"}


def test_finding2_a_since_at_the_ends_of_the_calendar_is_refused_not_a_500(env: Any, tmp_path: Path) -> None:  # noqa: F811
    from orchestrator.stats.history import parse_since

    for text in ("0001-01-01", "0001-01-01 00:00", "-1e308", "1e308s", "9" * 60 + "d", "nan", "inf"):
        with pytest.raises(InputError):
            parse_since(text, th.T0)
    assert parse_since("9999-12-31", th.T0) > th.T0
    th.store_history(env[3], th.noisy(12, 10_000) + th.noisy(12, 8_000, seed=8))
    client, viewer, _eng = _client(env, tmp_path)
    with client:
        for since in ("0001-01-01", "-1e308", "x" * 64):
            got = client.get("/api/regressions", params={"since": since}, headers=viewer)
            assert got.status_code == 422 and "since" in got.text, (since, got.status_code, got.text[:200])
        assert client.get("/api/regressions", params={"since": "x" * 10_000}, headers=viewer).status_code == 422
        assert client.get("/api/regressions", params={"host": "h" * 10_000}, headers=viewer).status_code == 422
        ok = client.get("/api/regressions", params={"since": "0001-01-01T00:00+00:00"}, headers=viewer)
        assert ok.status_code == 200 and len(ok.json()["regressions"]) == 1


def test_finding3_history_reads_are_bounded_and_answered_busy(env: Any, tmp_path: Path,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.web.api import regressions as api

    th.store_history(env[3], th.noisy(12, 10_000) + th.noisy(12, 8_000, seed=8))
    client, viewer, engineer = _client(env, tmp_path)
    monkeypatch.setattr(api, "WAIT_S", 0.05)
    held: list[threading.BoundedSemaphore] = []
    with client:
        (reg,) = client.get("/api/regressions", headers=viewer).json()["regressions"]
        try:
            for sem, n in ((api._reading, api.MAX_READS), (api._waiting, api.MAX_WAITING)):
                for _ in range(n):                  # the slots as a flood of parallel requests holds them
                    assert sem.acquire(blocking=False)
                    held.append(sem)
            busy = client.get("/api/regressions", headers=viewer)
            assert busy.status_code == 429 and busy.headers.get("Retry-After") == "5", busy.text
            assert client.post(f"/api/regressions/{reg['id']}/ack", json={}, headers=engineer).status_code == 429
            api._waiting.release()
            held.remove(api._waiting)
            late = client.get("/api/regressions", headers=viewer)   # waits WAIT_S for a slot, then Busy
            assert late.status_code == 429 and "history reads are running" in late.text
        finally:
            for sem in held:
                sem.release()
        assert client.get("/api/regressions", headers=viewer).status_code == 200      # the slots came back
        long_reason = client.post(f"/api/regressions/{reg['id']}/ack", json={"reason": "x" * 1025}, headers=engineer)
        assert long_reason.status_code == 422
        assert client.post("/api/regressions/" + "a" * 65 + "/ack", json={}, headers=engineer).status_code in (404, 422)
        assert client.post(f"/api/regressions/{reg['id']}/ack", json={}, headers=viewer).status_code == 403
        url = f"/api/regressions/{reg['id']}/ack"
        for body in ({"reason": 123}, {"reason": None, "extra": 1}, [], "ack", {"reason": ["x"]}):
            bad = client.post(url, json=body, headers=engineer)
            assert bad.status_code == 422 and "detail" in bad.json(), (body, bad.status_code, bad.text)
        for rid in ("g" * 12, reg["id"].upper()[:11] + "Z", "../" * 4, "%00" * 4):
            assert client.post(f"/api/regressions/{rid}/ack", json={}, headers=engineer).status_code in (404, 422), rid


# ------------------------------------------------------------------ repeats


def test_finding4_submit_repeat_is_a_strict_count() -> None:
    base = {"run_id": "-", "suite_source": "x", "suite_text": "x", "host": "h", "devices": ["/dev/x"]}
    for good in (1, 50, None):
        assert decode_command(_raw("submit", **base, repeat=good)).repeat == good    # type: ignore[union-attr]
    for bad in (51, 0, -1, "3", 3.0, True, 3.5, 1e308, "50"):
        with pytest.raises(ProtocolError):
            decode_command(_raw("submit", **base, repeat=bad))


def test_the_web_form_s_repeat_is_a_whole_number_in_bounds() -> None:
    from orchestrator.web.pages.submit import FIELDS, body_of

    for text, want in (("51", "less than or equal to 50"), ("-1", "greater than or equal to 1"),
                       ("true", "not a whole number"), ("3.0", "not a whole number"), ("x" * 5000, "not a whole")):
        form = dict.fromkeys(FIELDS, "") | {"suite": "demo", "host": "h1", "devices": "dut0", "repeat": text}
        body, problems = body_of(form)
        assert body is not None and body.repeat is None and len(problems) == 1 and want in str(problems[0])
        assert len(str(problems[0])) < 200                          # the echo of a long field is cut
    form = dict.fromkeys(FIELDS, "") | {"suite": "demo", "host": "h1", "devices": "dut0", "repeat": " 50 "}
    body, problems = body_of(form)
    assert body is not None and body.repeat == 50 and problems == []


def test_suite_repeat_at_its_bounds_and_times_cells_over_the_cell_limit() -> None:
    for bad in ("0", "-1", "51", "1e3", "null", "[3]"):
        with pytest.raises(SuiteError) as e:
            parse_suite(trep.SUITE.replace("repeat: 3", f"repeat: {bad}"), "s.yaml")
        assert [p.location for p in e.value.problems] == ["repeat"]
    assert parse_suite(trep.SUITE.replace("repeat: 3", "repeat: 50"), "s.yaml").repeat == 50
    big = ("suite: big\ncell_limit: 100\nrepeat: 50\nprofiles:\n"
           "  - {name: a, rw: randread, bs: 4k, sweep: {iodepth: [1, 2, 4]}}\n")
    with pytest.raises(SuiteError) as e:
        parse_suite(big, "big.yaml")
    assert "cell_limit" in str(e.value)
    once = parse_suite(big.replace("repeat: 50", "repeat: 1"), "big.yaml")
    assert [str(p) for p in repeat_problems(once, 50)] == [
        "--repeat: 50 repeats make 150 steps, over the suite's cell_limit of 100"]


def test_a_rerun_of_a_repeated_run_brings_back_only_the_failed_repeat(env: Any,  # noqa: F811
                                                                      fio_outputs: dict[str, bytes]) -> None:
    from labcontract.protocol import Rerun
    from orchestrator.queries import run_detail
    from orchestrator.stats.samples import run_samples
    from tests.unit.test_controller import SUITE, ended

    ctl, disp, _clock, db = env
    assert ctl.submit(Submit(run_id="r1", suite_source="two.yaml", suite_text=SUITE, host="h1", devices=("dut0",),
                             repeat=2, reply_to="-")).ok
    for i in range(4):
        ctl.schedule()
        start = disp.starts()[i]
        if i == 2:
            ctl.handle_event(StepEnded(host="h1", attempt_id=start.attempt_id, outcome="exited", exit_code=1))
        else:
            name = "8k-randrw" if "8k" in start.attempt_id or i % 2 else "4k-randread"
            ctl.handle_event(ended(start.attempt_id, fio_outputs[name]))
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None and run.state == "FAILED"
        before = [(st.name, st.cell.get("repeat"), st.state) for st in run.steps]
    assert [r for _n, r, _s in before] == [1, 1, 2, 2] and [x[2] for x in before].count("FAILED") == 1
    assert ctl.rerun(Rerun(run_id="r1", reply_to="-"), "labctl").ok
    with db() as s:
        run = s.get(Run, "r1")
        assert run is not None
        after = [(st.name, st.cell.get("repeat"), st.state) for st in run.steps]
    assert [(n, r) for n, r, _s in after] == [(n, r) for n, r, _s in before]       # the plan is unchanged
    assert [st for _n, _r, st in after] == ["SUCCEEDED", "SUCCEEDED", "PENDING", "SUCCEEDED"]
    ctl.schedule()
    again = disp.starts()[4]
    assert again.attempt_id.endswith("-a2")
    ctl.handle_event(ended(again.attempt_id, fio_outputs["4k-randread"]))
    ctl.schedule()
    with db() as s:
        d = run_detail(s, "r1")
        assert d.run.state == "SUCCEEDED"
        cells = list(run_samples(d).values())
    assert [(c.planned, c.n("iops")) for c in cells] == [(2, 2), (2, 2)]


def test_finding8_a_network_run_names_each_initiator_once_and_counts_them_against_the_cell_limit(
        env: Any) -> None:  # noqa: F811
    from labcontract.facts import NetPathDecl
    from tests.unit.test_network_suite import NET, _register

    ctl, _disp, _clock, db = env
    paths = (NetPathDecl(name="a", iface="eth1", peer="198.18.0.1"), NetPathDecl(name="b", iface="eth2",
                                                                                 peer="198.18.1.1"))
    for h in ("tgt", *(f"i{k}" for k in range(6))):
        _register(ctl, h, paths)
    text = NET + "cell_limit: 40\n"          # 8 cells: 16 steps with one initiator, 32 repeated twice

    def submit(rid: str, inis: tuple[str, ...], repeat: int | None = None) -> Any:
        return ctl.submit(Submit(run_id=rid, suite_source="net.yaml", suite_text=text, host="tgt", devices=(),
                                 initiators=inis, repeat=repeat, reply_to="-"))
    dup = submit("dup", ("i0", "i0"))         # was an IntegrityError in the controller (no reply, a dead letter)
    assert not dup.ok and dup.errors == ("--initiator: named more than once: i0",)
    many = submit("many", tuple(f"i{k}" for k in range(6)), repeat=2)    # was 112 steps past a cell_limit of 40
    assert not many.ok and many.errors == (
        "--initiator: 6 initiators make 112 steps, over the suite's cell_limit of 40",)
    assert submit("two", ("i0",), repeat=2).ok
    with db() as s:
        assert s.get(Run, "dup") is None and s.get(Run, "many") is None
        two = s.get(Run, "two")
        assert two is not None and len(two.steps) == 32


# ------------------------------------------------------------------ summaries and compare


def test_finding5_non_finite_or_huge_stored_figures_degrade_every_summary() -> None:
    from rich.console import Console

    from orchestrator.compare import as_csv, as_json, compare_details
    from orchestrator.comparetable import print_table as print_comparison
    from orchestrator.export.tables import cell_rows
    from orchestrator.report import repeats_table
    from orchestrator.stats.samples import run_samples, summary_rows

    bad = trep._run({1: [1000.0, math.inf, 900.0], 4: [math.nan, 1e308, 1e308], 8: [-5.0, 2.0, 3.0]})
    cells = list(run_samples(bad, with_op_mode=True).values())
    assert [(c.planned, c.n("iops")) for c in cells] == [(3, 2), (3, 0), (3, 3)]
    _heads, rows = summary_rows(bad)
    assert rows[0][2] == "950" and rows[1][2] == "-"        # the IOPS column: the finite repeats, or none
    table = repeats_table(bad)
    assert table is not None
    Console(width=120, record=True).print(table)
    exported = list(cell_rows(bad))
    assert all(r["mean"] is None or math.isfinite(float(r["mean"])) for r in exported)
    good = trep._run({1: [1000.0, 1100.0, 950.0], 4: [4000.0, 4100.0, 3900.0], 8: [10.0, 11.0, 12.0]})
    for pair in ((good, bad), (bad, good), (bad, bad)):
        c = compare_details(list(pair))
        json.loads(as_json(c))
        as_csv(c)
        print_comparison(Console(width=160, record=True), c)


def test_a_run_whose_cells_have_no_results_summarizes_to_dashes() -> None:
    from orchestrator.compare import as_json, compare_details
    from orchestrator.export.tables import cell_rows
    from orchestrator.stats.samples import summary_rows

    empty = trep._run({1: [None, None, None], 4: [None, None, None]})
    _heads, rows = summary_rows(empty)
    assert [r[1] for r in rows] == ["0/3", "0/3"] and set(rows[0][2:]) == {"-"}
    assert list(cell_rows(empty)) == []
    json.loads(as_json(compare_details([empty, trep._run({1: [1000.0, 1100.0, 900.0]})])))


def test_history_skips_absurd_stored_figures_and_old_runs_without_metrics(env: Any) -> None:  # noqa: F811
    from orchestrator.stats.history import find_regressions, load_series

    db: sessionmaker[Session] = env[3]
    values: list[float] = th.noisy(12, 10_000) + th.noisy(12, 8_000, seed=8)
    th.store_history(db, values)
    with db.begin() as s:       # absurd and missing figures in between: no point, never an OverflowError
        for i, v in enumerate((1e308, -1e308, None, 1e308)):
            th.add_run(s, f"x{i}", th.T0 + (30 + i) * th.DAY, {"4k-randread": [{"iops": v}]})
        th.add_run(s, "empty", th.T0 + 40 * th.DAY, {})
    with db() as s:
        (ser,) = load_series(s)
        assert len(ser.values) == 24 and max(ser.values) < 1e6
        regs, status = find_regressions(s)
    assert [r.run_id for r in regs] == ["r012"] and status.series == 1


# ------------------------------------------------------------------ analyze changes


def _csv(tmp_path: Path, body: str, name: str = "h.csv", bom: bool = False) -> Path:
    p = tmp_path / name
    p.write_bytes(("\ufeff" if bom else "").encode() + body.encode())
    return p


def test_finding6_analyze_changes_refuses_values_that_overflow_the_detector(tmp_path: Path) -> None:
    from orchestrator.stats.changes_csv import analyze_changes

    rows = "\n".join(["1e308"] * 10 + ["-1e308"] * 10)
    with pytest.raises(InputError) as e:
        analyze_changes(_csv(tmp_path, "value\n" + rows + "\n", bom=True))
    text = str(e.value)
    assert "row 1: out of range" in text and "... and 0 more" not in text


def test_analyze_changes_csv_boms_formulas_empty_column_and_size(tmp_path: Path) -> None:
    from orchestrator.stats.changes_csv import MAX_BYTES, analyze_changes

    ok = "\n".join(f"2026-01-{i + 1:02d},{v}" for i, v in enumerate([100.0] * 10 + [80.0] * 10))
    assert analyze_changes(_csv(tmp_path, "date,Value\n" + ok + "\n", bom=True)) == ["change at row 11: 100.0 -> 80.00"]
    with pytest.raises(InputError) as e:
        analyze_changes(_csv(tmp_path, "date,value\n" + "\n".join(["d,=1+1", "d,@SUM(A1)", "d,"] * 7) + "\n"))
    assert "not a number: '=1+1'" in str(e.value) and "no value" in str(e.value)
    with pytest.raises(InputError) as e:
        analyze_changes(_csv(tmp_path, "date,value\n" + "d,\n" * 20))
    assert "row 1: no value" in str(e.value)
    with pytest.raises(InputError) as e:
        analyze_changes(_csv(tmp_path, "value,value\n1,2\n"))
    assert "more than one 'value' column" in str(e.value)
    big = tmp_path / "big.csv"
    with open(big, "wb") as f:                  # sparse: refused on its size before a byte is read
        f.truncate(MAX_BYTES + 1)
    with pytest.raises(InputError) as e:
        analyze_changes(big)
    assert "larger than" in str(e.value)
    with pytest.raises(InputError) as e:
        analyze_changes(_csv(tmp_path, "value\n" + "\xff", name="bin.csv"))
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"value\n\xff\xfe\x00\n")
    with pytest.raises(InputError):
        analyze_changes(binary)


# ------------------------------------------------------------------ canary


def test_finding7_a_canary_that_judged_nothing_never_clears_a_drift() -> None:
    from orchestrator.store.models import Host

    host = Host(name="h1", facts={}, health={})
    drift = canary.Verdict("drift", 10, (canary.Drift("4k", "iops", 100.0, 1.0, 60.0, -40.0, 5.0),))
    canary.record(host, "/dev/x", drift, 1.0, "d1", False)
    assert host.health["canary /dev/x"]["fails"] == 1
    for unjudged in (canary.Verdict("too short", 0), canary.Verdict("no figures", 3)):
        canary.record(host, "/dev/x", unjudged, 2.0, "other", False)
        assert host.health["canary /dev/x"]["fails"] == 1 and host.health["canary /dev/x"]["observed"] == "d1"
    canary.record(host, "/dev/x", canary.Verdict("ok", 10), 3.0, "ok1", False)
    assert host.health["canary /dev/x"]["fails"] == 0


def test_canary_judgement_on_zero_iops_a_zero_history_and_absurd_figures() -> None:
    cell = ("4k-randread", "iops")
    hist = [{cell: 100_000.0 + i} for i in range(10)]
    zero = canary.judge(hist, {cell: 0.0})
    assert zero.flagged and zero.drifts[0].change_pct == pytest.approx(-100.0, abs=0.01)
    assert canary.judge([{cell: 0.0}] * 10, {cell: 5.0}).state == "too short"     # no relative limit on 0
    assert canary.judge(hist, {}).state == "no figures"
    assert "history too short" in canary.judge([], {cell: 1.0}).detail
    d = trep._run({1: [1e308, math.inf, 1000.0]})
    assert [v for (_cell, metric), v in canary.figures(d).items() if metric == "iops"] == [1000.0]


def test_a_canary_of_a_removed_device_or_a_failed_run_is_not_judged(tmp_path: Path) -> None:
    import tests.unit.test_canary as tc
    from orchestrator.store.models import Device, Host

    db = tc.make_store(tmp_path / "store.sqlite")
    with db() as s:
        s.add(Host(name="h1", facts={}, health={}))
        s.add(Device(host="h1", name="dut0", path=tc.PATH, kind="file", size_bytes=1 << 30, declared=True))
        s.commit()
        tc.history(s, 10)
        failed = tc.canary_run(s, "failed", 0.0, 5000.0)
        failed.state = "FAILED"
        assert canary.on_run_end(s, failed, 6000.0) is None                  # a failed canary says nothing
        s.delete(s.query(Device).one())
        s.commit()
        gone = tc.canary_run(s, "gone", 10.0, 5100.0)
        assert canary.on_run_end(s, gone, 6100.0) is None                    # its DUT was removed: no verdict
        canary.after_run_end(gone, 6100.0)                                    # the controller's hook: no raise
        host = s.get(Host, "h1")
        assert host is not None and f"canary {tc.PATH}" not in (host.health or {})
