"""The JSON API in process (FastAPI's TestClient) over a synthetic SQLite store: the run list's filters and
keyset pagination over many runs, exact ids and 404s, artifact containment, the role of every operation, the
queue. Commands need the controller: the integration test (tests/integration/test_web_api.py) sends them."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import ApiToken, Artifact, Attempt, Base, Device, Host, Run, Step
from orchestrator.tokens import new_token, token_hash
from orchestrator.web.api.common import ROLE_KEY
from orchestrator.web.app import create_app
from orchestrator.web.config import WebConfig
from orchestrator.web.queries import decode_cursor, encode_cursor

ROLES = ("viewer", "engineer", "admin")
N_RUNS = 250
T0 = 1_700_000_000.0


STORE: dict[str, sessionmaker[Session]] = {}      # the module's store, for a test that writes a heartbeat


def seed(db: sessionmaker[Session], artifacts: Path) -> None:
    with db.begin() as s:
        for host, model, fw in (("h1", "FAST-SSD", "1.0"), ("h2", "SLOW-HDD", "2.0")):
            h = Host(name=host, facts={}, health={f"agent {host}": {"fails": 0, "detail": "ok", "at": T0}},
                     last_seen=time.time())
            h.devices = [Device(name="dut0", path=f"/dev/{host}d0", kind="block", size_bytes=1 << 30, model=model,
                                firmware=fw)]
            s.add(h)
        for i in range(N_RUNS):
            host = "h1" if i % 2 == 0 else "h2"
            # every tenth pair shares a submission time: the cursor must order ties by id
            r = Run(id=f"r{i:04d}", suite_name="quick" if i % 3 else "demo", suite_source="x", suite_text="x",
                    suite_sha256="0" * 64, host=host, device=f"/dev/{host}d0", devices=[f"/dev/{host}d0"],
                    state="SUCCEEDED" if i % 5 else "FAILED", submitted_at=T0 + (i // 2 if i % 10 < 2 else i),
                    ended_at=T0 + i + 5, submitted_by=f"token:t{i % 4}")
            r.steps = [Step(id=f"r{i:04d}-s{k}", seq=k, name=f"s{k}", kind="measure", job_text="",
                            cell={"op_mode": "stock" if i % 4 else "hp", "profile": f"p{k}"},
                            state="SUCCEEDED" if k < 2 else "PENDING") for k in range(3)]
            s.add(r)
        s.flush()
        att = Attempt(id="r0000-s0-a1", step_id="r0000-s0", number=1, host="h1", device="/dev/h1d0",
                      state="SUCCEEDED", timeout_s=60)
        s.add(att)
        (artifacts / "r0000").mkdir(parents=True)
        (artifacts / "r0000" / "fio.json").write_bytes(b'{"ok": 1}\n')
        (artifacts.parent / "secret.txt").write_text("not yours")
        s.add(Artifact(id=1, attempt_id=att.id, name="fio.json", path="r0000/fio.json",
                       sha256=hashlib.sha256(b'{"ok": 1}\n').hexdigest(), size=10))
        s.add(Artifact(id=2, attempt_id=att.id, name="escape", path="../secret.txt", sha256="", size=9))


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str]]]:
    d = tmp_path_factory.mktemp("webapi")
    url = f"sqlite:///{d / 'store.sqlite'}"
    engine = make_engine(url)
    Base.metadata.create_all(engine)
    db = sessions(engine)
    seed(db, d / "artifacts")
    STORE["db"] = db
    tokens = {role: new_token() for role in ROLES}
    with db.begin() as s:
        for role, tok in tokens.items():
            s.add(ApiToken(name=f"{role}-unit", role=role, token_sha256=token_hash(tok), created_at=T0))
    cfg = WebConfig(store_url=url, broker_url="redis://127.0.0.1:1/0", secret_file=d / "session.key",
                    cache_dir=d / "cache", artifact_dir=d / "artifacts", command_timeout_s=1)
    with TestClient(create_app(cfg, sessions=db)) as client:
        yield client, tokens


def _get(api: tuple[TestClient, dict[str, str]], path: str, role: str = "viewer", **params: Any) -> Any:
    client, tokens = api
    r = client.get(path, params=params, headers={"Authorization": f"Bearer {tokens[role]}"})
    assert r.status_code == 200, r.text
    return r.json()


def test_every_api_operation_documents_the_role_it_enforces(api: tuple[TestClient, dict[str, str]]) -> None:
    import importlib

    from fastapi.routing import APIRoute

    from orchestrator.web import api as api_pkg

    client, _ = api
    spec = client.app.openapi()       # type: ignore[attr-defined]
    enforced: dict[tuple[str, str], str] = {}
    routes = [r for name in api_pkg.ROUTERS.values() for r in importlib.import_module(name).router.routes]
    for r in routes:
        if isinstance(r, APIRoute) and r.path.startswith("/api/"):
            names = [d.call.__name__ for d in r.dependant.dependencies if d.call is not None]
            roles = [n.removeprefix("require_") for n in names if n.startswith("require_")]
            assert len(roles) == 1, (r.path, names)
            for m in r.methods or ():
                enforced[(m, r.path)] = roles[0]
    documented = {(m.upper(), p): op.get(ROLE_KEY) for p, ops in spec["paths"].items() if p.startswith("/api/")
                  for m, op in ops.items()}
    assert documented == enforced


def test_cursor_round_trip_and_forgeries() -> None:
    assert decode_cursor(encode_cursor(T0 + 0.125, "r0001")) == (T0 + 0.125, "r0001")
    from labcontract.errors import InputError

    for bad in ("", "!!!", "x" * 200, encode_cursor(1.0, "../etc").replace("=", ""), "bmFufHIx"):
        with pytest.raises(InputError):
            decode_cursor(bad)


def test_pagination_walks_every_run_once_newest_first(api: tuple[TestClient, dict[str, str]]) -> None:
    seen: list[dict[str, Any]] = []
    cursor = None
    for _ in range(N_RUNS + 2):
        page = _get(api, "/api/runs", limit=37, **({"before": cursor} if cursor else {}))
        seen += page["runs"]
        cursor = page["next"]
        if cursor is None:
            break
    assert len(seen) == N_RUNS and len({r["id"] for r in seen}) == N_RUNS
    keys = [(r["submitted_at"], r["id"]) for r in seen]
    assert keys == sorted(keys, reverse=True)
    assert {(r["steps_done"], r["steps_total"]) for r in seen} == {(2, 3)}
    one = _get(api, "/api/runs", limit=1)
    assert len(one["runs"]) == 1 and one["next"] and one["runs"][0]["id"] == seen[0]["id"]
    second = _get(api, "/api/runs", limit=1, before=one["next"])
    assert second["runs"][0]["id"] == seen[1]["id"]


@pytest.mark.parametrize(("params", "check"), [
    ({"host": "h1"}, lambda r: r["host"] == "h1"),
    ({"model": "SLOW-HDD"}, lambda r: r["host"] == "h2"),
    ({"firmware": "1.0"}, lambda r: r["host"] == "h1"),
    ({"state": "FAILED"}, lambda r: r["state"] == "FAILED"),
    ({"suite": "demo"}, lambda r: r["suite"] == "demo"),
    ({"op_mode": "hp"}, lambda r: int(r["id"][1:]) % 4 == 0),
    ({"since": T0 + 100, "until": T0 + 120}, lambda r: T0 + 100 <= r["submitted_at"] < T0 + 120),
    ({"model": "SLOW-HDD", "state": "FAILED"}, lambda r: r["host"] == "h2" and r["state"] == "FAILED"),
])
def test_filters(api: tuple[TestClient, dict[str, str]], params: dict[str, Any], check: Any) -> None:
    runs = _get(api, "/api/runs", limit=200, **params)["runs"]
    assert runs and all(check(r) for r in runs)
    everything = _get(api, "/api/runs", limit=200)["runs"] + _get(
        api, "/api/runs", limit=200, before=_get(api, "/api/runs", limit=200)["next"])["runs"]
    expected = [r["id"] for r in everything if check(r)]
    assert expected[:200] == [r["id"] for r in runs]


def test_unknown_and_malformed_ids_are_404(api: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = api
    h = {"Authorization": f"Bearer {tokens['viewer']}"}
    for path in ("/api/runs/r9999", "/api/runs/r000", "/api/runs/..%2f..", "/api/runs/r0000%00x/results",
                 "/api/runs/-x/report", "/api/artifacts/999", "/api/artifacts/2",
                 "/api/runs/r0000/series?step=r0001-s0"):
        r = client.get(path, headers=h)
        assert r.status_code == 404, (path, r.status_code, r.text)
        assert r.json()["detail"]


def test_run_detail_and_artifact_download(api: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = api
    run = _get(api, "/api/runs/r0000")
    assert [st["name"] for st in run["steps"]] == ["s0", "s1", "s2"]
    assert run["steps"][0]["attempts"][0]["id"] == "r0000-s0-a1"
    arts = _get(api, "/api/runs/r0000/artifacts")
    assert [a["name"] for a in arts] == ["escape", "fio.json"]
    r = client.get("/api/artifacts/1", headers={"Authorization": f"Bearer {tokens['viewer']}"})
    assert r.status_code == 200 and r.content == b'{"ok": 1}\n'
    assert r.headers["x-content-sha256"] == hashlib.sha256(r.content).hexdigest()
    assert r.headers["etag"].strip('"') == r.headers["x-content-sha256"]


def test_roles_and_missing_tokens(api: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = api
    r = client.get("/api/runs")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert client.get("/api/runs", headers={"Authorization": "Bearer slab_nope"}).status_code == 401
    assert client.get("/api/tokens", headers={"Authorization": f"Bearer {tokens['engineer']}"}).status_code == 403
    r = client.post("/api/runs/r0000/cancel", headers={"Authorization": f"Bearer {tokens['viewer']}"})
    assert r.status_code == 403
    toks = _get(api, "/api/tokens", role="admin")
    assert {t["name"] for t in toks} >= {"viewer-unit", "admin-unit"} and "token" not in toks[0]


def test_broker_down_is_503_with_a_reason(api: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = api
    r = client.post("/api/runs/r0001/pause", json={}, headers={"Authorization": f"Bearer {tokens['engineer']}"})
    assert r.status_code == 503 and "broker" in r.json()["detail"]


def test_invalid_suite_lists_every_problem(api: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = api
    body = {"suite_yaml": "suite: bad\nprofiles:\n  - {name: a, rw: nope, bs: 4k}\n  - {name: b, rw: read, "
                          "bs: -1}\n  - {name: c, rw: read, bs: 4k, iodepth: 0}\n",
            "host": "nohost", "devices": ["dut9"]}
    r = client.post("/api/runs", json=body, headers={"Authorization": f"Bearer {tokens['engineer']}"})
    assert r.status_code == 422, r.text
    wheres = " ".join(e["where"] + " " + e["problem"] for e in r.json()["errors"])
    assert "profiles[0]" in wheres and "profiles[1]" in wheres and "profiles[2]" in wheres
    assert "nohost" in wheres
    r = client.post("/api/runs", json={"suite": "../../etc/passwd", "host": "h1", "devices": ["dut0"]},
                    headers={"Authorization": f"Bearer {tokens['engineer']}"})
    assert r.status_code == 422 and "no built-in suite" in r.text


def test_queue_and_hosts(api: tuple[TestClient, dict[str, str]]) -> None:
    with STORE["db"].begin() as s:        # h1 heartbeats now (its seeded one may be older than the timeout by now)
        h1 = s.get(Host, "h1")
        assert h1 is not None
        h1.last_seen = time.time()
    hosts = _get(api, "/api/hosts")
    assert [h["name"] for h in hosts] == ["h1", "h2"] and hosts[0]["state"] == "up"
    assert hosts[0]["devices"][0]["model"] == "FAST-SSD" and hosts[0]["health"][0]["check"] == "agent"
    assert _get(api, "/api/queue") == []
    assert _get(api, "/api/suites")


def test_report_is_drawn_in_a_subprocess_and_cached_once_ended(api: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = api
    h = {"Authorization": f"Bearer {tokens['viewer']}"}
    r = client.get("/api/runs/r0002/report", headers=h)
    assert r.status_code == 200, r.text
    assert "<html" in r.text.lower() and "r0002" in r.text
    cache = client.app.state.web.cfg.cache_dir          # type: ignore[attr-defined]
    cached = list(cache.glob("report-*.html"))
    assert len(cached) == 1 and cached[0].read_text(encoding="utf-8") == r.text
    assert not list(cache.glob(".report-*"))            # no temporary file left behind
    assert client.get("/api/runs/r0002/report", headers=h).text == r.text


def test_compare_formats(api: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = api
    h = {"Authorization": f"Bearer {tokens['viewer']}"}
    r = client.get("/api/compare", params=[("run", "r0002"), ("run", "r0004"), ("format", "json")], headers=h)
    assert r.status_code in (200, 422), r.text          # synthetic runs hold no results: no cell in common
    r = client.get("/api/compare", params=[("run", "r0002"), ("run", "r0002")], headers=h)
    assert r.status_code == 422
    r = client.get("/api/compare", params=[("run", "r0002")], headers=h)
    assert r.status_code == 422


def test_bodies_over_the_limit_are_413_declared_or_chunked(api: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = api
    h = {"Authorization": f"Bearer {tokens['engineer']}", "Content-Type": "application/json"}
    limit = client.app.state.web.cfg.max_body_bytes       # type: ignore[attr-defined]
    assert client.post("/api/runs", content=b"x" * (limit + 1), headers=h).status_code == 413

    def chunks() -> Iterator[bytes]:
        for _ in range(limit // 65536 + 2):
            yield b"x" * 65536
    r = client.post("/api/runs", content=chunks(), headers=h)
    assert r.status_code == 413, r.text
    small = client.post("/api/runs", content=iter([b'{"suite": ', b'"nope"}']), headers=h)
    assert small.status_code == 422 and "no built-in suite" in small.text      # a chunked body under the limit


def test_canaries_listed_and_their_duts_resolved(api: tuple[TestClient, dict[str, str]]) -> None:
    """GET /api/canaries: each canary schedule with its quarantine flag and its DUT's last verdict; GET
    /api/canaries/dut: a DUT by name or path and its canary's name, or every problem (labctl's own, 422); POST
    /api/canaries refuses an unknown DUT before anything is sent (no broker here)."""
    from orchestrator.canary import QUARANTINE_ACTOR
    from orchestrator.store.models import Schedule

    client, tokens = api
    with STORE["db"].begin() as s:
        s.add(Schedule(name="canary.h1.dut0", cron="0 3 * * *", submit={"host": "h1", "devices": ["dut0"],
                                                                        "actor": QUARANTINE_ACTOR},
                       next_fire_at=T0, created_at=T0))
        h1 = s.get(Host, "h1")
        assert h1 is not None
        h1.health = {**h1.health, "canary /dev/h1d0": {"fails": 2, "detail": "drift against its 8-run history"}}
    try:
        rows = _get(api, "/api/canaries")
        assert [(r["name"], r["quarantine"], r["verdict"]) for r in rows] == [
            ("canary.h1.dut0", True, "DRIFT x2: drift against its 8-run history")]
        got = _get(api, "/api/canaries/dut", host="h1", device="/dev/h1d0")
        assert got == {"host": "h1", "device": "dut0", "path": "/dev/h1d0", "name": "canary.h1.dut0"}
        viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
        r = client.get("/api/canaries/dut", params={"host": "h1", "device": "dut9"}, headers=viewer)
        assert r.status_code == 422 and "'dut9' is not a declared DUT of host h1" in r.json()["errors"][0]["problem"]
        r = client.get("/api/canaries/dut", params={"host": "nohost", "device": "dut0"}, headers=viewer)
        assert r.status_code == 422 and "unknown host 'nohost'" in r.json()["errors"][0]["problem"]
        r = client.get("/api/canaries/dut", params={"host": "h1", "device": "d\x00"}, headers=viewer)
        assert r.status_code == 422
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        r = client.post("/api/canaries", json={"host": "h1", "device": "dut9"}, headers=admin)
        assert r.status_code == 422 and "'dut9' is not a declared DUT" in r.text
        for body in ({"host": "h1", "device": "dut0", "priority": 10**7}, {"host": "h1", "device": "dut0",
                                                                         "quarantine": "yes"},
                     {"host": "h1", "device": "dut0", "actor": "token:admin"}, {"host": "h1", "device": "x" * 513}):
            assert client.post("/api/canaries", json=body, headers=admin).status_code == 422, body
        r = client.post("/api/canaries", json={"host": "h1", "device": "dut0"},
                        headers={"Authorization": f"Bearer {tokens['engineer']}"})
        assert r.status_code == 403
    finally:
        with STORE["db"].begin() as s:
            sch, h1 = s.get(Schedule, "canary.h1.dut0"), s.get(Host, "h1")
            if sch is not None:
                s.delete(sch)
            if h1 is not None:
                h1.health = {k: v for k, v in h1.health.items() if not k.startswith("canary ")}
