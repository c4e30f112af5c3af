"""The read side of the notification sinks (``notify_sinks``, written by the controller:
orchestrator.controller.sinkstate): one listing and one table, shared by ``GET /api/notifications``, the hosts page
and ``labctl notifications`` (with and without ``--api``), so all show the same."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import select
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from labcontract.errors import StoreError
from orchestrator.store.models import NotifySink

STATES = ("ok", "failing", "waiting", "inactive")
NONE_YET = ("no notification sinks: the controller delivers the end of a run nowhere (a [notify] table in the lab "
            "file, or labctl controller --notify-webhook / --notify-file / --notify-chat)")


def sink_id(key: str) -> str:
    """The row id of a sink key (16 hex digits of its SHA-256: a file sink's key holds a path of any length)."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def state_of(active: bool, failing: bool, last_success_at: float | None) -> str:
    """``ok`` (its last attempt arrived), ``failing`` (its last attempt failed), ``waiting`` (no attempt yet),
    ``inactive`` (no longer in the controller's configuration)."""
    if not active:
        return "inactive"
    if failing:
        return "failing"
    return "ok" if last_success_at is not None else "waiting"


def listing(s: Session) -> list[dict[str, Any]]:
    """Every sink, the active ones first (by kind, then target): what the API, the page and labctl show."""
    try:
        found = list(s.scalars(select(NotifySink)))
    except (OperationalError, ProgrammingError):       # no such table: a store its controller has not migrated
        raise StoreError("the store has no notification sinks table yet (schema 0017): start the lab's controller "
                         "of this version once, it migrates the store") from None
    rows = sorted(found, key=lambda r: (not r.active, r.kind, r.target, r.key))
    return [{"key": r.key, "kind": r.kind, "target": r.target, "origin": r.origin, "active": r.active,
             "state": state_of(r.active, r.failing, r.last_success_at), "delivered": r.delivered,
             "pending": r.pending, "last_success_at": r.last_success_at, "last_failure_at": r.last_failure_at,
             "last_error": r.last_error, "updated_at": r.updated_at} for r in rows]


def _when(t: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if isinstance(t, int | float) and t else "-"


def _s(value: Any, n: int = 300) -> str:
    return "" if value is None else str(value)[:n]


def sink_name(row: dict[str, Any]) -> str:
    """``file /var/log/runs.jsonl``, ``webhook https://ci.lab/… (webhook:0123456789ab)``: never a URL."""
    kind, target = _s(row.get("kind"), 16), _s(row.get("target"))
    return f"{kind} {target}" if kind == "file" else f"{kind} {target} ({_s(row.get('key'), 80)})"


def print_sinks(out: Console, rows: Sequence[dict[str, Any]]) -> None:
    """``labctl notifications``: a row per sink (from the store or from the API: the same rows)."""
    if not rows:
        print(NONE_YET)
        return
    table = Table("sink", "from", "state", "delivered", "pending", "last success", "last failure", "reason")
    for r in rows:
        failed = bool(r.get("last_failure_at"))
        table.add_row(sink_name(r), _s(r.get("origin"), 32), _s(r.get("state"), 16), _s(r.get("delivered")),
                      _s(r.get("pending")), _when(r.get("last_success_at")), _when(r.get("last_failure_at")),
                      _s(r.get("last_error")) if failed else "")
    out.print(table)
