"""``labctl artifacts RUN``: a run's raw artifacts (fio's JSON output, the job file it ran, its stderr, the drives'
health readings, a purge's commands), listed, or fetched into a directory each checked against the SHA-256 the store
recorded: from the lab's artifact directory, or through the web service with ``--api`` (the same files, the same
names, the same check)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from labcontract.errors import LabError
from orchestrator.labctl.common import fails_cleanly, out


@fails_cleanly
def artifacts(
    run: Annotated[str, typer.Argument(metavar="RUN", help="Run id, unique prefix, or 'last'.")],
    step: Annotated[str | None, typer.Option(help="Only this step (its name or id).")] = None,
    output: Annotated[Path | None, typer.Option(help="Fetch them into this directory, as ATTEMPT/NAME, each checked "
                                                     "against its SHA-256; without it, list them.")] = None,
) -> None:
    """A run's raw artifacts (fio.json, job.fio, fio.stderr, ...): listed, or fetched with --output DIR."""
    from rich.table import Table

    from orchestrator.labctl.backend import backend

    b = backend()
    run_id, rows = b.artifacts(run)
    if step is not None:
        rows = [r for r in rows if step in (r.get("step"), r.get("step_id"))]
        if not rows:
            raise LabError(f"run {run_id} has no artifact of a step {step!r}")
    if output is None:
        table = Table("step", "attempt", "name", "bytes", "sha256")
        for r in rows:
            table.add_row(str(r.get("step") or r["step_id"]), str(r["attempt_id"]), str(r["name"]),
                          f"{int(r['size']):,}", str(r["sha256"])[:16])
        out.print(table)
        return
    for r in rows:
        dest = output / _part(str(r["attempt_id"])) / _part(str(r["name"]))
        dest.parent.mkdir(parents=True, exist_ok=True)
        b.fetch_artifact(r, dest)           # checked against its SHA-256 (the store's, or the listing's)
        print(dest)


def _part(name: str) -> str:
    """A path part made of an id or an artifact name as the store gives it: nothing that climbs out of --output."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:64].lstrip(".")
    return safe or "_"
