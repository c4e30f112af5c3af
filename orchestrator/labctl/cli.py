"""``labctl``: the command line of the lab. Parses options, builds, calls; nothing else."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from labcontract.errors import LabError
from labcontract.limits import MAX_PRIORITY, MAX_REPEAT
from orchestrator.config import DEFAULT_BROKER, DEFAULT_LAB_DIR, LabConfig
from orchestrator.labctl.apicmds import ApiOptions
from orchestrator.labctl.backend import backend
from orchestrator.labctl.common import SUITE_HELP, State, command_group, fail, fails_cleanly, out
from orchestrator.labctl.groups import HELP, add_group, lazy_app
from orchestrator.labctl.notifications import notifications
from orchestrator.labctl.reports import add_report_commands

app = lazy_app(help="Storage test-lab orchestrator: suites -> runs on lab hosts -> results.",
               no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
run_app = command_group(help=HELP["run"], no_args_is_help=True)
# each group imported and built when a command line names it (orchestrator/labctl/groups.py)
for _name, _target in (("suite", "suites:suite_app"), ("run", "cli:run_app"), ("hosts", "hosts:hosts_app"),
                       ("broker", "broker:broker_app"), ("token", "tokens:token_app"),
                       ("regressions", "regressions:regressions_app"), ("canary", "canary:canary_app"),
                       ("prometheus", "prometheus:prometheus_app"), ("schedule", "schedules:schedule_app"),
                       ("analyze", "analyze:analyze_app")):
    add_group(app, _name, f"orchestrator.labctl.{_target}")
add_report_commands(app)   # compare, report, export
app.command()(notifications)


def _print_version(value: bool) -> None:
    """An eager option: it prints before the lab options are resolved (no store, broker or lab dir needed)."""
    if value:
        from labcontract import __version__

        print(f"labctl (storagelab) {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    lab_dir: Annotated[Path | None, typer.Option(envvar="LAB_DIR", help="Lab state: store, artifacts, logs, and its "
                                                 "lab file (lab.toml). Default: the lab of the nearest .lab/lab.toml "
                                                 f"from here upwards (make demo's), else {DEFAULT_LAB_DIR}.")]
    = None,
    broker: Annotated[str | None, typer.Option(envvar="LAB_BROKER_URL", help="Redis URL (Celery broker and streams); "
                                               f"default: the lab file's, else {DEFAULT_BROKER}.")] = None,
    store: Annotated[str | None, typer.Option(envvar="LAB_STORE_URL",
                                              help="Results store URL (default: SQLite in the lab dir).")] = None,
    broker_password_file: Annotated[Path | None, typer.Option(
        envvar="LAB_BROKER_PASSWORD_FILE", help="File holding the broker user's password (the user is the one "
                                                "of --broker, e.g. redis://controller@HOST:6379/0).")] = None,
    broker_ca: Annotated[Path | None, typer.Option(envvar="LAB_BROKER_CA",
                                                   help="CA certificate the broker's TLS certificate is checked "
                                                        "with (rediss:// URLs).")] = None,
    broker_cert: Annotated[Path | None, typer.Option(envvar="LAB_BROKER_CERT",
                                                     help="Client certificate for a broker requiring one.")] = None,
    broker_key: Annotated[Path | None, typer.Option(envvar="LAB_BROKER_KEY",
                                                    help="Key of --broker-cert.")] = None,
    api: Annotated[str | None, typer.Option(envvar="LAB_API_URL", help="Work through the web service's REST API "
                                            "at this URL (submit, cancel, pause, resume, rerun, runs, run show, "
                                            "queue, hosts, report --html, export, compare, regressions and ack, "
                                            "canary, notifications): "
                                            "no store "
                                            "or broker needed.")]
    = None,
    token_file: Annotated[Path | None, typer.Option(envvar="LAB_TOKEN_FILE", help="File holding the API token "
                                                    "(mode 600), with --api.")] = None,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version (labcontract/version.py) and exit.")] = False,
) -> None:
    from orchestrator import labfile
    from orchestrator.labctl.broker import broker_url_of

    try:
        found = labfile.find(Path.cwd(), lab_dir)
        lab = labfile.read(found) if found is not None else labfile.LabFile(Path())
    except LabError as e:
        fail(str(e))
        raise typer.Exit(2) from None
    State.lab = lab if found is not None else None
    # an option or variable given beats the lab file, key by key; a lab file with only an API (a lab reached through
    # its web service) makes labctl work through it
    direct = lab.broker is not None or lab.store is not None
    api = api or (None if direct else lab.api)
    token_file = token_file or (None if direct else lab.token_file)
    ApiOptions.url, ApiOptions.token_file = api, token_file

    State.config = LabConfig(lab_dir=lab_dir or lab.lab_dir or DEFAULT_LAB_DIR, store_url=store or lab.store,
                             broker_url=broker_url_of(broker or lab.broker or DEFAULT_BROKER,
                                                      password_file=broker_password_file, ca=broker_ca,
                                                      cert=broker_cert, key=broker_key))


# --- runs ---------------------------------------------------------------------------------------

@app.command()
@fails_cleanly
def submit(
    suite_ref: Annotated[str, typer.Argument(metavar="SUITE", help=SUITE_HELP)],
    host: Annotated[str | None, typer.Option(help="Host to run on (as registered by its agent); a network "
                                                  "suite: its target.")] = None,
    device: Annotated[list[str] | None, typer.Option(help="Declared DUT on that host: name, path or by-id path. "
                                                          "Repeat for a device group.")] = None,
    initiator: Annotated[list[str] | None, typer.Option(help="A network suite: an initiator host (repeat); "
                                                             "default: the suite's network.initiators.")] = None,
    runtime: Annotated[int | None, typer.Option(help="Set every measured cell's runtime (s).")] = None,
    scale: Annotated[float | None, typer.Option(help="Multiply every duration (runtime, ramp, precondition "
                                                     "round) by this factor.")] = None,
    wait: Annotated[bool, typer.Option(help="Watch the run until it ends, then print its results.")] = False,
    live: Annotated[bool, typer.Option(help="Per-second fio snapshots for every step (live telemetry and "
                                            "series); preconditioning always has them.")] = True,
    priority: Annotated[int, typer.Option(min=-MAX_PRIORITY, max=MAX_PRIORITY,
                                          help="Higher runs first; a waiting run reserves its devices against "
                                               "lower priorities.")] = 0,
    at: Annotated[str | None, typer.Option(help="Not before: 22:00, 'tonight 22:00', 'tomorrow 06:00', +2h, "
                                                "or YYYY-MM-DD HH:MM.")] = None,
    expires_after: Annotated[str | None, typer.Option(help="Expire the run if it has not started this long after "
                                                           "submission (or after --at): e.g. 12h.")] = None,
    max_rounds: Annotated[int | None, typer.Option(min=1, max=100_000, help="Stop preconditioning after this many "
                                                                            "rounds (caps the suite's max_rounds)."
                                                   )] = None,
    repeat: Annotated[int | None, typer.Option(min=1, max=MAX_REPEAT, help="Run every measured cell this many times "
                                                                   "(replaces the suite's repeat).")] = None,
) -> None:
    """Queue a suite on a host's device(s); prints the run id."""
    import time as _time
    from datetime import datetime

    from labcontract.errors import Problem
    from labcontract.units import parse_duration
    from labcontract.when import parse_when

    problems = []
    not_before = expires_at = None
    if at is not None:
        try:
            not_before = parse_when(at, datetime.now().astimezone()).timestamp()
        except ValueError as e:
            problems.append(Problem("--at", str(e)))
    if expires_after is not None:
        try:
            expires_at = (not_before or _time.time()) + parse_duration(expires_after)
        except ValueError as e:
            problems.append(Problem("--expires-after", str(e)))
    b = backend()
    run_id = b.submit(suite_ref, host, list(device or ()), initiators=list(initiator or ()), runtime=runtime,
                      scale=scale, live=live, priority=priority, not_before=not_before, expires_at=expires_at,
                      max_rounds=max_rounds, repeat=repeat, problems=problems, wait=wait)
    print(run_id)
    if wait:
        raise typer.Exit(b.watch(run_id, None, out))


@app.command()
@fails_cleanly
def cancel(run: str, reason: Annotated[str, typer.Option()] = "cancelled by user") -> None:
    """Cancel a queued or running run."""
    _run_command(run, "cancel", reason)


@app.command()
@fails_cleanly
def watch(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")],
          timeout: Annotated[float | None, typer.Option(help="Stop watching after this many seconds.")] = None) -> None:
    """Follow a run: each step's progress bar, elapsed and remaining time, live IOPS and latency."""
    b = backend()
    raise typer.Exit(b.watch(b.resolve(run), timeout, out))


@app.command()
@fails_cleanly
def pause(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")]) -> None:
    """Pause a run: its running step finishes, no new step starts; it keeps its devices."""
    _run_command(run, "pause")


@app.command()
@fails_cleanly
def resume(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")]) -> None:
    """Resume a paused run."""
    _run_command(run, "resume")


@app.command()
@fails_cleanly
def rerun(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")]) -> None:
    """Run again the failed and cancelled steps of a run that ended (its other steps keep their results)."""
    _run_command(run, "rerun")


def _run_command(run: str, what: str, reason: str | None = None) -> None:
    """Resolve a run reference, send one command (cancel, pause, resume, rerun), fail with its answer if refused;
    print ``RUN <done>``."""
    from orchestrator.labctl.backend import RUN_COMMANDS

    b = backend()
    rid = b.resolve(run)
    b.run_command(rid, what, reason)
    print(f"{rid} {RUN_COMMANDS[what]}")


@app.command()
@fails_cleanly
def queue() -> None:
    """What runs, what waits, and what each waiting run waits for (the scheduler's own decision)."""
    from rich.table import Table

    view = backend().queue()
    if view.warning:
        print(f"warning: {view.warning}", file=sys.stderr)
    table = Table("run", "suite", "prio", "target", "state", "steps", "status")
    for row in view.rows:
        table.add_row(*row)
    out.print(table)


@app.command()
@fails_cleanly
def runs(limit: Annotated[int, typer.Option()] = 30) -> None:
    """List runs, newest first."""
    out.print(backend().runs_table(limit))


@run_app.command("show")
@fails_cleanly
def run_show(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")],
             rounds: Annotated[bool, typer.Option(help="Show every precondition round.")] = False) -> None:
    """Steps, states, the four review metrics per cell, preconditioning verdicts, platform."""
    backend().show_run(run, rounds, out)


@run_app.command("report")
@fails_cleanly
def run_report(run: str) -> None:
    """Write the run's Markdown report (results, platform, artifacts); print its path."""
    print(backend().markdown_report(run))
