"""A run's cells against their history (orchestrator.runhistory) as the HTML report and the web run page mark
them: on a SQLite store, 11 nightly runs whose last one lost 30% IOPS in one cell, and a suite with 3 runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.htmlreport import build_html
from orchestrator.queries import run_detail
from orchestrator.runhistory import histories, run_history
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import ApiToken, Base
from orchestrator.tokens import new_token, token_hash
from orchestrator.web.app import create_app
from orchestrator.web.config import WebConfig
from tests.unit.test_compare import add_run, c4k, figures

NIGHTS = 11


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, sessionmaker[Session], Path]]:
    d = tmp_path_factory.mktemp("marks")
    url = f"sqlite:///{d / 'store.sqlite'}"
    engine = make_engine(url)
    Base.metadata.create_all(engine)
    db = sessions(engine)
    with db() as s:
        for i in range(NIGHTS):
            wobble = 1 + 0.01 * (i % 3 - 1)
            drop = 0.7 if i == NIGHTS - 1 else 1.0
            add_run(s, f"n{i:02d}", [(c4k(100), figures(100_000 * wobble * drop)), (c4k(0), figures(50_000 * wobble))],
                    suite="nightly", at=1000.0 + 100 * i)
        for i in range(3):
            add_run(s, f"new{i}", [(c4k(100), figures(100_000.0))], suite="fresh", at=5000.0 + i)
    yield url, db, d


def test_the_last_run_regressed_in_one_cell(store: tuple[str, sessionmaker[Session], Path]) -> None:
    _url, db, _d = store
    with db() as s:
        h = run_history(s, f"n{NIGHTS - 1:02d}")
        assert h is not None
        assert {(r.cell, r.metric) for r in h.regressions} == {("4K random read 100% 1T16Q (4k-random stock)", "iops"),
                                                               ("4K random read 100% 1T16Q (4k-random stock)", "mb_s")}
        assert h.summary() == f"2 regressions in 1 cell against a history of up to {NIGHTS} runs"
        d = run_detail(s, f"n{NIGHTS - 1:02d}")
        marks = h.step_marks((st.id, st.kind, st.cell) for st in d.steps)
        assert list(marks) == [d.steps[0].id] and "iops -30." in marks[d.steps[0].id]
        earlier = run_history(s, "n05")
        assert earlier is not None and not earlier.regressions
        assert earlier.summary().startswith(f"no regression against its {NIGHTS}-run history (6 series judged); "
                                            "noisiest series: at CoV ")
        assert earlier.summary().endswith("in one run cannot be told from noise")
        short = run_history(s, "new2")
        assert short is not None and short.summary() == "history too short: 3 runs (the detector needs 8)"
        assert run_history(s, "nosuch") is None


def test_the_html_report_has_an_against_history_section(store: tuple[str, sessionmaker[Session], Path]) -> None:
    _url, db, _d = store
    last = f"n{NIGHTS - 1:02d}"
    with db() as s:
        details = [run_detail(s, last)]
        report = build_html(details, history=histories(s, [last]), workers=1)
        plain = build_html(details, workers=1)
    figs = [f for f in report.figures if f.chart == "history"]
    assert [f.table.rows[0][:5] for f in figs] == [
        ["4K random read 100% 1T16Q (4k-random stock)", "IOPS", "100,000", "70,000", "-30.0%"],
        ["4K random read 100% 1T16Q (4k-random stock)", "MB/s", "410", "287", "-30.0%"]]
    assert all(f.svg.startswith("<svg") and f.points == NIGHTS for f in figs)
    assert 'id="section-history"' in report.html and "<th>against history</th>" in report.html
    assert "2 regressions in 1 cell against a history of up to 11 runs" in report.html
    assert "section-history" not in plain.html and "against history" not in plain.html   # nothing given


def test_the_run_page_marks_the_regressed_step(store: tuple[str, sessionmaker[Session], Path]) -> None:
    url, db, d = store
    token = new_token()
    with db.begin() as s:
        s.add(ApiToken(name="viewer-marks", role="viewer", token_sha256=token_hash(token), created_at=1.0))
    cfg = WebConfig(store_url=url, broker_url="redis://127.0.0.1:1/0", secret_file=d / "session.key",
                    cache_dir=d / "cache", artifact_dir=d / "artifacts", command_timeout_s=1)
    with TestClient(create_app(cfg, sessions=db)) as client:
        def page(rid: str) -> str:
            r = client.get(f"/runs/{rid}", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200, r.text
            return str(r.text)
        last = page(f"n{NIGHTS - 1:02d}")
        assert last.count('class="chip bad regressed"') == 1
        row = last.split(f'data-step="n{NIGHTS - 1:02d}-s000"')[1].split("</tr>")[0]
        assert "regressed" in row and "iops -30.0% (100,000 -&gt; 70,000), confidence" in row
        assert '<dd id="history"><span class="chip bad">regressed</span> 2 regressions in 1 cell' in last
        ok = page("n05")
        assert "regressed" not in ok and "no regression against its 11-run history" in ok
        assert "history too short: 3 runs" in page("new2")


def test_the_run_page_cache_keeps_a_history_for_its_ttl_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator import runhistory

    calls: list[str] = []
    monkeypatch.setattr(runhistory, "run_history", lambda s, rid: calls.append(rid) or None)
    now = [0.0]
    cache = runhistory.HistoryCache(ttl_s=30, max_entries=2, clock=lambda: now[0])
    for rid in ("a", "a", "b", "c"):
        cache.get(None, rid)  # type: ignore[arg-type]
    assert calls == ["a", "b", "c"]
    cache.get(None, "a")  # type: ignore[arg-type]       # "a" was the oldest of three: gone
    assert calls[-1] == "a"
    now[0] = 31.0
    cache.get(None, "c")  # type: ignore[arg-type]
    assert calls == ["a", "b", "c", "a", "c"]


def test_a_history_read_holds_the_guard_and_a_cached_one_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """The web run page reads a history in one of the service's bounded slots (history_slot): a full slot
    raises Busy and caches nothing; a cached history needs no slot."""
    from contextlib import contextmanager

    from labcontract.errors import Busy
    from orchestrator import runhistory

    monkeypatch.setattr(runhistory, "run_history", lambda s, rid: None)
    held: list[str] = []
    full = [True]

    @contextmanager
    def slot() -> Iterator[None]:
        if full[0]:
            raise Busy("history reads are running")
        held.append("slot")
        yield

    cache = runhistory.HistoryCache(ttl_s=30, clock=lambda: 0.0)
    with pytest.raises(Busy):
        cache.get(None, "a", guard=slot)  # type: ignore[arg-type]
    full[0] = False
    cache.get(None, "a", guard=slot)  # type: ignore[arg-type]
    full[0] = True
    cache.get(None, "a", guard=slot)  # type: ignore[arg-type]     # cached: no slot taken, no Busy
    assert held == ["slot"]
