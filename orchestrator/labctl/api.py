"""``labctl --api URL --token-file F``: the lab through its web service's REST API (docs/web.md).

An engineer with a token needs neither the store's nor the broker's credentials: every read and every command
goes through the web service, which checks the token's role and forwards commands to the controller.

Plain ``http.client`` (the standard library): one connection per request, redirects never followed (a token
must not travel to wherever a ``Location`` header points), every response size-bounded and type-checked
before use, and every failure a :class:`LabError` whose message is the server's own reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from labcontract.brokerauth import first_line_of_private_file
from labcontract.errors import (
    AccessError,
    CommandRefused,
    ConfigError,
    Forbidden,
    InputError,
    LabError,
    NotFound,
    Problem,
    ServiceError,
    SubmissionError,
)

MAX_JSON_BYTES = 64 << 20          # a run of 10,000 cells with every step is a few MB
MAX_TEXT_BYTES = 256 << 20         # a compare report or an export
MAX_ARTIFACT_BYTES = 128 << 20     # the controller refuses larger artifacts (docs/security.md)
TOKEN_MAX = 512
CHUNK = 1 << 20
TOKEN_RE = re.compile(r"[\x21-\x7e]{1,512}")            # printable, no whitespace: it goes into a header
if TYPE_CHECKING:
    import http.client

RUN_FILTERS = ("state", "suite", "host", "model", "firmware", "op_mode", "since", "until")


def read_token_file(path: str | Path) -> str:
    """The token in ``path`` (first line). Refused when it is not a regular file or when anyone but its owner
    may read or write it: a token is one person's authority (``chmod 600``), unlike a broker password file that
    a service group may share."""
    token = first_line_of_private_file(path, "token file", others=0o077, max_bytes=TOKEN_MAX + 2,
                                       hint="lets other users read or change it (chmod 600)")
    if not TOKEN_RE.fullmatch(token):
        raise ConfigError("token file", str(path), f"holds no token of 1-{TOKEN_MAX} printable characters")
    return token


def _relabel(err: LabError, message: str) -> LabError:
    """``err`` with the server's own reason as its message (str(err)), its class kept for callers."""
    err.args = (message,)
    return err


class ApiClient:
    """The REST API of the web service (``/api/...``), one method per route."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 30) -> None:
        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("--api", base_url[:200], "not an http:// or https:// URL")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ConfigError("--api", base_url[:200], "an API URL holds no query, fragment or credentials")
        if not TOKEN_RE.fullmatch(token):
            raise ConfigError("token", "-", f"not a token of 1-{TOKEN_MAX} printable characters")
        if not 0 < timeout_s <= 3600:
            raise ConfigError("--api", "timeout", "must be in (0, 3600] seconds")
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.prefix = parts.path.rstrip("/")
        self.base_url = f"{parts.scheme}://{parts.netloc}{self.prefix}"
        self._token, self.timeout_s = token, timeout_s

    @classmethod
    def from_token_file(cls, base_url: str, token_file: str | Path, *, timeout_s: float = 30) -> ApiClient:
        return cls(base_url, read_token_file(token_file), timeout_s=timeout_s)

    # --- transport ------------------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        import http.client  # here, not at labctl's start (its --help and --version never open a connection)
        import ssl

        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)

    def _open(self, method: str, path: str, query: Sequence[tuple[str, str]] = (),
              body: Mapping[str, Any] | None = None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        url = self.prefix + path + (f"?{urlencode(list(query))}" if query else "")
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json, text/*"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = self._connection()
        import http.client

        try:
            conn.request(method, url, body=data, headers=headers)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            why = "timed out" if isinstance(e, TimeoutError) else str(e) or type(e).__name__
            raise ServiceError(f"cannot reach the web service at {self.base_url}: {why}") from None

    def _request(self, method: str, path: str, query: Sequence[tuple[str, str]] = (),
                 body: Mapping[str, Any] | None = None, *, limit: int | None = None,
                 source: str | None = None, headers_out: dict[str, str] | None = None) -> bytes:
        conn, resp = self._open(method, path, query, body)
        try:
            if headers_out is not None:
                headers_out.update({k.lower(): v[:4096] for k, v in resp.getheaders()})
            data = _read_bounded(resp, MAX_JSON_BYTES if limit is None else limit, self.base_url)
            if resp.status >= 400:
                raise _error(resp.status, data, method, path, source)
            if resp.status >= 300:
                raise LabError(f"the web service answered {resp.status} (redirect to "
                               f"{str(resp.getheader('Location'))[:200]}); redirects are not followed: is "
                               "--api the service's own URL?")
            return data
        finally:
            conn.close()

    def _json(self, method: str, path: str, query: Sequence[tuple[str, str]] = (),
              body: Mapping[str, Any] | None = None, *, source: str | None = None) -> Any:
        data = self._request(method, path, query, body, source=source)
        try:
            return json.loads(data)
        except ValueError:
            raise ServiceError(f"{method} {path}: the web service's answer is not JSON") from None

    def _object(self, method: str, path: str, query: Sequence[tuple[str, str]] = (),
                body: Mapping[str, Any] | None = None, *, source: str | None = None) -> dict[str, Any]:
        got = self._json(method, path, query, body, source=source)
        if not isinstance(got, dict):
            raise ServiceError(f"{method} {path}: the web service's answer is not a JSON object")
        return got

    def _list(self, path: str, query: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
        got = self._json("GET", path, query)
        if not isinstance(got, list) or not all(isinstance(x, dict) for x in got):
            raise ServiceError(f"GET {path}: the web service's answer is not a list of objects")
        return got

    def _text(self, path: str, query: Sequence[tuple[str, str]] = ()) -> str:
        return self._request("GET", path, query, limit=MAX_TEXT_BYTES).decode("utf-8", errors="replace")

    # --- reads (viewer) -------------------------------------------------------------------------

    def whoami(self) -> dict[str, Any]:
        return self._object("GET", "/api/whoami")

    def runs(self, *, limit: int = 50, before: str | None = None, **filters: str | float | None) -> dict[str, Any]:
        """One page of runs, newest first: ``{"runs": [...], "next": cursor | None}``; pass ``next`` as
        ``before`` for the following page."""
        unknown = sorted(set(filters) - set(RUN_FILTERS))
        if unknown:
            raise InputError("runs", [Problem(k, f"not a filter (one of {', '.join(RUN_FILTERS)})") for k in unknown])
        query = [("limit", str(limit))] + ([("before", before)] if before else [])
        query += [(k, str(v)) for k, v in filters.items() if v is not None]
        page = self._object("GET", "/api/runs", query)
        if not isinstance(page.get("runs"), list) or not isinstance(page.get("next"), (str, type(None))):
            raise ServiceError("GET /api/runs: the answer has no list 'runs' and cursor 'next'")
        return page

    def resolve(self, ref: str) -> str:
        """A run reference as labctl takes it: ``last`` is the newest run; anything else is the run id."""
        if ref != "last":
            return ref
        runs = self.runs(limit=1)["runs"]
        if not runs or not isinstance(runs[0], dict) or not isinstance(runs[0].get("id"), str):
            raise NotFound("run", "last")
        return str(runs[0]["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        return self._object("GET", f"/api/runs/{_seg(run_id)}")

    def results(self, run_id: str) -> list[dict[str, Any]]:
        return self._list(f"/api/runs/{_seg(run_id)}/results")

    def queue(self) -> list[dict[str, Any]]:
        return self._list("/api/queue")

    def hosts(self) -> list[dict[str, Any]]:
        return self._list("/api/hosts")

    def schedules(self) -> list[dict[str, Any]]:
        return self._list("/api/schedules")

    def notifications(self) -> list[dict[str, Any]]:
        """The notification sinks with their delivery state (``labctl notifications``)."""
        return self._list("/api/notifications")

    def canaries(self) -> list[dict[str, Any]]:
        """The canary schedules with their DUTs' last verdicts (``labctl canary list``)."""
        return self._list("/api/canaries")

    def canary_dut(self, host: str, device: str) -> str:
        """The name of ``host``'s declared DUT ``device`` (a name, path or by-id link), as its canary is named."""
        got = self._object("GET", "/api/canaries/dut", [("host", host), ("device", device)], source="labctl canary")
        if not isinstance(got.get("device"), str) or not got["device"]:
            raise ServiceError("GET /api/canaries/dut: the answer names no device")
        return str(got["device"])

    def suites(self) -> list[Any]:
        got = self._json("GET", "/api/suites")
        if not isinstance(got, list):
            raise ServiceError("GET /api/suites: the answer is not a list")
        return got

    def report(self, run_id: str) -> str:
        """The run's HTML report (the page ``labctl report --html`` writes)."""
        return self._text(f"/api/runs/{_seg(run_id)}/report")

    def report_of(self, run_ids: Sequence[str]) -> str:
        """One HTML report of the runs (``labctl report RUN... --html``: several overlaid)."""
        return self._text("/api/report", [("run", r) for r in run_ids])

    def reference(self, run_id: str, suite: str, fmt: str = "json", units: str = "decimal") -> str:
        """The run against the reference set of ``suite``: JSON, or the lines ``labctl compare --reference``
        prints (``table``)."""
        data = self._request("GET", "/api/reference", [("run", run_id), ("suite", suite), ("format", fmt),
                                                       ("units", units)], limit=MAX_TEXT_BYTES)
        return data.decode("utf-8", errors="replace")

    def compare(self, run_ids: Sequence[str], fmt: str = "html", units: str = "decimal", *, width: int = 200,
                color: str | None = None, baseline: str | None = None) -> tuple[str, list[str]]:
        """The comparison in ``fmt`` (``table``: drawn ``width`` wide in ``color``), against ``baseline`` (one of
        the runs; default: the first), and the runs still going on."""
        headers: dict[str, str] = {}
        data = self._request("GET", "/api/compare", [*(("run", r) for r in run_ids), ("format", fmt),
                                                     ("units", units), ("width", str(width)),
                                                     ("color", color or "none"),
                                                     *((("baseline", baseline),) if baseline else ())],
                             limit=MAX_TEXT_BYTES, headers_out=headers)
        partial = [r for r in headers.get("x-partial-runs", "").split(",") if r]
        return data.decode("utf-8", errors="replace"), partial

    def export(self, run_id: str, fmt: str = "csv", table: str = "results", units: str = "decimal") -> str:
        return self._text(f"/api/runs/{_seg(run_id)}/export", [("format", fmt), ("table", table), ("units", units)])

    def hosts_shown(self, *, width: int = 200, color: str | None = None) -> str:
        return self._text("/api/hosts/show", [("width", str(width)), ("color", color or "none")])

    def show(self, run_id: str, *, rounds: bool = False, width: int = 200, color: str | None = None) -> str:
        return self._text(f"/api/runs/{_seg(run_id)}/show", [("rounds", "true" if rounds else "false"),
                                                             ("width", str(width)), ("color", color or "none")])

    def watch_frame(self, run_id: str, *, width: int = 200, color: str | None = None) -> dict[str, Any]:
        """One frame of ``labctl watch`` drawn by the service: ``{"state", "table", "line"}``."""
        return self._object("GET", f"/api/runs/{_seg(run_id)}/watch", [("width", str(width)),
                                                                       ("color", color or "none")])

    def regressions(self, *, since: str | None = None, host: str | None = None,
                    all_: bool = False) -> dict[str, Any]:
        query = [(k, v) for k, v in (("since", since), ("host", host)) if v is not None]
        return self._object("GET", "/api/regressions", [*query, ("all", "true" if all_ else "false")])

    def acknowledge(self, regression_id: str, reason: str = "") -> dict[str, Any]:
        return self._object("POST", f"/api/regressions/{_seg(regression_id)}/ack", body={"reason": reason})

    def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        return self._list(f"/api/runs/{_seg(run_id)}/artifacts")

    def download(self, artifact_id: int | str, dest: str | Path) -> Path:
        """Write an artifact to ``dest`` (a file, or a directory: the artifact's name in it), checking its
        sha256 against the ``X-Content-SHA256`` header; a mismatch leaves nothing at ``dest``."""
        import http.client

        path = f"/api/artifacts/{_seg(str(artifact_id))}"
        conn, resp = self._open("GET", path)
        try:
            if resp.status != 200:
                raise _error(resp.status, _read_bounded(resp, MAX_JSON_BYTES, self.base_url), "GET", path, None)
            want = (resp.getheader("X-Content-SHA256") or "").strip().lower()
            if not re.fullmatch(r"[0-9a-f]{64}", want):
                raise ServiceError(f"GET {path}: no X-Content-SHA256 header; the download cannot be checked")
            target = Path(dest)
            if target.is_dir():
                target = target / _filename(resp.getheader("Content-Disposition"), str(artifact_id))
            tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
            digest, size = hashlib.sha256(), 0
            try:
                with tmp.open("wb") as f:
                    while chunk := resp.read(CHUNK):
                        size += len(chunk)
                        if size > MAX_ARTIFACT_BYTES:
                            raise ServiceError(f"GET {path}: larger than {MAX_ARTIFACT_BYTES >> 20} MiB")
                        digest.update(chunk)
                        f.write(chunk)
                if digest.hexdigest() != want:
                    raise ServiceError(f"GET {path}: sha256 {digest.hexdigest()} differs from the announced {want}")
                tmp.replace(target)
            except (OSError, http.client.HTTPException) as e:
                raise ServiceError(f"GET {path}: the download failed: {e}") from None
            finally:
                tmp.unlink(missing_ok=True)
            return target
        finally:
            conn.close()

    # --- commands (engineer) --------------------------------------------------------------------

    def submit(self, host: str, devices: Sequence[str] = (), *, suite: str | None = None,
               suite_yaml: str | None = None, source: str | None = None, initiators: Sequence[str] = (),
               runtime: int | None = None, scale: float | None = None, priority: int = 0,
               not_before: float | None = None, expires_at: float | None = None, max_rounds: int | None = None,
               live: bool = True, repeat: int | None = None) -> str:
        """Queue a suite (a built-in name, or a suite file's text); the run id. Every problem the service
        finds (suite and target) comes back at once as a SubmissionError."""
        if (suite is None) == (suite_yaml is None):
            raise InputError("submit", [Problem("suite", "give a built-in suite name or a suite's text, not both")])
        body = {"suite": suite, "suite_yaml": suite_yaml, "host": host, "devices": list(devices),
                "initiators": list(initiators), "runtime": runtime, "scale": scale, "priority": priority,
                "not_before": not_before, "expires_at": expires_at, "max_rounds": max_rounds, "live": live,
                "repeat": repeat}
        got = self._object("POST", "/api/runs", body=body, source=source or suite or "suite")
        run_id = got.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise ServiceError("POST /api/runs: the answer names no run_id")
        return run_id

    def _run_command(self, run_id: str, what: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self._object("POST", f"/api/runs/{_seg(run_id)}/{what}", body=body or {})

    def cancel(self, run_id: str, reason: str = "cancelled by user") -> dict[str, Any]:
        return self._run_command(run_id, "cancel", {"reason": reason})

    def pause(self, run_id: str) -> dict[str, Any]:
        return self._run_command(run_id, "pause")

    def resume(self, run_id: str) -> dict[str, Any]:
        return self._run_command(run_id, "resume")

    def rerun(self, run_id: str) -> dict[str, Any]:
        return self._run_command(run_id, "rerun")

    # --- admin ----------------------------------------------------------------------------------

    def canary_add(self, host: str, device: str, *, cron: str, quarantine: bool = False, priority: int = 0,
                   source: str = "canary") -> dict[str, Any]:
        return self._object("POST", "/api/canaries", body={"host": host, "device": device, "cron": cron,
                                                           "quarantine": quarantine, "priority": priority},
                            source=source)

    def schedule_add(self, name: str, cron: str, host: str, devices: Sequence[str], *, suite: str | None = None,
                     suite_yaml: str | None = None, source: str | None = None, runtime: int | None = None,
                     scale: float | None = None, priority: int = 0,
                     expires_after_s: int | None = None) -> dict[str, Any]:
        """A recurring submission (``labctl schedule add``), checked by the service as a submission is."""
        body = {"name": name, "cron": cron, "suite": suite, "suite_yaml": suite_yaml, "host": host,
                "devices": list(devices), "runtime": runtime, "scale": scale, "priority": priority,
                "expires_after_s": expires_after_s}
        return self._object("POST", "/api/schedules", body=body, source=source or suite or "suite")

    def schedule_remove(self, name: str) -> dict[str, Any]:
        return self._object("DELETE", f"/api/schedules/{_seg(name)}")

    def release(self, host: str, device: str | None = None) -> dict[str, Any]:
        return self._object("POST", f"/api/hosts/{_seg(host)}/release", body={"device": device})

    def tokens(self) -> list[dict[str, Any]]:
        return self._list("/api/tokens")

    def token_create(self, name: str, role: str, expires_in_s: int | None = None) -> dict[str, Any]:
        """A new token: ``{name, role, token}``; the token is shown this once."""
        got = self._object("POST", "/api/tokens", body={"name": name, "role": role, "expires_in_s": expires_in_s})
        if not isinstance(got.get("token"), str):
            raise ServiceError("POST /api/tokens: the answer holds no token")
        return got

    def token_revoke(self, name: str) -> dict[str, Any]:
        return self._object("DELETE", f"/api/tokens/{_seg(name)}")


def _seg(value: str) -> str:
    """One path segment: ids are quoted, so a ``/`` or ``..`` in one cannot reach another route."""
    if not value or len(value) > 256:
        raise InputError("id", [Problem("", f"{value[:80]!r} is not an id")])
    return quote(value, safe="")


def _read_bounded(resp: http.client.HTTPResponse, limit: int, base_url: str) -> bytes:
    import http.client

    try:
        declared = int(resp.getheader("Content-Length") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise ServiceError(f"the web service's answer ({declared:,} bytes) is larger than {limit:,} bytes")
    try:
        data = resp.read(limit + 1)
    except (OSError, http.client.HTTPException) as e:
        raise ServiceError(f"the connection to {base_url} broke: {e}") from None
    if len(data) > limit:
        raise ServiceError(f"the web service's answer is larger than {limit:,} bytes")
    return data


def _detail(data: bytes) -> tuple[str, list[Problem]]:
    """The server's ``{"detail": str, "errors": [{"where", "problem"}]}``, size-bounded and type-checked."""
    try:
        body = json.loads(data)
    except ValueError:
        return data[:300].decode(errors="replace").strip(), []
    if not isinstance(body, dict):
        return "", []
    detail = body.get("detail")
    if not isinstance(detail, str):         # FastAPI's own validation errors: a list under detail
        detail = json.dumps(detail)[:300] if detail is not None else ""
    problems = []
    errors = body.get("errors")
    for e in errors[:1000] if isinstance(errors, list) else []:
        if isinstance(e, dict):
            problems.append(Problem(str(e.get("where", ""))[:200], str(e.get("problem", ""))[:1000]))
        elif isinstance(e, str):
            problems.append(Problem("", e[:1000]))
    return detail[:2000], problems


def _error(status: int, data: bytes, method: str, path: str, source: str | None) -> LabError:
    """The LabError of an HTTP error status, carrying the server's reason (and every problem, for input)."""
    import http.client

    detail, problems = _detail(data)
    reason = detail or http.client.responses.get(status, "error")
    if status == 401:
        return AccessError(f"the web service refused the token: {reason} (check --token-file)")
    if status == 403:
        m = re.fullmatch(r"(.{1,80}) has role (\w{1,16}); this needs (\w{1,16})", reason)
        who, role, needed = m.groups() if m else ("this token", "?", "?")
        return _relabel(Forbidden(who, role, needed), f"not allowed: {reason}")
    if status == 404:
        return _relabel(NotFound("resource", path), reason)
    if status == 409:
        errors = [str(p) for p in problems] or [reason]
        # the controller's reasons as labctl prints them against the broker (common.checked_reply): the same words
        return _relabel(CommandRefused(f"{method} {path}", errors), "; ".join(errors))
    if status in (413, 422):
        problems = problems or [Problem("", reason)]
        return (SubmissionError if source else InputError)(source or f"{method} {path}", problems)
    if status == 503:
        return ServiceError(f"service unavailable: {reason}")
    return LabError(f"{method} {path}: HTTP {status}: {reason}")


def _filename(disposition: str | None, fallback: str) -> str:
    """A safe file name from ``Content-Disposition`` (never a path: the server is not trusted with one)."""
    m = re.search(r'filename="?([^";/\\]+)"?', disposition or "")
    name = m.group(1).strip() if m else ""
    if name in (".", "..") or len(name) > 200:
        name = ""
    return name or f"artifact-{fallback}"
