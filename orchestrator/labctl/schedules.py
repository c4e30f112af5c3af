"""``labctl schedule``: recurring submissions, sent to the controller as commands; listed from the store."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from labcontract.errors import LabError
from labcontract.limits import MAX_PRIORITY
from orchestrator.labctl.common import SUITE_HELP, State, command_group, fails_cleanly, out, reply_or_fail
from orchestrator.labctl.common import sessions_or_fail as _sessions
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
    from labcontract.transport import redis_client
    from labcontract.units import parse_duration
    from orchestrator.labctl.apicmds import api_client, suite_of
    from orchestrator.runs.client import ControllerClient, check_submission
    from orchestrator.runs.cron import cron_problem

    if (api_ := api_client()) is not None:      # the service checks the suite and the target as a submission
        source = suite_ref
    else:
        suite = check_submission(suite_ref, host, device, _sessions(), runtime=runtime, scale=scale)
        source = suite.source
    if (why := cron_problem(cron, time.time())) is not None:     # the controller's own check, before sending
        raise _input_error(source, "--cron", why)
    try:
        expires = parse_duration(expires_after) if expires_after else None
    except ValueError as e:
        raise _input_error(source, "--expires-after", str(e)) from None
    if api_ is not None:
        name_, text = suite_of(suite_ref)
        api_.schedule_add(name, cron, host, device, suite=name_, suite_yaml=text, source=suite_ref,
                          runtime=runtime, scale=scale, priority=priority,
                          expires_after_s=None if expires is None else int(expires))
        print(f"schedule {name} added")
        return
    reply = ControllerClient(redis_client(State.config.broker_url)).schedule_add(
        name, cron, suite, host, device, runtime=runtime, scale=scale, priority=priority, expires_after_s=expires)
    reply_or_fail(reply, suite.source)
    print(f"schedule {name} added")


def _input_error(source: str, key: str, message: str) -> LabError:
    from labcontract.errors import Problem, SubmissionError

    return SubmissionError(source, [Problem(key, message)])


@schedule_app.command("list")
@fails_cleanly
def schedule_list() -> None:
    """Schedules with their next and last firing."""
    from rich.table import Table

    from orchestrator.labctl.apicmds import api_client

    table = Table("schedule", "cron", "suite", "target", "next", "last", "last run", "last error")
    if (api_ := api_client()) is not None:
        for x in api_.schedules():
            table.add_row(*_row(str(x.get("name")), str(x.get("cron")), str(x.get("suite")), str(x.get("host")),
                                [str(d) for d in x.get("devices") or []], x.get("next_fire_at"),
                                x.get("last_fired_at"), x.get("last_run_id"), str(x.get("last_error") or ""),
                                str(x.get("disabled_reason") or "")))
        out.print(table)
        return
    from sqlalchemy import select

    from orchestrator.store.models import Schedule

    with _sessions()() as s:
        for sch in s.scalars(select(Schedule).order_by(Schedule.name)):
            sub = sch.submit
            table.add_row(*_row(sch.name, sch.cron, str(sub.get("suite_source")), str(sub.get("host")),
                                list(sub.get("devices", [])), sch.next_fire_at, sch.last_fired_at, sch.last_run_id,
                                sch.last_error, sch.disabled_reason))
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
    from orchestrator.labctl.apicmds import api_client

    if (api_ := api_client()) is not None:
        api_.schedule_remove(name)
        print(f"schedule {name} removed")
        return
    from labcontract.transport import redis_client
    from orchestrator.runs.client import ControllerClient

    reply_or_fail(ControllerClient(redis_client(State.config.broker_url)).schedule_rm(name), name)
    print(f"schedule {name} removed")
