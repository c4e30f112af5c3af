"""``labctl canary``: a canary per DUT, a thin layer over schedules (one named ``canary.<host>.<device name>``
running the built-in ``canary`` suite); the judgement is the controller's (:mod:`orchestrator.canary`)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from labcontract.errors import Problem, SubmissionError
from labcontract.limits import MAX_PRIORITY
from orchestrator.labctl.common import State, fails_cleanly, out, reply_or_fail, sessions_or_fail

canary_app = typer.Typer(help="A short read-only canary per DUT on a schedule, judged against the DUT's own "
                              "history; a drift flags (optionally quarantines) the device.", no_args_is_help=True)

DEFAULT_CRON = "0 3 * * *"
# a canary that could not start within this long after its firing expires: the DUT was busy (a review) or
# quarantined, and stale canaries must not pile up in the queue
EXPIRES_AFTER_S = 6 * 3600
NAME_MAX = 64        # a schedule name's limit (labcontract.protocol.ScheduleAdd)


def _device_name(host: str, device: str) -> tuple[str, str]:
    """(name, path) of a declared DUT named by name, path or by-id link; every problem of the target at once."""
    from orchestrator.runs.submission import submission_problems
    from orchestrator.store.models import Host, find_device

    with sessions_or_fail()() as s:
        problems = submission_problems(s, host, [device])
        h = s.get(Host, host)
        dev = find_device(h, device) if h is not None and not problems else None
        if dev is None:
            raise SubmissionError("labctl canary", problems or [Problem("DEVICE", f"{device!r}: not found")])
        return dev.name, dev.path


def _checked_name(host: str, dev_name: str) -> str:
    from orchestrator.canary import schedule_name

    name = schedule_name(host, dev_name)
    if len(name) > NAME_MAX:
        raise SubmissionError("labctl canary", [Problem("", f"schedule name {name!r} is longer than {NAME_MAX} "
                                                            "characters (a shorter host or DUT name is needed)")])
    return name


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
    from labcontract.protocol import ScheduleAdd, Submit
    from labcontract.transport import redis_client
    from orchestrator.canary import QUARANTINE_ACTOR, SUITE
    from orchestrator.runs.client import ControllerClient, _reply_to, check_submission
    from orchestrator.runs.cron import cron_problem

    dev_name, _path = _device_name(host, device)
    name = _checked_name(host, dev_name)
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
    print(f"canary {name} added ({cron}{', quarantines on drift' if quarantine else ''})")


@canary_app.command("list")
@fails_cleanly
def canary_list() -> None:
    """Canary schedules and each DUT's last verdict."""
    from sqlalchemy import select

    from orchestrator.canary import CHECK, QUARANTINE_ACTOR
    from orchestrator.runs.health import device_of
    from orchestrator.store.models import Host, Schedule

    def when(t: float | None) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"

    table = Table("canary", "cron", "quarantine", "next", "last run", "verdict")
    with sessions_or_fail()() as s:
        for sch in s.scalars(select(Schedule).where(Schedule.name.startswith("canary.")).order_by(Schedule.name)):
            sub = sch.submit or {}
            host = s.get(Host, str(sub.get("host")))
            devices = sub.get("devices") or []
            dev = device_of(host, str(devices[0])) if host is not None and devices else None
            entry = (host.health or {}).get(f"{CHECK} {dev.path}") if host is not None and dev is not None else None
            verdict = "-"
            if isinstance(entry, dict):
                fails = int(entry.get("fails") or 0)
                verdict = ("DRIFT" + (f" x{fails}" if fails > 1 else "") + ": " if fails else "ok: ") \
                    + str(entry.get("detail") or "")
            if dev is not None and dev.quarantined_at is not None:
                verdict = f"QUARANTINED: {dev.quarantine_reason}"
            table.add_row(sch.name, sch.cron, "yes" if sub.get("actor") == QUARANTINE_ACTOR else "no",
                          "DISABLED: " + sch.disabled_reason if sch.disabled_reason else when(sch.next_fire_at),
                          sch.last_run_id or "-",
                          verdict + (f" (schedule error: {sch.last_error[:60]})" if sch.last_error else ""))
    out.print(table)


@canary_app.command("remove")
@fails_cleanly
def canary_remove(
    host: Annotated[str, typer.Argument(help="Host of the DUT.")],
    device: Annotated[str, typer.Argument(help="Declared DUT: name, path or by-id link.")],
) -> None:
    """Remove a DUT's canary schedule (its history and last verdict stay)."""
    from labcontract.transport import redis_client
    from orchestrator.runs.client import ControllerClient

    try:
        dev_name = _device_name(host, device)[0]
    except SubmissionError:
        dev_name = device          # a DUT no longer declared: its schedule is named after what it was
    name = _checked_name(host, dev_name)
    reply_or_fail(ControllerClient(redis_client(State.config.broker_url)).schedule_rm(name), name)
    print(f"canary {name} removed")
