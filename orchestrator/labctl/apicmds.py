"""The ``--api URL --token-file F`` options and what the API backend (orchestrator/labctl/backend/viaapi.py) shares
with them: the client they make (:func:`api_client`, asked by ``backend.backend`` only), a suite as the service takes
it, the runs' and the queue's rows and the export's tables from the service's answers, printed as the direct
commands print them.
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
    from rich.table import Table as RichTable

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


def submission(api: ApiClient, suite_ref: str, host: str, devices: Sequence[str], *, initiators: Sequence[str] = (),
               runtime: int | None = None, scale: float | None = None, live: bool = True, priority: int = 0,
               not_before: float | None = None, expires_at: float | None = None,
               max_rounds: int | None = None, repeat: int | None = None) -> str:
    """A built-in suite goes by name, a suite file by its text (the service validates both, every problem at
    once); the run id."""
    name, text = suite_of(suite_ref)
    return api.submit(host, devices, suite=name, suite_yaml=text, source=suite_ref, initiators=initiators,
                      runtime=runtime, scale=scale, live=live, priority=priority, not_before=not_before,
                      expires_at=expires_at, max_rounds=max_rounds, repeat=repeat)


def submit(api: ApiClient, suite_ref: str, host: str, devices: Sequence[str], **options: Any) -> str:
    """:func:`submission`, its run id printed and returned."""
    run_id = submission(api, suite_ref, host, devices, **options)
    print(run_id)
    return run_id


def runs_table(api: ApiClient, limit: int, **filters: Any) -> RichTable:
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
    return table


def print_runs(api: ApiClient, out: Console, limit: int, **filters: Any) -> None:
    out.print(runs_table(api, limit, **filters))


def queue_rows(api: ApiClient) -> list[tuple[str, ...]]:
    return [(_s(q.get("run_id")), _s(q.get("suite")), _s(q.get("priority")), _s(q.get("target")),
             _s(q.get("state")), f"{_s(q.get('steps_done'))}/{_s(q.get('steps_total'))}", _s(q.get("status"), 120))
            for q in api.queue()]


def export(api: ApiClient, refs: Sequence[str], fmt: str, table: str, output: Path | None,
           units: str = "decimal") -> list[Path]:
    """``labctl export`` through the API: each run's tables as the service builds them (JSON rows), written by the
    same format writer as against the store, so every run, table, format, --output and refusal is the same; the files
    written."""
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
    return list(writer.write(tables, output, sys.stdout))
