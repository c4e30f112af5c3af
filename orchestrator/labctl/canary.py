"""``labctl canary``: a canary per DUT, a thin layer over schedules (one named ``canary.<host>.<device name>``
running the built-in ``canary`` suite); the judgement is the controller's (:mod:`orchestrator.canary`).

With ``--api URL --token-file F`` every command goes through the web service (GET /api/canaries,
GET /api/canaries/dut, POST /api/canaries, DELETE /api/schedules/{name}) and prints what it prints against the
store and the broker, refusals included."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from labcontract.errors import NotFound, Problem, SubmissionError
from labcontract.limits import MAX_PRIORITY
from orchestrator.labctl.backend import backend
from orchestrator.labctl.common import command_group, fails_cleanly, out
from orchestrator.labctl.groups import HELP

canary_app = command_group(help=HELP["canary"], no_args_is_help=True)

DEFAULT_CRON = "0 3 * * *"         # orchestrator.canary.DEFAULT_CRON (not imported at labctl's start)


@canary_app.command("add")
@fails_cleanly
def canary_add(
    host: Annotated[str, typer.Argument(help="Host of the DUT.")],
    device: Annotated[str, typer.Argument(help="Declared DUT: name, path or by-id link.")],
    cron: Annotated[str, typer.Option(help="Cron expression (local time).")] = DEFAULT_CRON,
    quarantine: Annotated[bool, typer.Option("--quarantine", help="Quarantine the DUT when its canary "
                                                                  "drifts (labctl hosts release returns it).")]
    = False,
    priority: Annotated[int, typer.Option(min=-MAX_PRIORITY, max=MAX_PRIORITY,
                                          help="Queue priority of each canary run.")] = 0,
) -> None:
    """Run the built-in canary suite on a DUT on a schedule (default nightly at 03:00)."""
    from orchestrator.canary import checked_name

    b = backend()
    name = checked_name(host, b.canary_dut(host, device))    # every problem of the target, the same both ways
    b.canary_add(host, device, name, cron, quarantine, priority)
    print(f"canary {name} added ({cron}{', quarantines on drift' if quarantine else ''})")


def _str(value: Any, n: int = 200) -> str:
    return "" if value is None else str(value)[:n]


@canary_app.command("list")
@fails_cleanly
def canary_list() -> None:
    """Canary schedules and each DUT's last verdict."""
    def when(t: Any) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if isinstance(t, (int, float)) and t else "-"

    rows = backend().canaries()
    from rich.table import Table

    table = Table("canary", "cron", "quarantine", "next", "last run", "verdict")
    for r in rows:
        error = _str(r.get("last_error"), 60)
        disabled = _str(r.get("disabled_reason"), 2000)
        table.add_row(_str(r.get("name")), _str(r.get("cron")), "yes" if r.get("quarantine") is True else "no",
                      "DISABLED: " + disabled if disabled else when(r.get("next_fire_at")),
                      _str(r.get("last_run_id")) or "-",
                      _str(r.get("verdict"), 2000) + (f" (schedule error: {error})" if error else ""))
    out.print(table)


@canary_app.command("remove")
@fails_cleanly
def canary_remove(
    host: Annotated[str, typer.Argument(help="Host of the DUT.")],
    device: Annotated[str, typer.Argument(help="Declared DUT: name, path or by-id link.")],
) -> None:
    """Remove a DUT's canary schedule (its history and last verdict stay)."""
    from orchestrator.canary import checked_name

    b = backend()
    try:
        dev_name = b.canary_dut(host, device)
    except SubmissionError:
        dev_name = device          # a DUT no longer declared: its schedule is named after what it was
    name = checked_name(host, dev_name)
    try:
        b.schedule_remove(name)
    except NotFound:     # (the web service's answer) as the controller answers labctl: the same refusal both ways
        raise SubmissionError(name, [Problem("", f"no schedule {name!r}")]) from None
    print(f"canary {name} removed")
