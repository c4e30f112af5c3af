"""``labctl schedule``: recurring submissions, sent to the controller as commands; listed from the store."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from labcontract.errors import LabError
from labcontract.limits import MAX_PRIORITY
from orchestrator.labctl.common import SUITE_HELP, State, fails_cleanly, out, reply_or_fail
from orchestrator.labctl.common import sessions_or_fail as _sessions

schedule_app = typer.Typer(help="Recurring submissions (cron), e.g. a nightly regression.", no_args_is_help=True)


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
    from orchestrator.runs.client import ControllerClient, check_submission
    from orchestrator.runs.cron import cron_problem

    suite = check_submission(suite_ref, host, device, _sessions(), runtime=runtime, scale=scale)
    if (why := cron_problem(cron, time.time())) is not None:     # the controller's own check, before sending
        raise _input_error(suite.source, "--cron", why)
    try:
        expires = parse_duration(expires_after) if expires_after else None
    except ValueError as e:
        raise _input_error(suite.source, "--expires-after", str(e)) from None
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
    import time as _time

    from sqlalchemy import select

    from orchestrator.store.models import Schedule

    def when(t: float | None) -> str:
        return _time.strftime("%Y-%m-%d %H:%M", _time.localtime(t)) if t else "-"

    table = Table("schedule", "cron", "suite", "target", "next", "last", "last run", "last error")
    with _sessions()() as s:
        for sch in s.scalars(select(Schedule).order_by(Schedule.name)):
            sub = sch.submit
            # a schedule the controller could not fire is disabled: the reason where the error goes, in full
            table.add_row(sch.name, sch.cron, str(sub.get("suite_source")),
                          f"{sub.get('host')}:{','.join(sub.get('devices', []))}",
                          "DISABLED" if sch.disabled_reason else when(sch.next_fire_at),
                          when(sch.last_fired_at), sch.last_run_id or "-",
                          sch.disabled_reason or sch.last_error[:60])
    out.print(table)


@schedule_app.command("rm")
@fails_cleanly
def schedule_rm(name: str) -> None:
    """Remove a schedule (runs it already queued stay)."""
    from labcontract.transport import redis_client
    from orchestrator.runs.client import ControllerClient

    reply_or_fail(ControllerClient(redis_client(State.config.broker_url)).schedule_rm(name), name)
    print(f"schedule {name} removed")
