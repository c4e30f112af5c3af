"""The JSON API of the web service over a real lab (redis, controller, agent, loop DUTs, the service as a
process of its own): who may call what (every operation of /openapi.json), generated input never making it
fail (hypothesis, from the OpenAPI schema), bad input, a run submitted, followed, changed and read through the
API, and the controller stopped (503 with its reason, never a hang)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.labs.lab import wait_for
from tests.conftest import one_workload
from tests.pg import PgServer, pg_server  # noqa: F401
from tests.webfix import ROLES, WebHandle, web  # noqa: F401

# the roles of the spec (/tmp/web-spec.md "API routes"): an operation of the service not listed here fails
EXPECTED_ROLES: dict[tuple[str, str], str] = {
    **{("GET", p): "viewer" for p in (
        "/api/whoami", "/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/results", "/api/runs/{run_id}/devices",
        "/api/runs/{run_id}/paths", "/api/runs/{run_id}/series", "/api/runs/{run_id}/artifacts",
        "/api/artifacts/{artifact_id}", "/api/runs/{run_id}/report", "/api/report", "/api/compare",
        "/api/runs/{run_id}/export",
        "/api/runs/{run_id}/live", "/api/hosts", "/api/queue", "/api/schedules", "/api/suites",
        "/api/regressions", "/api/runs/{run_id}/show", "/api/runs/{run_id}/watch", "/api/hosts/show",
        "/api/canaries", "/api/canaries/dut", "/api/notifications", "/api/reference")},
    **{("POST", p): "engineer" for p in (
        "/api/runs", "/api/runs/{run_id}/cancel", "/api/runs/{run_id}/pause", "/api/runs/{run_id}/resume",
        "/api/runs/{run_id}/rerun", "/api/regressions/{regression_id}/ack")},
    ("POST", "/api/hosts/{host}/release"): "admin", ("POST", "/api/schedules"): "admin",
    ("DELETE", "/api/schedules/{name}"): "admin", ("POST", "/api/canaries"): "admin", ("GET", "/api/tokens"): "admin",
    ("POST", "/api/tokens"): "admin", ("DELETE", "/api/tokens/{name}"): "admin",
}
# the pages (orchestrator.web.pages; not in the OpenAPI document) and the role each needs (None: anyone)
PAGE_ROLES: dict[tuple[str, str], str | None] = {
    ("GET", "/login"): None, ("POST", "/login"): None, ("POST", "/logout"): "viewer",
    **{("GET", p): "viewer" for p in (
        "/", "/hosts", "/runs", "/runs/{run_id}", "/runs/{run_id}/report", "/compare", "/compare/view",
        "/regressions", "/docs", "/openapi.json")},
    **{(m, p): "engineer" for m, p in (
        ("POST", "/runs/{run_id}/{action}"), ("POST", "/regressions/{regression_id}/ack"), ("GET", "/submit"),
        ("POST", "/submit"))},
    ("POST", "/hosts/{host}/release"): "admin",
}
ROLE_KEY = "x-required-role"
UNKNOWN_RUN = "r20000101-000000"


@pytest.fixture(scope="module")
def spec(web: WebHandle) -> dict[str, Any]:  # noqa: F811
    assert httpx.get(web.url + "/openapi.json", timeout=10).status_code == 401     # the document needs a token too
    with web.client("viewer") as c:
        r = c.get("/openapi.json")
    assert r.status_code == 200
    return dict(r.json())


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.upper(), p, op) for p, ops in spec["paths"].items() if p.startswith("/api/")
            for m, op in ops.items()]


def request(web: WebHandle, method: str, path: str, *, role: str | None = None, token: str | None = None,  # noqa: F811
            **kw: Any) -> httpx.Response:
    headers = dict(kw.pop("headers", {}))
    tok = web.tokens[role] if role else token
    if tok is not None:
        headers["Authorization"] = f"Bearer {tok}"
    with httpx.Client(base_url=web.url, timeout=kw.pop("timeout", 60)) as c:
        req = c.build_request(method, path, headers=headers, **kw)
        resp = c.send(req, stream=True)
        try:
            if resp.headers.get("content-type", "").startswith("text/event-stream"):
                resp.close()            # a live stream: its status and headers are what is checked
            else:
                resp.read()
        finally:
            resp.close()
        return resp


def _fill(path: str) -> str:
    return (path.replace("{run_id}", UNKNOWN_RUN).replace("{artifact_id}", "999999999")
            .replace("{host}", "no-such-host").replace("{name}", "no-such-name"))


# --- 1. who may call what ------------------------------------------------------------------------------

def test_openapi_documents_every_operation_with_the_spec_role(spec: dict[str, Any]) -> None:
    got = {(m, p): op.get(ROLE_KEY) for m, p, op in operations(spec)}
    assert got == EXPECTED_ROLES


def test_auth_matrix_over_every_operation(web: WebHandle, spec: dict[str, Any]) -> None:  # noqa: F811
    """No token: 401 with WWW-Authenticate; a bad token: 401; each role below the operation's: 403; its own role
    (and above) never 401/403 (the ids are unknown and the bodies empty: 404 / 422, nothing changes)."""
    for method, path, op in operations(spec):
        need = op[ROLE_KEY]
        url = _fill(path)
        body: dict[str, Any] = {"json": {}} if method == "POST" else {}
        r = request(web, method, url, **body)
        assert r.status_code == 401 and r.headers.get("www-authenticate") == "Bearer", (method, path, r.status_code)
        assert request(web, method, url, token="slab_" + "A" * 43, **body).status_code == 401, (method, path)
        assert request(web, method, url, token="garbage token", **body).status_code == 401, (method, path)
        for role in ROLES:
            r = request(web, method, url, role=role, **body)
            if ROLES.index(role) < ROLES.index(need):
                assert r.status_code == 403, (method, path, role, r.status_code, r.text)
            else:
                assert r.status_code not in (401, 403), (method, path, role, r.status_code, r.text)
                assert r.status_code < 500, (method, path, role, r.status_code, r.text)


def test_every_page_is_listed_with_its_role_and_enforces_it(web: WebHandle) -> None:  # noqa: F811
    """Every route of the pages is in PAGE_ROLES; with a bearer token (no CSRF secret needed), each role below the
    page's gets 403, its own role (and above) never 401/403 nor a 500 (unknown ids and empty forms: nothing
    changes)."""
    import importlib

    from orchestrator.web import pages

    got = {(m, rt.path) for name in pages.ROUTERS.values() for rt in importlib.import_module(name).router.routes
           for m in getattr(rt, "methods", ())}
    assert got == set(PAGE_ROLES)
    for (method, path), need in PAGE_ROLES.items():
        if need is None:
            continue
        url = (_fill(path).replace("{action}", "cancel").replace("{regression_id}", "0123456789ab"))
        for role in ROLES:
            r = request(web, method, url, role=role, **({"data": {}} if method == "POST" else {}))
            if ROLES.index(role) < ROLES.index(need):
                assert r.status_code == 403, (method, path, role, r.status_code, r.text[:300])
            else:
                assert r.status_code not in (401, 403) and r.status_code < 500, (method, path, role, r.status_code,
                                                                                 r.text[:300])


# --- 2. generated input --------------------------------------------------------------------------------

def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec["components"]["schemas"][name]
    return schema


def strategy(spec: dict[str, Any], schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of a JSON schema (the subset FastAPI emits), half of them valid-looking, some off the bounds."""
    schema = _resolve(spec, schema)
    if "anyOf" in schema:
        return st.one_of([strategy(spec, s, depth) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    t = schema.get("type")
    junk = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20))
    if t == "string":
        n = int(schema.get("maxLength", 300))
        if "pattern" in schema:
            return st.one_of(st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) <= n),
                             st.text(max_size=n + 2))
        return st.text(max_size=min(n + 2, 2000))
    if t == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        return st.one_of(st.integers(min_value=lo, max_value=hi), st.integers(), junk)
    if t == "number":
        return st.one_of(st.floats(min_value=schema.get("minimum"), max_value=schema.get("maximum"),
                                   allow_nan=False, allow_infinity=False), st.floats(allow_nan=False), junk)
    if t == "boolean":
        return st.one_of(st.booleans(), junk)
    if t == "array":
        item = strategy(spec, schema.get("items", {}), depth + 1) if depth < 3 else junk
        return st.lists(item, max_size=min(int(schema.get("maxItems", 4)), 4))
    if t == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if depth >= 3 or not props:
            return st.dictionaries(st.text(max_size=8), junk, max_size=3)
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: strategy(spec, v, depth + 1) for k, v in props.items() if k in required},
            optional={k: strategy(spec, v, depth + 1) for k, v in props.items() if k not in required})
    return junk


def _scalar(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, str) else v


@st.composite
def calls(draw: st.DrawFn, spec: dict[str, Any]) -> tuple[str, str, str | None, dict[str, Any], str]:
    method, path, op = draw(st.sampled_from(operations(spec)))
    query: list[tuple[str, str]] = []
    url = path
    for p in op.get("parameters", []):
        value = draw(strategy(spec, p.get("schema", {})))
        if p["in"] == "path":
            url = url.replace("{" + p["name"] + "}", quote(_scalar(value), safe="") or "x")
        elif p["in"] == "query" and (p.get("required") or draw(st.booleans())):
            values = value if isinstance(value, list) else [value]
            query += [(p["name"], _scalar(v)) for v in values if v is not None]
    kw: dict[str, Any] = {"params": query}
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is not None and draw(st.booleans()):
        kw["json"] = draw(strategy(spec, body))
    role = draw(st.sampled_from([None, "bad", *ROLES]))
    return method, url, role, kw, op[ROLE_KEY]


def test_generated_requests_never_fail_the_service(web: WebHandle, spec: dict[str, Any]) -> None:  # noqa: F811
    """Whatever the input: no 5xx but a documented 503, no 2xx without a token of the operation's role."""
    t0 = time.monotonic()
    seen: dict[int, int] = {}

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(calls(spec))
    def check(call: tuple[str, str, str | None, dict[str, Any], str]) -> None:
        method, url, role, kw, need = call
        if role == "bad":
            r = request(web, method, url, token="slab_not-a-token", timeout=30, **kw)
        else:
            r = request(web, method, url, role=role, timeout=30, **kw)
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        assert r.status_code < 500 or r.status_code == 503, (method, url, kw, r.status_code, r.text[:500])
        if 200 <= r.status_code < 300:
            assert role not in (None, "bad") and ROLES.index(role) >= ROLES.index(need), (method, url, role)

    check()
    web.check_alive()
    # (how long the 300 requests take is no assertion: a test waits on conditions, not on a quiet machine; it took
    # 110 s with the other tiers beside it)
    print(f"300 generated requests in {time.monotonic() - t0:.0f} s")
    # the generator reaches past the door: answers, refusals of input and unknown ids, not only 401s
    assert all(seen.get(code) for code in (200, 401, 403, 404, 422)), seen


# --- 3. bad input --------------------------------------------------------------------------------------

def test_oversized_bodies_are_refused_before_parsing(web: WebHandle) -> None:  # noqa: F811
    big = b'{"suite_yaml": "' + b"x" * (2 << 20) + b'"}'
    r = request(web, "POST", "/api/runs", role="engineer", content=big,
                headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text

    def chunks() -> Iterator[bytes]:
        yield b'{"suite_yaml": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'
    r = request(web, "POST", "/api/runs", role="engineer", content=chunks(),
                headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    r = request(web, "POST", "/api/runs", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413           # refused before anything reads it, token or not
    web.check_alive()


def test_invalid_suite_answers_every_problem(web: WebHandle) -> None:  # noqa: F811
    bad = ("suite: bad\nprofiles:\n  - {name: a, rw: nope, bs: 4k}\n  - {name: b, rw: read, bs: -1}\n"
           "  - {name: c, rw: read, bs: 4k, iodepth: 0}\n")
    r = request(web, "POST", "/api/runs", role="engineer",
                json={"suite_yaml": bad, "host": web.lab.host, "devices": ["dut0"]})
    assert r.status_code == 422, r.text
    where = [e["where"] for e in r.json()["errors"]]
    assert all(any(w.startswith(f"profiles[{i}]") for w in where) for i in range(3)), where
    r = request(web, "POST", "/api/runs", role="engineer",
                json={"suite": "quick", "suite_yaml": "x", "host": "nope", "devices": ["dut7"]})
    assert r.status_code == 422 and len(r.json()["errors"]) >= 2, r.text


def test_unknown_ids_are_404(web: WebHandle) -> None:  # noqa: F811
    for path in (f"/api/runs/{UNKNOWN_RUN}", f"/api/runs/{UNKNOWN_RUN}/results", f"/api/runs/{UNKNOWN_RUN}/report",
                 "/api/runs/..%2F..%2Fetc/artifacts", "/api/artifacts/424242", f"/api/runs/{UNKNOWN_RUN}/live",
                 f"/api/compare?run={UNKNOWN_RUN}&run=r1&format=json"):
        r = request(web, "GET", path, role="viewer")
        assert r.status_code == 404, (path, r.status_code, r.text)
    r = request(web, "POST", f"/api/runs/{UNKNOWN_RUN}/cancel", role="engineer", json={"reason": "x"})
    assert r.status_code == 404


# --- 4. a run through the API --------------------------------------------------------------------------

def _wait_state(web: WebHandle, run_id: str, states: set[str], timeout: float = 90) -> dict[str, Any]:  # noqa: F811
    def reached() -> dict[str, Any] | None:
        web.check_alive()
        r = request(web, "GET", f"/api/runs/{run_id}", role="viewer")
        assert r.status_code == 200, r.text
        run: dict[str, Any] = r.json()
        return run if run["state"] in states else None
    got = wait_for(reached, timeout, f"run {run_id} to be {states}", interval=0.2)
    assert isinstance(got, dict)
    return got


def _submit(web: WebHandle, runtime: int, device: str, **extra: Any) -> str:  # noqa: F811
    r = request(web, "POST", "/api/runs", role="engineer",
                json={"suite_yaml": one_workload(runtime), "host": web.lab.host, "devices": [device], **extra})
    assert r.status_code == 201, r.text
    rid = r.json()["run_id"]
    assert isinstance(rid, str)
    return rid


@pytest.fixture(scope="module")
def done_runs(web: WebHandle) -> list[str]:  # noqa: F811
    """Two short runs submitted through the API (by the engineer's token), ended."""
    ids = [_submit(web, 1, "dut0"), _submit(web, 1, "dut1")]
    for rid in ids:
        assert _wait_state(web, rid, {"SUCCEEDED", "FAILED", "CANCELLED"})["state"] == "SUCCEEDED"
    return ids


def test_submitted_run_reads_back_through_the_api(web: WebHandle, done_runs: list[str]) -> None:  # noqa: F811
    rid = done_runs[0]
    run = request(web, "GET", f"/api/runs/{rid}", role="viewer").json()
    port = web.url.rsplit(":", 1)[-1]
    assert run["submitted_by"] == f"token:engineer-{port}"
    assert run["steps_done"] == run["steps_total"] >= 1 and run["steps"][0]["attempts"]
    results = request(web, "GET", f"/api/runs/{rid}/results", role="viewer").json()
    assert results and results[0]["run"] == rid and results[0]["iops"] > 0
    assert request(web, "GET", f"/api/runs/{rid}/devices", role="viewer").status_code == 200
    step = run["steps"][0]["id"]
    series = request(web, "GET", f"/api/runs/{rid}/series", role="viewer", params={"step": step})
    assert series.status_code == 200 and series.json()["step"] == step
    csv = request(web, "GET", f"/api/runs/{rid}/export", role="viewer", params={"format": "csv"})
    assert csv.status_code == 200 and csv.text.startswith("run,") and rid in csv.text
    js = request(web, "GET", f"/api/runs/{rid}/export", role="viewer", params={"format": "json", "table": "all"})
    assert js.status_code == 200 and js.json()["results"][0]["run"] == rid
    binary = request(web, "GET", f"/api/runs/{rid}/export", role="viewer", params={"format": "json", "units": "binary"})
    row, dec = binary.json()["results"][0], js.json()["results"][0]
    assert "mb_s" not in row and row["mib_s"] == pytest.approx(dec["mb_s"] * 1e6 / 2**20)
    assert request(web, "GET", f"/api/runs/{rid}/export", role="viewer", params={"units": "si"}).status_code == 422
    t0 = time.monotonic()
    report = request(web, "GET", f"/api/runs/{rid}/report", role="viewer", timeout=300)
    first = time.monotonic() - t0
    assert report.status_code == 200 and "text/html" in report.headers["content-type"], report.text[:300]
    assert "<html" in report.text.lower() and rid in report.text
    t0 = time.monotonic()
    again = request(web, "GET", f"/api/runs/{rid}/report", role="viewer")
    assert again.text == report.text and time.monotonic() - t0 < max(first / 2, 1.0)     # cached once ended
    arts = request(web, "GET", f"/api/runs/{rid}/artifacts", role="viewer").json()
    assert arts
    for a in arts[:3]:
        r = request(web, "GET", f"/api/artifacts/{a['id']}", role="viewer")
        assert r.status_code == 200
        digest = hashlib.sha256(r.content).hexdigest()
        assert digest == r.headers["x-content-sha256"] == a["sha256"] and r.headers["etag"] == f'"{digest}"'


def test_compare_through_the_api(web: WebHandle, done_runs: list[str]) -> None:  # noqa: F811
    params: list[tuple[str, str]] = [("run", r) for r in done_runs]
    js = request(web, "GET", "/api/compare", role="viewer", params=[*params, ("format", "json")])
    assert js.status_code == 200, js.text
    csv = request(web, "GET", "/api/compare", role="viewer", params=[*params, ("format", "csv")])
    assert csv.status_code == 200 and csv.text.strip()
    html = request(web, "GET", "/api/compare", role="viewer", params=params, timeout=300)
    assert html.status_code == 200 and "<html" in html.text.lower(), html.text[:500]
    one = request(web, "GET", "/api/compare", role="viewer", params=[("run", done_runs[0])])
    assert one.status_code == 422


def test_runs_list_filters_and_cursor(web: WebHandle, done_runs: list[str]) -> None:  # noqa: F811
    every = request(web, "GET", "/api/runs", role="viewer", params={"limit": 200}).json()["runs"]
    assert set(done_runs) <= {r["id"] for r in every}
    walked: list[str] = []
    cursor: str | None = None
    while True:
        page = request(web, "GET", "/api/runs", role="viewer",
                       params={"limit": 1, **({"before": cursor} if cursor else {})}).json()
        walked += [r["id"] for r in page["runs"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert walked == [r["id"] for r in every]
    mine = request(web, "GET", "/api/runs", role="viewer",
                   params={"host": web.lab.host, "state": "SUCCEEDED", "suite": "single"}).json()["runs"]
    assert set(done_runs) <= {r["id"] for r in mine}
    none = request(web, "GET", "/api/runs", role="viewer", params={"model": "no-such-model"}).json()
    assert none == {"runs": [], "next": None}
    bad = request(web, "GET", "/api/runs", role="viewer", params={"before": "not-a-cursor"})
    assert bad.status_code == 422
    for limit in (0, 201):
        assert request(web, "GET", "/api/runs", role="viewer", params={"limit": limit}).status_code == 422


def test_viewer_cannot_change_a_run(web: WebHandle, done_runs: list[str]) -> None:  # noqa: F811
    for action in ("cancel", "pause", "resume", "rerun"):
        r = request(web, "POST", f"/api/runs/{done_runs[0]}/{action}", role="viewer", json={})
        assert r.status_code == 403, (action, r.text)


def test_pause_resume_cancel_rerun(web: WebHandle) -> None:  # noqa: F811
    rid = _submit(web, 60, "dut0", priority=5)
    _wait_state(web, rid, {"RUNNING"}, timeout=60)
    r = request(web, "POST", f"/api/runs/{rid}/pause", role="engineer", json={})
    assert r.status_code == 200 and r.json() == {"ok": True, "run_id": rid, "name": None,
                                                 "message": f"pause of {rid} accepted"}
    _wait_state(web, rid, {"PAUSED"}, timeout=30)
    queue = request(web, "GET", "/api/queue", role="viewer").json()
    assert any(q["run_id"] == rid and "paused" in q["status"] for q in queue), queue
    assert request(web, "POST", f"/api/runs/{rid}/resume", role="engineer").status_code == 200
    _wait_state(web, rid, {"RUNNING", "QUEUED"}, timeout=30)
    refused = request(web, "POST", f"/api/runs/{rid}/rerun", role="engineer", json={})
    assert refused.status_code == 409 and refused.json()["errors"], refused.text      # still active
    r = request(web, "POST", f"/api/runs/{rid}/cancel", role="engineer", json={"reason": "api test"})
    assert r.status_code == 200, r.text
    run = _wait_state(web, rid, {"CANCELLED"}, timeout=60)
    assert "api test" in run["reason"]
    assert request(web, "POST", f"/api/runs/{rid}/rerun", role="engineer", json={}).status_code == 200
    run = _wait_state(web, rid, {"QUEUED", "RUNNING"}, timeout=30)
    assert run["rerun_count"] == 1
    assert request(web, "POST", f"/api/runs/{rid}/cancel", role="engineer", json={}).status_code == 200
    _wait_state(web, rid, {"CANCELLED"}, timeout=60)


def test_tokens_through_the_api(web: WebHandle) -> None:  # noqa: F811
    r = request(web, "POST", "/api/tokens", role="admin", json={"name": "made-by-api", "role": "viewer"})
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    assert request(web, "GET", "/api/whoami", token=token).json() == {"name": "made-by-api", "role": "viewer"}
    listed = request(web, "GET", "/api/tokens", role="admin").json()
    assert any(t["name"] == "made-by-api" for t in listed) and token not in json.dumps(listed)
    assert request(web, "DELETE", "/api/tokens/made-by-api", role="admin").status_code == 200
    assert request(web, "GET", "/api/whoami", token=token).status_code == 401


# --- the shared read queries on PostgreSQL (the lab above runs on SQLite) -------------------------------

def test_queries_on_postgresql(pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    """The run list's SQL (JSON OP mode, device joins, grouped counts, keyset on float ties) on PostgreSQL."""
    from orchestrator.store.db import make_engine, sessions
    from orchestrator.store.models import Base
    from orchestrator.web import queries
    from tests.unit.test_web_api_store import N_RUNS, seed

    engine = make_engine(pg_server.create_database("webqueries"))
    Base.metadata.create_all(engine)
    db = sessions(engine)
    seed(db, tmp_path / "artifacts")
    with db() as s:
        walked: list[dict[str, Any]] = []
        cursor = None
        while True:
            page, cursor = queries.run_page(s, limit=23, before=cursor)
            walked += page
            if cursor is None:
                break
        assert len({r["id"] for r in walked}) == len(walked) == N_RUNS
        assert [(r["submitted_at"], r["id"]) for r in walked] == sorted(
            ((r["submitted_at"], r["id"]) for r in walked), reverse=True)
        hp, _ = queries.run_page(s, queries.RunFilter(op_mode="hp", model="FAST-SSD", firmware="1.0"), limit=200)
        assert hp and all(int(r["id"][1:]) % 4 == 0 and r["host"] == "h1" for r in hp)
        assert queries.run_dict(s, "r0000")["steps"][0]["attempts"][0]["number"] == 1
        assert queries.host_rows(s)[0]["devices"][0]["model"] == "FAST-SSD"
        assert queries.queue(s) == [] and queries.run_artifacts(s, "r0000")


# --- 5. the controller stopped (last: it restarts the controller) --------------------------------------

def test_controller_stopped_answers_503_never_hangs(web: WebHandle) -> None:  # noqa: F811
    web.lab.lab.stop_proc(web.lab.controller)
    try:
        t0 = time.monotonic()
        r = request(web, "POST", "/api/runs", role="engineer", timeout=60,
                    json={"suite_yaml": one_workload(1), "host": web.lab.host, "devices": ["dut0"]})
        took = time.monotonic() - t0
        assert r.status_code == 503, r.text
        assert "controller" in r.json()["detail"], r.text
        assert took < 10 + 5, took                 # command_timeout_s (10 s) + a few seconds
        assert request(web, "GET", "/api/runs", role="viewer").status_code == 200   # reads still answer
    finally:
        web.lab.restart_controller()
