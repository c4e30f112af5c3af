"""What ``labctl`` commands do when ``--api URL --token-file F`` is given: the same commands, through the web
service's REST API (orchestrator/labctl/api.py) instead of the store and the broker, so an engineer needs a token
and nothing else. cli.py calls these when :func:`api_client` answers; the output matches the direct commands'.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labcontract.errors import ConfigError, Problem, SubmissionError

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.labctl.api import ApiClient

SUITE_MAX_BYTES = 1 << 20           # the service refuses larger bodies (max_body_bytes); say so before sending


class ApiOptions:
    """The global ``--api`` / ``--token-file`` options, set by cli.py's callback."""

    url: str | None = None
    token_file: Path | None = None


def api_client() -> ApiClient | None:
    """The API client when ``--api`` was given (it needs ``--token-file``), else None: the direct path."""
    if ApiOptions.url is None:
        if ApiOptions.token_file is not None:
            raise ConfigError("--token-file", str(ApiOptions.token_file), "is used only with --api URL")
        return None
    if ApiOptions.token_file is None:
        raise ConfigError("--api", ApiOptions.url[:200], "needs --token-file (a file holding the token, mode 600)")
    from orchestrator.labctl.api import ApiClient  # (imported when --api is given: not at labctl's start)

    api = ApiClient.from_token_file(ApiOptions.url, ApiOptions.token_file)
    if api.scheme == "http" and api.host not in ("127.0.0.1", "::1", "localhost"):
        print(f"warning: --api {api.base_url} is plain http: the token crosses the network unencrypted (use the "
              "https URL of the service's TLS proxy, docs/web.md)", file=sys.stderr)
    return api


def _when(t: Any) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) and t else "-"


def _items(value: Any) -> list[Any]:
    """A list from the wire, or nothing: a field of the wrong type prints as empty, never breaks the table."""
    return value if isinstance(value, list) else []


def _s(value: Any, n: int = 200) -> str:
    return "-" if value is None else str(value)[:n]


def suite_of(suite_ref: str) -> tuple[str | None, str | None]:
    """What the service takes for a suite: a built-in suite's name, or a suite file's text (bounded)."""
    from labcontract.suite import builtin_suites, is_bare_name

    if is_bare_name(suite_ref) and suite_ref in builtin_suites():
        return suite_ref, None
    try:
        with Path(suite_ref).open("rb") as f:
            raw = f.read(SUITE_MAX_BYTES + 1)
    except OSError as e:
        raise SubmissionError(suite_ref, [Problem("", f"cannot read the suite file: {e.strerror}")]) from None
    if len(raw) > SUITE_MAX_BYTES:
        raise SubmissionError(suite_ref, [Problem("", f"larger than {SUITE_MAX_BYTES >> 10} KiB")])
    return None, raw.decode("utf-8", errors="replace")


def submit(api: ApiClient, suite_ref: str, host: str, devices: Sequence[str], *, initiators: Sequence[str] = (),
           runtime: int | None = None, scale: float | None = None, live: bool = True, priority: int = 0,
           not_before: float | None = None, expires_at: float | None = None,
           max_rounds: int | None = None, repeat: int | None = None) -> str:
    """A built-in suite goes by name, a suite file by its text (the service validates both, every problem at
    once); prints and returns the run id."""
    name, text = suite_of(suite_ref)
    run_id = api.submit(host, devices, suite=name, suite_yaml=text, source=suite_ref, initiators=initiators,
                        runtime=runtime, scale=scale, live=live, priority=priority, not_before=not_before,
                        expires_at=expires_at, max_rounds=max_rounds, repeat=repeat)
    print(run_id)
    return run_id


def run_command(api: ApiClient, ref: str, what: str, reason: str | None = None) -> None:
    """cancel / pause / resume / rerun; prints ``RUN <done>`` as the direct commands do."""
    rid = api.resolve(ref)
    if what == "cancel":
        api.cancel(rid, reason or "cancelled by user")
    else:
        getattr(api, what)(rid)
    done = {"cancel": "cancelled", "pause": "paused", "resume": "resumed", "rerun": "queued again"}[what]
    print(f"{rid} {done}")


def print_runs(api: ApiClient, out: Console, limit: int, **filters: Any) -> None:
    from rich.table import Table

    table = Table("run", "suite", "target", "state", "steps", "submitted", "by", "reason")
    got, before = 0, None
    while got < limit:
        page = api.runs(limit=min(200, limit - got), before=before, **filters)
        for r in page["runs"]:
            if not isinstance(r, dict):
                continue
            devices = _items(r.get("devices"))
            lab = f"{_s(r.get('lab'), 64)}: " if r.get("lab") else ""      # a run imported from another lab
            table.add_row(_s(r.get("id")), _s(r.get("suite")),
                          f"{lab}{_s(r.get('host'))}:{','.join(map(str, devices))}",
                          _s(r.get("state")), f"{_s(r.get('steps_done'))}/{_s(r.get('steps_total'))}",
                          _when(r.get("submitted_at")), _s(r.get("submitted_by"), 40), _s(r.get("reason"), 60))
            got += 1
        before = page["next"]
        if not before or not page["runs"]:
            break
    out.print(table)


def print_queue(api: ApiClient, out: Console) -> None:
    from rich.table import Table

    table = Table("run", "suite", "prio", "target", "state", "steps", "status")
    for q in api.queue():
        table.add_row(_s(q.get("run_id")), _s(q.get("suite")), _s(q.get("priority")), _s(q.get("target")),
                      _s(q.get("state")), f"{_s(q.get('steps_done'))}/{_s(q.get('steps_total'))}",
                      _s(q.get("status"), 120))
    out.print(table)


def write_report(api: ApiClient, refs: Sequence[str], html: Path) -> None:
    """``labctl report RUN... --html FILE`` through the API: the service's rendering, written to FILE."""
    from labcontract.errors import LabError

    text = api.report_of([api.resolve(r) for r in refs])
    try:
        html.write_text(text, encoding="utf-8")
    except OSError as e:
        raise LabError(f"{html}: cannot write the HTML report: {e.strerror or e}") from None
    print(html)


def export(api: ApiClient, refs: Sequence[str], fmt: str, table: str, output: Path | None,
           units: str = "decimal") -> None:
    """``labctl export`` through the API: each run's tables as the service builds them (JSON rows), written by the
    same format writer as against the store, so every run, table, format, --output and refusal is the same."""
    import json

    from labcontract.errors import ExportError
    from orchestrator import units as unit
    from orchestrator.export import format_of, table_names
    from orchestrator.export.tables import TABLES, Table

    writer = format_of(fmt)
    names = table_names(table)
    unit.check_units(units)
    rows: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for ref in refs:
        try:
            doc = json.loads(api.export(api.resolve(ref), "json", table, units))
        except ValueError:
            raise ExportError("the web service's export is not JSON") from None
        for n in names:
            got = doc.get(n) if isinstance(doc, dict) else None
            if not isinstance(got, list) or not all(isinstance(r, dict) for r in got):
                raise ExportError(f"the web service's export has no {n} table")
            rows[n] += got
    tables = [Table(n, tuple(unit.named(c, units) for c in TABLES[n][0]), rows[n]) for n in names]
    for path in writer.write(tables, output, sys.stdout):
        print(path)
