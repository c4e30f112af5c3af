"""``labctl schedule``: recurring submissions, sent to the controller as commands; listed from the store (or both
through the web service: orchestrator/labctl/backend)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from labcontract.errors import LabError
from labcontract.limits import MAX_PRIORITY
from orchestrator.labctl.common import SUITE_HELP, command_group, fails_cleanly, out
from orchestrator.labctl.groups import HELP

schedule_app = command_group(help=HELP["schedule"], no_args_is_help=True)


@schedule_app.command("add")
@fails_cleanly
def schedule_add(
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    suite_ref: Annotated[str, typer.Argument(metavar="SUITE", help=SUITE_HELP)],
    cron: Annotated[str, typer.Option(help="Cron expression (local time), e.g. '0 22 * * 1-5'.")],
    host: Annotated[str, typer.Option(help="Host to run on.")],
    device: Annotated[list[str], typer.Option(help="Declared DUT (repeat for a device group).")],
    priority: Annotated[int, typer.Option(min=-MAX_PRIORITY, max=MAX_PRIORITY)] = 0,
    runtime: Annotated[int | None, typer.Option(help="Set every measured cell's runtime (s).")] = None,
    scale: Annotated[float | None, typer.Option(help="Multiply every duration by this factor.")] = None,
    expires_after: Annotated[str | None, typer.Option(help="Each run expires if not started this long after "
                                                           "it fired, e.g. 10h.")] = None,
) -> None:
    """Add a schedule: the controller queues the suite each time the cron expression says."""
    from labcontract.units import parse_duration
    from orchestrator.labctl.backend import backend
    from orchestrator.runs.cron import cron_problem

    b = backend()
    suite = b.schedule_check(suite_ref, host, device, runtime, scale)   # (through --api: the service checks it)
    source = suite.source
    if (why := cron_problem(cron, time.time())) is not None:     # the controller's own check, before sending
        raise _input_error(source, "--cron", why)
    try:
        expires = parse_duration(expires_after) if expires_after else None
    except ValueError as e:
        raise _input_error(source, "--expires-after", str(e)) from None
    b.schedule_add(name, suite, cron, host, device, priority=priority, runtime=runtime, scale=scale,
                   expires_after_s=expires)
    print(f"schedule {name} added")


def _input_error(source: str, key: str, message: str) -> LabError:
    from labcontract.errors import Problem, SubmissionError

    return SubmissionError(source, [Problem(key, message)])


@schedule_app.command("list")
@fails_cleanly
def schedule_list() -> None:
    """Schedules with their next and last firing."""
    from rich.table import Table

    from orchestrator.labctl.backend import backend

    table = Table("schedule", "cron", "suite", "target", "next", "last", "last run", "last error")
    for x in backend().schedules():
        table.add_row(*_row(x.name, x.cron, x.suite, x.host, x.devices, x.next_fire_at, x.last_fired_at,
                            x.last_run_id, x.last_error, x.disabled_reason))
    out.print(table)


def _row(name: str, cron: str, suite: str, host: str, devices: list[str], next_at: float | None,
         last_at: float | None, last_run: str | None, error: str, disabled: str) -> list[str]:
    """One schedule's row, from the store or from the API alike; a schedule the controller could not fire is
    disabled: the reason where the error goes, in full."""
    def when(t: float | None) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if isinstance(t, (int, float)) and t else "-"

    return [name, cron, suite, f"{host}:{','.join(devices)}", "DISABLED" if disabled else when(next_at),
            when(last_at), last_run or "-", disabled or error[:60]]


@schedule_app.command("rm")
@fails_cleanly
def schedule_rm(name: str) -> None:
    """Remove a schedule (runs it already queued stay)."""
    from orchestrator.labctl.backend import backend

    backend().schedule_remove(name)
    print(f"schedule {name} removed")
