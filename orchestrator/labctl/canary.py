"""``labctl canary``: a canary per DUT, a thin layer over schedules (one named ``canary.<host>.<device name>``
running the built-in ``canary`` suite); the judgement is the controller's (:mod:`orchestrator.canary`).

With ``--api URL --token-file F`` every command goes through the web service (GET /api/canaries,
GET /api/canaries/dut, POST /api/canaries, DELETE /api/schedules/{name}) and prints what it prints against the
store and the broker, refusals included."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labcontract.errors import NotFound, Problem, SubmissionError
from labcontract.limits import MAX_PRIORITY
from orchestrator.labctl.common import State, command_group, fails_cleanly, out, reply_or_fail, sessions_or_fail
from orchestrator.labctl.groups import HELP

if TYPE_CHECKING:
    from orchestrator.labctl.api import ApiClient

canary_app = command_group(help=HELP["canary"], no_args_is_help=True)

DEFAULT_CRON = "0 3 * * *"         # orchestrator.canary.DEFAULT_CRON (not imported at labctl's start)


def _api() -> ApiClient | None:
    from orchestrator.labctl.apicmds import api_client

    return api_client()


def _device_name(api: ApiClient | None, host: str, device: str) -> str:
    """The name of a declared DUT named by name, path or by-id link; SubmissionError naming every problem of the
    target (the same both ways: the service judges it with the same code, orchestrator.canary.resolve)."""
    from orchestrator.canary import resolve

    if api is not None:
        return api.canary_dut(host, device)
    with sessions_or_fail()() as s:
        return resolve(s, host, device)[0]


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
    from labcontract.suite import load_suite
    from orchestrator.canary import SUITE, checked_name
    from orchestrator.runs.cron import cron_problem

    api = _api()
    name = checked_name(host, _device_name(api, host, device))
    if api is not None:
        source = load_suite(SUITE).source        # what the direct command names in its refusals: the same
        if (why := cron_problem(cron, time.time())) is not None:
            raise SubmissionError(source, [Problem("--cron", why)])
        api.canary_add(host, device, cron=cron, quarantine=quarantine, priority=priority, source=source)
    else:
        _add_direct(host, device, name, cron, quarantine, priority)
    print(f"canary {name} added ({cron}{', quarantines on drift' if quarantine else ''})")


def _add_direct(host: str, device: str, name: str, cron: str, quarantine: bool, priority: int) -> None:
    from labcontract.protocol import ScheduleAdd, Submit
    from labcontract.transport import redis_client
    from orchestrator.canary import EXPIRES_AFTER_S, QUARANTINE_ACTOR, SUITE
    from orchestrator.runs.client import ControllerClient, _reply_to, check_submission
    from orchestrator.runs.cron import cron_problem

    suite = check_submission(SUITE, host, [device], sessions_or_fail())
    if (why := cron_problem(cron, time.time())) is not None:     # the controller's own check, before sending
        raise SubmissionError(suite.source, [Problem("--cron", why)])
    template = Submit(run_id="-", suite_source=suite.source, suite_text=suite.source_text, host=host,
                      devices=(device,), priority=priority, actor=QUARANTINE_ACTOR if quarantine else None,
                      reply_to="-")
    client, reply_to = ControllerClient(redis_client(State.config.broker_url)), _reply_to()
    reply = client._call(ScheduleAdd(name=name, cron=cron, submit=template, expires_after_s=EXPIRES_AFTER_S,
                                     actor=client.actor, reply_to=reply_to), reply_to)
    reply_or_fail(reply, suite.source)


def _str(value: Any, n: int = 200) -> str:
    return "" if value is None else str(value)[:n]


@canary_app.command("list")
@fails_cleanly
def canary_list() -> None:
    """Canary schedules and each DUT's last verdict."""
    from orchestrator.canary import listing

    def when(t: Any) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if isinstance(t, (int, float)) and t else "-"

    if (api := _api()) is not None:
        rows = api.canaries()
    else:
        with sessions_or_fail()() as s:
            rows = listing(s)
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

    api = _api()
    try:
        dev_name = _device_name(api, host, device)
    except SubmissionError:
        dev_name = device          # a DUT no longer declared: its schedule is named after what it was
    name = checked_name(host, dev_name)
    if api is not None:
        try:
            api.schedule_remove(name)
        except NotFound:                      # as the controller answers labctl: the same refusal both ways
            raise SubmissionError(name, [Problem("", f"no schedule {name!r}")]) from None
    else:
        from labcontract.transport import redis_client
        from orchestrator.runs.client import ControllerClient

        reply_or_fail(ControllerClient(redis_client(State.config.broker_url)).schedule_rm(name), name)
    print(f"canary {name} removed")
