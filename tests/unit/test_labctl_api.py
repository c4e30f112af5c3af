"""labctl's REST client (orchestrator/labctl/api.py) against a stub HTTP server of this module: what it sends,
how every error status maps to the project's errors with the server's reason, downloads checked by sha256,
bounded answers, no redirect followed, token files readable by their owner only."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from labcontract.errors import (
    AccessError,
    CommandRefused,
    ConfigError,
    Forbidden,
    InputError,
    LabError,
    NotFound,
    ServiceError,
    SubmissionError,
)
from orchestrator.labctl.api import ApiClient, read_token_file

TOKEN = "slab_" + "x" * 43
Answer = tuple[int, dict[str, str], bytes]


def js(status: int, body: Any, headers: dict[str, str] | None = None) -> Answer:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(body).encode()


def err(status: int, detail: str, errors: list[dict[str, str]] | None = None) -> Answer:
    return js(status, {"detail": detail, "errors": errors or []})


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Stub:
    url: str
    routes: dict[tuple[str, str], Callable[[Seen], Answer]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def on(self, method: str, path: str, answer: Answer | Callable[[Seen], Answer]) -> None:
        self.routes[(method, path)] = answer if callable(answer) else (lambda _s, a=answer: a)  # type: ignore[misc]


@pytest.fixture
def stub() -> Iterator[Stub]:
    holder: list[Stub] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def _serve(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            seen = Seen(self.command, self.path, dict(self.headers), self.rfile.read(n) if n else b"")
            s = holder[0]
            s.seen.append(seen)
            route = s.routes.get((self.command, self.path.split("?")[0]))
            status, headers, body = route(seen) if route else err(404, f"no route {self.path}")
            self.send_response(status)
            headers.setdefault("Content-Length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _serve

    class Server(ThreadingHTTPServer):
        def handle_error(self, *_args: Any) -> None:     # a client that hung up early (bounded reads)
            pass

    server = Server(("127.0.0.1", 0), Handler)      # port 0: the OS picks a free one
    holder.append(Stub(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield holder[0]
    server.shutdown()
    server.server_close()


def client(stub: Stub, **kw: Any) -> ApiClient:
    return ApiClient(stub.url, TOKEN, **kw)


def test_reads_send_the_bearer_token_and_parse_json(stub: Stub) -> None:
    stub.on("GET", "/api/whoami", js(200, {"name": "alice", "role": "engineer"}))
    stub.on("GET", "/api/runs", js(200, {"runs": [{"id": "r2"}, {"id": "r1"}], "next": "c1"}))
    api = client(stub)
    assert api.whoami() == {"name": "alice", "role": "engineer"}
    page = api.runs(limit=2, before="c0", state="FAILED", host="h1", model=None)
    assert page["next"] == "c1" and [r["id"] for r in page["runs"]] == ["r2", "r1"]
    assert stub.seen[0].headers["Authorization"] == f"Bearer {TOKEN}"
    query = stub.seen[1].path.split("?")[1]
    assert sorted(query.split("&")) == ["before=c0", "host=h1", "limit=2", "state=FAILED"]
    assert api.resolve("last") == "r2" and api.resolve("abc") == "abc"
    with pytest.raises(InputError, match="colour: not a filter"):
        api.runs(colour="red")


def test_submit_sends_every_field_and_returns_the_run_id(stub: Stub) -> None:
    stub.on("POST", "/api/runs", js(201, {"run_id": "r-new"}))
    api = client(stub)
    assert api.submit("h1", ["dut0"], suite="demo", runtime=3, max_rounds=5, priority=2) == "r-new"
    body = json.loads(stub.seen[0].body)
    assert stub.seen[0].headers["Content-Type"] == "application/json"
    assert body == {"suite": "demo", "suite_yaml": None, "host": "h1", "devices": ["dut0"], "initiators": [],
                    "runtime": 3, "scale": None, "priority": 2, "not_before": None, "expires_at": None,
                    "max_rounds": 5, "live": True, "repeat": None}
    with pytest.raises(InputError, match="not both"):
        api.submit("h1", suite="demo", suite_yaml="suite: x")


def test_a_refused_submission_carries_every_problem(stub: Stub) -> None:
    stub.on("POST", "/api/runs", err(422, "2 problems in submission", [
        {"where": "profiles[0].bs", "problem": "not a size"}, {"where": "--device", "problem": "no DUT nvme9"}]))
    with pytest.raises(SubmissionError) as e:
        client(stub).submit("h1", ["nvme9"], suite_yaml="suite: bad\n", source="bad.yaml")
    assert [str(p) for p in e.value.problems] == ["profiles[0].bs: not a size", "--device: no DUT nvme9"]
    assert e.value.source == "bad.yaml"


@pytest.mark.parametrize(("status", "cls", "text"), [
    (401, AccessError, "refused the token: invalid or expired token"),
    (403, Forbidden, "not allowed: alice has role viewer; this needs engineer"),
    (404, NotFound, "no run 'nope'"),
    (409, CommandRefused, "run nope has ended"),
    (413, InputError, "body too large"),
    (503, ServiceError, "service unavailable: controller unreachable: lease expired 40s ago"),
    (500, LabError, "HTTP 500: boom"),
])
def test_error_statuses_map_to_the_projects_errors_with_the_servers_reason(
        stub: Stub, status: int, cls: type[LabError], text: str) -> None:
    detail = {401: "invalid or expired token", 403: "alice has role viewer; this needs engineer",
              404: "no run 'nope'", 409: "run nope has ended", 413: "body too large",
              503: "controller unreachable: lease expired 40s ago", 500: "boom"}[status]
    errors = [{"where": "", "problem": detail}] if status == 409 else []
    stub.on("POST", "/api/runs/nope/cancel", err(status, detail, errors))
    with pytest.raises(cls) as e:
        client(stub).cancel("nope", "why")
    assert text in str(e.value)
    if isinstance(e.value, Forbidden):
        assert (e.value.who, e.value.role, e.value.needed) == ("alice", "viewer", "engineer")
    assert "Traceback" not in str(e.value)


def test_unreachable_and_silent_services_are_service_errors(stub: Stub) -> None:
    with pytest.raises(ServiceError, match="cannot reach the web service"):
        ApiClient("http://127.0.0.1:1", TOKEN).whoami()          # port 1: nothing listens, refused at once
    gate = threading.Event()

    def slow(_s: Seen) -> Answer:
        gate.wait(10)
        return js(200, {})
    stub.on("GET", "/api/queue", slow)
    try:
        with pytest.raises(ServiceError, match="timed out"):
            client(stub, timeout_s=0.3).queue()
    finally:
        gate.set()


def test_answers_are_bounded_and_type_checked(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.labctl.api as api_mod

    monkeypatch.setattr(api_mod, "MAX_JSON_BYTES", 1000)
    stub.on("GET", "/api/hosts", js(200, [{"name": "h" * 2000}]))
    with pytest.raises(ServiceError, match="larger than"):
        client(stub).hosts()
    stub.on("GET", "/api/queue", js(200, {"not": "a list"}))
    with pytest.raises(ServiceError, match="not a list"):
        client(stub).queue()
    stub.on("GET", "/api/whoami", (200, {"Content-Type": "text/html"}, b"<html>login</html>"))
    with pytest.raises(ServiceError, match="not JSON"):
        client(stub).whoami()


def test_redirects_are_not_followed_and_ids_stay_one_path_segment(stub: Stub) -> None:
    stub.on("GET", "/api/whoami", (302, {"Location": "http://elsewhere.example/steal"}, b""))
    with pytest.raises(LabError, match="redirects are not followed"):
        client(stub).whoami()
    assert len(stub.seen) == 1
    with pytest.raises(NotFound):
        client(stub).run("../tokens")
    assert stub.seen[-1].path == "/api/runs/..%2Ftokens"


def test_text_routes_report_and_export(stub: Stub) -> None:
    stub.on("GET", "/api/runs/r1/report", (200, {"Content-Type": "text/html"}, b"<html>report</html>"))
    stub.on("GET", "/api/runs/r1/export", (200, {"Content-Type": "text/csv"}, b"a,b\n1,2\n"))
    api = client(stub)
    assert api.report("r1") == "<html>report</html>"
    assert api.export("r1", "csv", "devices") == "a,b\n1,2\n"
    assert stub.seen[-1].path == "/api/runs/r1/export?format=csv&table=devices&units=decimal"
    api.export("r1", "csv", "results", "binary")
    assert stub.seen[-1].path == "/api/runs/r1/export?format=csv&table=results&units=binary"


def test_download_checks_the_sha256(stub: Stub, tmp_path: Path) -> None:
    data = b"fio output\n" * 1000
    good = hashlib.sha256(data).hexdigest()
    stub.on("GET", "/api/artifacts/7", (200, {"X-Content-SHA256": good,
                                              "Content-Disposition": 'attachment; filename="fio.json"'}, data))
    stub.on("GET", "/api/artifacts/8", (200, {"X-Content-SHA256": "0" * 64}, data))
    stub.on("GET", "/api/artifacts/9", (200, {}, data))
    api = client(stub)
    got = api.download(7, tmp_path)
    assert got == tmp_path / "fio.json" and got.read_bytes() == data
    with pytest.raises(ServiceError, match="differs from the announced"):
        api.download(8, tmp_path / "bad.json")
    with pytest.raises(ServiceError, match="X-Content-SHA256"):
        api.download(9, tmp_path / "unchecked.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fio.json"]      # nothing left of the bad ones
    with pytest.raises(NotFound):
        api.download(10, tmp_path)


def test_admin_routes(stub: Stub) -> None:
    stub.on("POST", "/api/tokens", js(201, {"name": "bob", "role": "viewer", "token": "slab_new"}))
    stub.on("DELETE", "/api/tokens/bob", js(200, {"ok": True}))
    stub.on("POST", "/api/hosts/h1/release", js(200, {"ok": True}))
    api = client(stub)
    assert api.token_create("bob", "viewer", 3600)["token"] == "slab_new"
    assert json.loads(stub.seen[-1].body) == {"name": "bob", "role": "viewer", "expires_in_s": 3600}
    assert api.token_revoke("bob") == {"ok": True}
    api.release("h1", "dut0")
    assert json.loads(stub.seen[-1].body) == {"device": "dut0"}


def test_token_files_readable_by_their_owner_only(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    for mode in (0o644, 0o640, 0o604):
        f.chmod(mode)
        with pytest.raises(ConfigError, match="lets other users read or change it"):
            read_token_file(f)
    f.chmod(0o600)
    assert read_token_file(f) == TOKEN
    f.write_text("\n")
    with pytest.raises(ConfigError, match="holds no token"):
        read_token_file(f)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_token_file(tmp_path)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_token_file(tmp_path / "missing")


@pytest.mark.parametrize("url", ["ftp://x/", "localhost:8080", "http://u:p@host/", "http://host/?a=1", ""])
def test_bad_api_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        ApiClient(url, TOKEN)
    with pytest.raises(ConfigError):
        ApiClient("http://127.0.0.1:8080", "has space")


# --- labctl --api: the commands' side (orchestrator/labctl/apicmds.py) ------------------------------------------


def test_submit_sends_a_builtin_by_name_and_a_file_by_its_text(stub: Stub, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.labctl import apicmds

    stub.on("POST", "/api/runs", js(201, {"run_id": "r-1"}))
    api = client(stub)
    assert apicmds.submit(api, "demo", "h1", ["dut0"], max_rounds=3) == "r-1"
    sent = json.loads(stub.seen[-1].body)
    assert (sent["suite"], sent["suite_yaml"], sent["max_rounds"]) == ("demo", None, 3)
    f = tmp_path / "mine.yaml"
    f.write_text("suite: mine\nprofiles: []\n")
    apicmds.submit(api, str(f), "h1", ["dut0"])
    sent = json.loads(stub.seen[-1].body)
    assert (sent["suite"], sent["suite_yaml"]) == (None, "suite: mine\nprofiles: []\n")
    assert capsys.readouterr().out == "r-1\nr-1\n"
    with pytest.raises(SubmissionError, match="cannot read the suite file"):
        apicmds.submit(api, str(tmp_path / "missing.yaml"), "h1", [])


def test_api_options_need_each_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.labctl.apicmds import ApiOptions, api_client

    monkeypatch.setattr(ApiOptions, "url", None)
    monkeypatch.setattr(ApiOptions, "token_file", None)
    assert api_client() is None
    monkeypatch.setattr(ApiOptions, "url", "http://127.0.0.1:8080")
    with pytest.raises(ConfigError, match="needs --token-file"):
        api_client()
    f = tmp_path / "token"
    f.write_text(TOKEN)
    f.chmod(0o600)
    monkeypatch.setattr(ApiOptions, "token_file", f)
    api = api_client()
    assert api is not None and api.base_url == "http://127.0.0.1:8080"
    monkeypatch.setattr(ApiOptions, "url", None)
    with pytest.raises(ConfigError, match="only with --api"):
        api_client()


def test_runs_table_follows_the_cursor_and_tolerates_odd_fields(stub: Stub) -> None:
    from rich.console import Console

    from orchestrator.labctl import apicmds

    def page(seen: Seen) -> Answer:
        first = "before=" not in seen.path
        runs = [{"id": f"r{i}", "suite": "demo", "host": "h1", "devices": ["/dev/loop0"], "state": "SUCCEEDED",
                 "steps_done": 3, "steps_total": 3, "submitted_at": 1.7e9, "submitted_by": "token:alice",
                 "reason": ""} for i in ((1, 2) if first else (3,))]
        runs.append({"id": "odd", "devices": "not a list", "submitted_at": "yesterday"})
        return js(200, {"runs": runs, "next": "c1" if first else None})
    stub.on("GET", "/api/runs", page)
    out = Console(width=200, record=True)
    apicmds.print_runs(client(stub), out, 30, state="SUCCEEDED")
    text = out.export_text()
    for rid in ("r1", "r2", "r3", "odd"):
        assert rid in text
    assert "token:alice" in text and len(stub.seen) == 2
    assert "state=SUCCEEDED" in stub.seen[1].path and "before=c1" in stub.seen[1].path


def test_canary_routes(stub: Stub) -> None:
    """``labctl canary`` through the API: the DUT resolved by the service (its refusal named as labctl names it),
    a canary added with every field, removed as its schedule, listed."""
    stub.on("GET", "/api/canaries/dut", js(200, {"host": "h1", "device": "nvme0", "path": "/dev/nvme0n1",
                                                  "name": "canary.h1.nvme0"}))
    stub.on("POST", "/api/canaries", js(201, {"ok": True, "name": "canary.h1.nvme0"}))
    stub.on("DELETE", "/api/schedules/canary.h1.nvme0", js(200, {"ok": True}))
    stub.on("GET", "/api/canaries", js(200, [{"name": "canary.h1.nvme0", "verdict": "-"}]))
    api = client(stub)
    assert api.canary_dut("h1", "/dev/disk/by-id/nvme-X") == "nvme0"
    assert stub.seen[-1].path == "/api/canaries/dut?host=h1&device=%2Fdev%2Fdisk%2Fby-id%2Fnvme-X"
    api.canary_add("h1", "nvme0", cron="0 4 * * *", quarantine=True, priority=3, source="canary.yaml")
    assert json.loads(stub.seen[-1].body) == {"host": "h1", "device": "nvme0", "cron": "0 4 * * *",
                                              "quarantine": True, "priority": 3}
    api.schedule_remove("canary.h1.nvme0")
    assert stub.seen[-1].method == "DELETE"
    assert api.canaries() == [{"name": "canary.h1.nvme0", "verdict": "-"}]
    stub.on("GET", "/api/canaries/dut", err(422, "1 problem", [{"where": "--device", "problem": "'x' is not a "
                                                                                               "declared DUT"}]))
    with pytest.raises(SubmissionError) as e:
        api.canary_dut("h1", "x")
    assert e.value.source == "labctl canary" and str(e.value.problems[0]) == "--device: 'x' is not a declared DUT"
    stub.on("GET", "/api/canaries/dut", js(200, {"device": 7}))
    with pytest.raises(ServiceError):
        api.canary_dut("h1", "x")
