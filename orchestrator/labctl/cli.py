"""``labctl``: the command line of the lab. Parses options, builds, calls; nothing else."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from labcontract.errors import LabError
from labcontract.limits import MAX_PRIORITY, MAX_REPEAT
from orchestrator.config import DEFAULT_BROKER, DEFAULT_LAB_DIR, LabConfig
from orchestrator.labctl.apicmds import ApiOptions, api_client
from orchestrator.labctl.common import SUITE_HELP, State, checked_reply, command_group, fail, fails_cleanly, out
from orchestrator.labctl.common import sessions_or_fail as _sessions
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

    from labcontract.errors import Problem, SubmissionError
    from labcontract.transport import redis_client
    from labcontract.units import parse_duration
    from labcontract.when import parse_when
    from orchestrator.runs.client import ControllerClient, check_submission

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
    devices, initiators = list(device or ()), list(initiator or ())
    if (api_ := api_client()) is not None:      # the web service validates the suite and the target
        from orchestrator.labctl import apicmds

        if problems:
            raise SubmissionError(suite_ref, problems)
        if wait:
            raise SubmissionError(suite_ref, [Problem("--wait", "not through --api: follow the run's page")])
        apicmds.submit(api_, suite_ref, host or "", devices, initiators=initiators, runtime=runtime, scale=scale,
                       live=live, priority=priority, not_before=not_before, expires_at=expires_at,
                       max_rounds=max_rounds, repeat=repeat)
        return
    try:          # judged as the controller will judge it (orchestrator.runs.submission.judge)
        suite = check_submission(suite_ref, host or "", devices, _sessions(), initiators, runtime=runtime,
                                 scale=scale, repeat=repeat, max_rounds=max_rounds)
    except SubmissionError as e:
        raise SubmissionError(e.source, [*e.problems, *problems]) from None
    if suite.network is None and host is None:
        problems.append(Problem("--host", "required (the host whose DUTs the suite runs on)"))
    if problems:
        raise SubmissionError(suite.source, problems)
    client = ControllerClient(redis_client(State.config.broker_url))
    run_id, reply = client.submit(
        suite, host or "", devices, runtime, scale, live, priority=priority, not_before=not_before,
        expires_at=expires_at, initiators=initiators, max_rounds=max_rounds, repeat=repeat)
    if reply is None:
        seen = client.controller_seen()
        when = f" (last seen {time.time() - seen:,.0f} s ago)" if seen is not None else ""
        print(f"warning: the controller{when} has not answered yet; the submission waits in the broker",
              file=sys.stderr)
    print(run_id)
    if wait:
        from orchestrator.labctl.watch import watch_run

        raise typer.Exit(watch_run(_sessions(), redis_client(State.config.broker_url), run_id, out))


@app.command()
@fails_cleanly
def cancel(run: str, reason: Annotated[str, typer.Option()] = "cancelled by user") -> None:
    """Cancel a queued or running run."""
    if (api_ := api_client()) is not None:
        from orchestrator.labctl.apicmds import run_command

        return run_command(api_, run, "cancel", reason)
    _run_command(run, "cancelled", lambda client, rid: client.cancel(rid, reason))


@app.command()
@fails_cleanly
def watch(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")],
          timeout: Annotated[float | None, typer.Option(help="Stop watching after this many seconds.")] = None) -> None:
    """Follow a run: each step's progress bar, elapsed and remaining time, live IOPS and latency."""
    if (api_ := api_client()) is not None:      # each frame drawn by the service for this terminal: the same view
        from rich.text import Text

        from orchestrator.labctl.watch import follow
        from orchestrator.textout import terminal_of
        from orchestrator.watchframe import Frame

        rid = api_.resolve(run)
        width, color = terminal_of(out)

        def frame() -> Frame:
            got = api_.watch_frame(rid, width=width, color=color)
            return Frame(str(got.get("state", "")), Text.from_ansi(str(got.get("table", "")).rstrip("\n")),
                         str(got.get("line", "")))

        def final() -> None:
            out.file.flush()
            sys.stdout.write(api_.show(rid, width=width, color=color))
        raise typer.Exit(follow(frame, final, rid, out, timeout_s=timeout, pipe_interval=1.0))
    from labcontract.transport import redis_client
    from orchestrator.labctl.watch import watch_run
    from orchestrator.queries import resolve_run_id

    db = _sessions()
    with db() as s:
        rid = resolve_run_id(s, run)
    raise typer.Exit(watch_run(db, redis_client(State.config.broker_url), rid, out, timeout_s=timeout))


@app.command()
@fails_cleanly
def pause(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")]) -> None:
    """Pause a run: its running step finishes, no new step starts; it keeps its devices."""
    if (api_ := api_client()) is not None:
        from orchestrator.labctl.apicmds import run_command

        return run_command(api_, run, "pause")
    _run_command(run, "paused", lambda client, rid: client.pause(rid))


@app.command()
@fails_cleanly
def resume(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")]) -> None:
    """Resume a paused run."""
    if (api_ := api_client()) is not None:
        from orchestrator.labctl.apicmds import run_command

        return run_command(api_, run, "resume")
    _run_command(run, "resumed", lambda client, rid: client.resume(rid))


@app.command()
@fails_cleanly
def rerun(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")]) -> None:
    """Run again the failed and cancelled steps of a run that ended (its other steps keep their results)."""
    if (api_ := api_client()) is not None:
        from orchestrator.labctl.apicmds import run_command

        return run_command(api_, run, "rerun")
    _run_command(run, "queued again", lambda client, rid: client.rerun(rid))


def _run_command(run: str, done: str, send: Callable[[Any, str], Any]) -> None:
    """Resolve a run reference, send one command to the controller, fail with its answer if refused."""
    from labcontract.transport import redis_client
    from orchestrator.queries import resolve_run_id
    from orchestrator.runs.client import ControllerClient

    with _sessions()() as s:
        rid = resolve_run_id(s, run)
    checked_reply(send(ControllerClient(redis_client(State.config.broker_url)), rid))
    print(f"{rid} {done}")


@app.command()
@fails_cleanly
def queue() -> None:
    """What runs, what waits, and what each waiting run waits for (the scheduler's own decision)."""
    if (api_ := api_client()) is not None:
        from orchestrator.labctl.apicmds import print_queue

        return print_queue(api_, out)
    import time as _time

    from sqlalchemy import select

    from orchestrator.kinds import agent_kinds
    from orchestrator.queries import host_up
    from orchestrator.runs.scheduling import decide
    from orchestrator.store.models import Host, Run

    now = _time.time()

    def up(h: Host | None) -> bool:
        return host_up(h, now)

    from rich.table import Table

    table = Table("run", "suite", "prio", "target", "state", "steps", "status")
    db = _sessions()
    gone = controller_unreachable(db, now)     # then the hosts only look silent: nothing is applied
    if gone:
        print(f"warning: the controller is unreachable: {gone}; the states below are as it left them (hosts "
              "may look down because nobody reads their heartbeats)", file=sys.stderr)
    with db() as s:
        runs = list(s.scalars(select(Run).where(Run.state.in_(["QUEUED", "RUNNING", "PAUSED"]))))
        hosts = {h.name: h for h in s.scalars(select(Host))}
        decision = decide(runs, hosts, now, up, needs=agent_kinds())
        if gone:
            decision.waits.update({r.id: "controller unreachable" for r in runs})
        starting = {r.id for r, _st in decision.dispatch} if not gone else set()
        order = sorted(runs, key=lambda r: (r.state == "QUEUED", -r.priority, r.submitted_at))
        for r in order:
            done = sum(1 for st in r.steps if st.state in ("SUCCEEDED", "FAILED", "CANCELLED"))
            running = next((st.name for st in r.steps if st.state in ("DISPATCHED", "RUNNING", "LOST")), None)
            status = decision.waits.get(r.id) or (f"running {running}" if running else
                                                  "starting" if r.id in starting else "")
            table.add_row(r.id, r.suite_name, str(r.priority), f"{r.host}:{','.join(r.devices or [r.device])}",
                          r.state, f"{done}/{len(r.steps)}", status)
    out.print(table)


def controller_unreachable(db: Any, now: float) -> str | None:
    """Why the controller is not working the queue (its lease, orchestrator.store.lease), or None when it is."""
    from orchestrator.store.lease import absence, current

    try:
        lease = current(db)
    except Exception:             # a store from before the lease (no table): cannot tell
        return None
    return absence(lease, now)


@app.command()
@fails_cleanly
def runs(limit: Annotated[int, typer.Option()] = 30) -> None:
    """List runs, newest first."""
    if (api_ := api_client()) is not None:
        from orchestrator.labctl.apicmds import print_runs

        return print_runs(api_, out, limit)
    import time

    from rich.table import Table

    from orchestrator.queries import list_runs

    table = Table("run", "suite", "target", "state", "steps", "submitted", "reason")
    with _sessions()() as s:
        for r, done, total in list_runs(s, limit):
            lab = f"{r.lab}: " if r.lab else ""          # a run imported from another lab (labctl import)
            table.add_row(r.id, r.suite_name, f"{lab}{r.host}:{r.device}", r.state, f"{done}/{total}",
                          time.strftime("%m-%d %H:%M:%S", time.localtime(r.submitted_at)), r.reason[:60])
    out.print(table)


@run_app.command("show")
@fails_cleanly
def run_show(run: Annotated[str, typer.Argument(help="Run id, unique prefix, or 'last'.")],
             rounds: Annotated[bool, typer.Option(help="Show every precondition round.")] = False) -> None:
    """Steps, states, the four review metrics per cell, preconditioning verdicts, platform."""
    if (api_ := api_client()) is not None:      # drawn by the service for this terminal: the same output
        from orchestrator.textout import terminal_of

        width, color = terminal_of(out)
        sys.stdout.write(api_.show(api_.resolve(run), rounds=rounds, width=width, color=color))
        return
    from orchestrator.queries import run_detail
    from orchestrator.report import print_run

    with _sessions()() as s:
        print_run(out, run_detail(s, run), rounds=rounds, artifact_root=State.config.artifact_dir)


@run_app.command("report")
@fails_cleanly
def run_report(run: str) -> None:
    """Write the run's Markdown report (results, platform, artifacts); print its path."""
    from orchestrator.queries import run_detail
    from orchestrator.report import write_markdown

    with _sessions()() as s:
        print(write_markdown(run_detail(s, run), State.config.report_dir, State.config.artifact_dir))
