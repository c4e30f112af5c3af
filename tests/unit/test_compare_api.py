"""``GET /api/compare`` (FastAPI's TestClient over a SQLite store): the JSON and CSV carry each run's mean over
the cell's repeats and the verdict against the first run, as ``labctl compare --format json|csv``."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import ApiToken, Base
from orchestrator.tokens import new_token, token_hash
from orchestrator.web.app import create_app
from orchestrator.web.config import WebConfig
from tests.unit.test_compare import add_run, c4k
from tests.unit.test_compare_significance import TEN_A, TEN_B, repeats


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    engine = make_engine(url)
    Base.metadata.create_all(engine)
    db = sessions(engine)
    token = new_token()
    with db() as s:
        add_run(s, "ra", repeats(c4k(100), TEN_A) + repeats(c4k(0), [1000.0]))
        add_run(s, "rb", repeats(c4k(100), TEN_B) + repeats(c4k(0), [1100.0]))
        s.add(ApiToken(name="viewer-unit", role="viewer", token_sha256=token_hash(token), created_at=1.0))
        s.commit()
    cfg = WebConfig(store_url=url, broker_url="redis://127.0.0.1:1/0", secret_file=tmp_path / "session.key",
                    cache_dir=tmp_path / "cache", artifact_dir=tmp_path / "artifacts", command_timeout_s=1)
    with TestClient(create_app(cfg, sessions=db)) as c:
        yield c, {"Authorization": f"Bearer {token}"}


def test_the_compare_endpoint_returns_means_and_verdicts(client: tuple[TestClient, dict[str, str]]) -> None:
    c, auth = client
    r = c.get("/api/compare", params=[("run", "ra"), ("run", "rb"), ("format", "json")], headers=auth)
    assert r.status_code == 200, r.text
    doc = r.json()
    gain, single = (cell["runs"][1] for cell in doc["cells"])
    assert gain["iops"] == pytest.approx(110_000.0) and gain["repeats"] == 5
    assert gain["verdicts"]["iops"]["verdict"] == "significant" and gain["verdicts"]["iops"]["p"] < 0.001
    assert gain["verdicts"]["iops"]["diff_ci_low_pct"] < 10 < gain["verdicts"]["iops"]["diff_ci_high_pct"]
    assert single["verdicts"]["iops"]["verdict"] == "cannot be judged" and single["vs_first_pct"]["iops"] == 10.0
    r = c.get("/api/compare", params=[("run", "ra"), ("run", "rb"), ("format", "csv")], headers=auth)
    assert r.status_code == 200, r.text
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [row["iops_verdict"] for row in rows] == ["", "significant", "", "cannot be judged"]


def test_the_compare_endpoint_takes_a_baseline_among_the_runs(client: tuple[TestClient, dict[str, str]]) -> None:
    """``baseline=RUN`` puts that run first (``labctl compare --baseline``, which ``--api`` sends it); one that is not
    compared is refused with the reason (422)."""
    c, auth = client
    r = c.get("/api/compare", params=[("run", "ra"), ("run", "rb"), ("baseline", "rb"), ("format", "json")],
              headers=auth)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert [run["id"] for run in doc["runs"]] == ["rb", "ra"]
    gain = doc["cells"][0]["runs"][1]
    assert gain["run"] == "ra" and gain["vs_first_pct"]["iops"] == pytest.approx(-100 / 11)
    r = c.get("/api/compare", params=[("run", "ra"), ("run", "rb"), ("baseline", "rb"), ("format", "table")],
              headers=auth)
    assert r.status_code == 200 and r.text.startswith("A: rb ") and "\nB: ra " in r.text, r.text[:300]
    r = c.get("/api/compare", params=[("run", "ra"), ("run", "rb"), ("baseline", "rc")], headers=auth)
    assert r.status_code == 422 and r.json()["detail"] == "baseline 'rc' is not one of the compared runs (ra, rb)"
    r = c.get("/api/compare", params=[("run", "ra"), ("run", "rb"), ("baseline", "x" * 65)], headers=auth)
    assert r.status_code == 422
