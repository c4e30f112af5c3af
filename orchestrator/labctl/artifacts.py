"""``labctl artifacts RUN``: a run's raw artifacts (fio's JSON output, the job file it ran, its stderr, the drives'
health readings, a purge's commands), listed, or fetched into a directory each checked against the SHA-256 the store
recorded: from the lab's artifact directory, or through the web service with ``--api`` (the same files, the same
names, the same check)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from labcontract.errors import LabError
from orchestrator.labctl.common import State, fails_cleanly, out


@fails_cleanly
def artifacts(
    run: Annotated[str, typer.Argument(metavar="RUN", help="Run id, unique prefix, or 'last'.")],
    step: Annotated[str | None, typer.Option(help="Only this step (its name or id).")] = None,
    output: Annotated[Path | None, typer.Option(help="Fetch them into this directory, as ATTEMPT/NAME, each checked "
                                                     "against its SHA-256; without it, list them.")] = None,
) -> None:
    """A run's raw artifacts (fio.json, job.fio, fio.stderr, ...): listed, or fetched with --output DIR."""
    from rich.table import Table

    from orchestrator.labctl.apicmds import api_client

    api = api_client()
    if api is not None:
        run_id = api.resolve(run)
        rows = api.artifacts(run_id)
    else:
        from orchestrator.labctl.common import sessions_or_fail
        from orchestrator.queries import artifact_rows, resolve_run_id

        with sessions_or_fail()() as s:
            run_id = resolve_run_id(s, run)
            rows = artifact_rows(s, run_id)
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
        if api is not None:
            got = api.download(r["id"], dest)
            if hashlib.sha256(got.read_bytes()).hexdigest() != r["sha256"]:   # the listing's, too
                got.unlink()
                raise LabError(f"{dest}: its SHA-256 differs from the one the run's listing gives")
        else:
            _copy_checked(r, dest)
        print(dest)


def _part(name: str) -> str:
    """A path part made of an id or an artifact name as the store gives it: nothing that climbs out of --output."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:64].lstrip(".")
    return safe or "_"


def _copy_checked(row: dict[str, Any], dest: Path) -> None:
    from orchestrator.artifacts import contained

    src = contained(State.config.artifact_dir, str(row["path"]))
    if src is None:
        raise LabError(f"artifact {row['name']} of attempt {row['attempt_id']}: its file is not in the artifact "
                       f"directory {State.config.artifact_dir}")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    try:
        with src.open("rb") as f, tmp.open("wb") as g:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                g.write(chunk)
        if digest.hexdigest() != row["sha256"]:
            raise LabError(f"{src}: sha256 {digest.hexdigest()} differs from the {row['sha256']} the store recorded")
        shutil.move(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
