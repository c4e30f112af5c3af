"""``labctl suite``: check suite files, list the built-in ones, print a suite's plan and fio jobs, import fio job
files as a suite. Reads files only: the same with and without ``--api``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from labcontract.limits import MAX_REPEAT
from orchestrator.labctl.common import SUITE_HELP, command_group, fail, fails_cleanly, out
from orchestrator.labctl.groups import HELP

suite_app = command_group(help=HELP["suite"], no_args_is_help=True)


@suite_app.command("validate")
@fails_cleanly
def suite_validate(files: Annotated[list[str], typer.Argument(help=SUITE_HELP)]) -> None:
    """Validate suites; report every problem of every one."""
    from labcontract.errors import SuiteError
    from labcontract.suite import load_suite, measured_points, measured_seconds, steps_of

    failed = 0
    for f in files:
        try:
            suite = load_suite(f)
        except SuiteError as e:
            failed += 1
            fail(str(e))
            continue
        pc = suite.phases.precondition
        extra = f", preconditioning up to {pc.max_rounds} x {pc.round}s per group" if pc else ""
        what = "cells" if suite.app is None else f"{suite.kind} points"
        out.print(f"{f}: ok: suite {suite.name}, {measured_points(suite)} {what}, {steps_of(suite)} steps, "
                  f"~{measured_seconds(suite)}s measured{extra}", highlight=False)
    if failed:
        raise typer.Exit(1)


@suite_app.command("list")
def suite_list() -> None:
    """The built-in suites."""
    from rich.table import Table

    from labcontract.suite import builtin_suites, load_suite, measured_points

    table = Table("suite", "kind", "cells", "devices", "description")
    for name in builtin_suites():
        s = load_suite(name)
        table.add_row(name, s.kind, str(measured_points(s)), "network" if s.network else str(s.devices or "any"),
                      s.description)
    out.print(table)


@suite_app.command("render")
@fails_cleanly
def suite_render(
    suite: Annotated[str, typer.Argument(help=SUITE_HELP)],
    device: Annotated[list[str] | None, typer.Option(help="DUT path(s) for filename= (default: ${LAB_DUT}).")]
    = None,
    runtime: Annotated[int | None, typer.Option(help="Set every measured cell's runtime (s).")] = None,
    scale: Annotated[float | None, typer.Option(help="Multiply every duration by this factor.")] = None,
    repeat: Annotated[int | None, typer.Option(min=1, max=MAX_REPEAT, help="Run every measured cell this many times "
                                                                   "(replaces the suite's repeat).")] = None,
) -> None:
    """Print the plan: every step, and the exact fio job file of each fio step."""
    from labcontract.fiojob import DUT_PLACEHOLDER
    from labcontract.suite import load_suite
    from orchestrator.runs.planner import plan

    def step_cell(cell: dict[str, object]) -> str:
        return ", ".join(f"{k}={v}" for k, v in cell.items())

    s = load_suite(suite)
    devices = device or [DUT_PLACEHOLDER] if s.devices is None else device or [
        DUT_PLACEHOLDER if i == 0 else f"${{LAB_DUT{i}}}" for i in range(s.devices)]
    rounds = s.phases.rounds
    for step in plan(s, devices, runtime=runtime, scale=scale, repeat=repeat):
        more = " (further rounds until steady state)" if step.kind == "precondition" else ""
        if rounds is not None and step.kind == "precondition":
            more = " (workload-independent preconditioning: the DUT written through once)"
        elif rounds is not None and step.kind == "measure":
            more = (f" (round 1; every cell again each round until {step_cell(rounds.cell)} is steady in "
                    f"{rounds.track}, at most {rounds.max_rounds} rounds)")
        print(f"### step {step.seq}: {step.kind} {step.name}{more}")
        if step.note:
            print(f"; {step.note}")
        if step.kind == "app":      # the step's AppStart (labcontract.apps), as the start message carries it
            start = {k: v for k, v in json.loads(step.job_text).items() if v is not None or k == "fs_size_bytes"}
            print(json.dumps(start, indent=2) + "\n")
            continue
        print(step.job_text or "; purge: blkdiscard (block device) / punch-hole (file) of every DUT\n")


@suite_app.command("import")
@fails_cleanly
def suite_import(
    jobfiles: Annotated[list[str], typer.Argument(metavar="JOB.fio", help="fio job files, in the order to run them.")],
    dut: Annotated[str | None, typer.Option(help="The declared DUT (name or path) the jobs' filename= stands for; "
                                                 "named in the report and the suite's submit line.")] = None,
    output: Annotated[Path | None, typer.Option(help="Write the suite here (default: print it).")] = None,
    name: Annotated[str | None, typer.Option(help="The suite's name (default: the first file's name).")] = None,
) -> None:
    """A suite from fio job files: every option mapped, or listed with the reason it is not taken. Exits 1 only
    when no job could be imported."""
    from labcontract.fioimport import import_jobfiles
    from labcontract.fiojobfile import read_jobfile

    result = import_jobfiles([read_jobfile(f) for f in jobfiles], name=name, dut=dut)
    summary = (f"{len(result.profiles)} of {result.jobs_read} job(s) imported as profiles "
               f"({', '.join(result.profiles)}); {len(result.notes)} note(s)")
    if output is None:
        print(result.text, end="")
    else:
        output.write_text(result.text)
        summary = f"{output}: " + summary
    print(summary + (":" if result.notes else ""), file=sys.stderr)
    for note in result.notes:
        print(f"  {note}", file=sys.stderr)
