"""``labctl import``: the runs of another lab into this lab's store, from its export (``labctl export --format lab``:
a directory or a ``.tar.gz``) or read from its store. labctl judges the export whole first (every problem at once,
nothing sent when there is one), then checks each run's artifacts against their sha256 (a run with one missing or
different is refused with the reason; the others go on) and sends them and the run to the controller, the store's
only writer (orchestrator.controller.imports). Importing an export twice changes nothing."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from labcontract.errors import ExportBundleError, LabError, Problem
from orchestrator.labctl.common import State, fail

if TYPE_CHECKING:
    from labcontract.rundoc import RunDoc
    from orchestrator.export.bundle import LoadedBundle
    from orchestrator.runs.client import ControllerClient

UNCHANGED_PREFIX = "unchanged"
COMMAND_MARGIN = 64 << 10       # of a stream entry, for the command's own fields


@dataclass
class Outcome:
    imported: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)     # (run id, reason)


def artifact_problems(doc: RunDoc, reader: Callable[[str], bytes | None]) -> tuple[dict[str, bytes], list[str]]:
    """The run's artifacts by sha256, checked against what the run says of them; the reasons it is refused."""
    from labcontract.protocol import ARTIFACT_MAX_BYTES

    found: dict[str, bytes] = {}
    reasons: list[str] = []
    for st in doc.steps:
        for at in st.attempts:
            for a in at.artifacts:
                if a.sha256 in found:
                    continue
                data = reader(a.sha256)
                where = f"artifact {a.name} of attempt {at.id}"
                if data is None:
                    reasons.append(f"{where}: not in the export (artifacts/{a.sha256})")
                elif len(data) > ARTIFACT_MAX_BYTES:
                    reasons.append(f"{where}: larger than {ARTIFACT_MAX_BYTES} bytes")
                elif (got := hashlib.sha256(data).hexdigest()) != a.sha256:
                    reasons.append(f"{where}: its content's sha256 is {got}, the run says {a.sha256} "
                                   "(changed or damaged since the export)")
                elif len(data) != a.size:
                    reasons.append(f"{where}: {len(data)} bytes, the run says {a.size}")
                else:
                    found[a.sha256] = data
    return found, reasons


def import_runs(bundle: LoadedBundle, lab: str | None, client: ControllerClient) -> Outcome:
    """Send each run of ``bundle`` and its artifacts through ``client``."""
    from labcontract.protocol import ENTRY_MAX_BYTES

    default_lab = lab or bundle.lab
    unnamed = [d.id for d in bundle.runs if not (d.lab or default_lab)]
    if unnamed:
        raise ExportBundleError(bundle.source, [Problem("lab", f"the export names no lab for run(s) "
                                                        f"{', '.join(unnamed[:10])}: give --lab NAME")])
    outcome = Outcome()
    sent: set[str] = set()
    for doc in bundle.runs:
        tag = doc.lab or default_lab or ""
        data, reasons = artifact_problems(doc, bundle.read_artifact)
        run_json = doc.model_dump_json()
        if len(run_json) > ENTRY_MAX_BYTES - COMMAND_MARGIN:
            reasons.append(f"{len(run_json)} bytes as JSON: more than one command carries "
                           f"({ENTRY_MAX_BYTES - COMMAND_MARGIN})")
        for sha, content in data.items():
            if reasons:
                break
            if sha in sent:
                continue
            reply = client.import_artifact(sha[:16], content)
            if reply is None or not reply.ok:
                reasons.append(f"artifact {sha}: " + ("the controller did not answer" if reply is None
                                                      else "; ".join(reply.errors)))
            else:
                sent.add(sha)
        if reasons:
            outcome.refused.append((doc.id, "; ".join(reasons)))
            continue
        reply = client.import_run(tag, run_json)
        if reply is None:
            outcome.refused.append((doc.id, "the controller did not answer; is it running?"))
        elif not reply.ok:
            outcome.refused.append((doc.id, "; ".join(reply.errors)))
        elif any(e.startswith(UNCHANGED_PREFIX) for e in reply.errors):
            outcome.unchanged.append(doc.id)
        else:
            outcome.imported.append(doc.id)
    return outcome


def import_(
    export: Annotated[Path | None, typer.Argument(metavar="EXPORT", help="The other lab's export: the directory "
                                                  "or .tar.gz that labctl export --format lab wrote.")] = None,
    lab: Annotated[str | None, typer.Option("--lab", help="The lab the runs are tagged with (default: the name "
                                                          "the export carries; a run the other lab had imported "
                                                          "keeps its own).")] = None,
    from_store: Annotated[str | None, typer.Option(help="Read the runs from the other lab's store URL instead "
                                                        "(read-only; needs --from-artifacts and --lab).")] = None,
    from_artifacts: Annotated[Path | None, typer.Option(help="The other lab's artifact directory, with "
                                                             "--from-store.")] = None,
    run: Annotated[list[str] | None, typer.Option("--run", help="With --from-store: only this run (id or unique "
                                                                "prefix; repeat). Default: every run that "
                                                                "ended.")] = None,
) -> None:
    """Bring another lab's runs into this lab's store, tagged with their lab, through the controller. Artifacts are
    checked against their sha256 (a run with one that differs is refused with the reason; the others go on) and
    stored once however many runs name them. Importing the same export again changes nothing. Exit code 2: the
    export does not validate (every problem listed, nothing imported); 1: some run was refused."""
    import re

    from labcontract.rundoc import LAB_RE
    from labcontract.transport import redis_client
    from orchestrator.export.bundle import read_bundle, read_store
    from orchestrator.runs.client import ControllerClient

    try:
        if lab is not None and not re.match(LAB_RE, lab):
            raise LabError(f"--lab {lab[:80]!r}: a lab name is 1-64 letters, digits, '_', '.', '-'")
        if (export is None) == (from_store is None):
            raise LabError("give the other lab's export (a directory or .tar.gz) or --from-store URL, one of them")
        if from_store is not None:
            if from_artifacts is None or lab is None:
                raise LabError("--from-store needs --from-artifacts DIR and --lab NAME")
            bundle = read_store(from_store, from_artifacts, run or ())
        else:
            assert export is not None
            bundle = read_bundle(export)
        client = ControllerClient(redis_client(State.config.broker_url), timeout_s=120)
        outcome = import_runs(bundle, lab, client)
    except LabError as e:
        fail(str(e))
        raise typer.Exit(2) from None
    for rid in outcome.imported:
        print(f"{rid}: imported")
    for rid in outcome.unchanged:
        print(f"{rid}: unchanged (imported before)")
    for rid, why in outcome.refused:
        print(f"{rid}: refused: {why}")
    print(f"{len(outcome.imported)} imported, {len(outcome.unchanged)} unchanged, {len(outcome.refused)} refused "
          f"(of {len(bundle.runs)} in {bundle.source})")
    if outcome.refused:
        raise typer.Exit(1)


def import_fio(
    files: Annotated[list[Path], typer.Argument(metavar="FILE.json", help="fio --output-format=json+ (or json) "
                                                "output made outside the lab: of a local run, or of fio --client "
                                                "driving fio --server processes.")],
    device: Annotated[str, typer.Option(help="The device the output was measured on (its name or path, as the "
                                             "reports show it).")],
    host: Annotated[str, typer.Option(help="The host it was measured on (with fio --client: the host that "
                                           "stands for the servers).")],
    suite_name: Annotated[str | None, typer.Option(help="The run's suite name (default: the first file's name "
                                                        "without .json).")] = None,
    lab: Annotated[str, typer.Option("--lab", help="The lab the run is tagged with (where it was "
                                                   "measured).")] = "external",
    note: Annotated[str, typer.Option(help="A note the run keeps (its reason column and every result's "
                                           "provenance).")] = "",
) -> None:
    """Store fio JSON output made outside the lab as a run of the lab, through the controller: one step per fio job
    (with fio --client the servers' entries merged, percentiles from their merged histograms, as labctl analyze fio
    prints them), the file itself kept as each step's fio.json artifact, the run tagged with --lab and its
    provenance naming the file, its sha256, the fio version and fio's job options. Every file is judged first
    (every problem listed, nothing imported when one is bad: exit code 2). Importing the same files again changes
    nothing; the same files with other options are refused (exit code 1)."""
    import re

    from labcontract.errors import FioImportError
    from labcontract.rundoc import LAB_RE, TEXT_MAX
    from labcontract.transport import redis_client
    from orchestrator.export.bundle import LoadedBundle
    from orchestrator.fiorun import FioFile, Target, build_run, read_fio_file
    from orchestrator.runs.client import ControllerClient

    try:
        problems: list[Problem] = []
        if not re.match(LAB_RE, lab):
            problems.append(Problem("--lab", f"{lab[:80]!r}: a lab name is 1-64 letters, digits, '_', '.', '-'"))
        for option, value, limit in (("--host", host, 128), ("--device", device, 512),
                                     ("--suite-name", suite_name or "-", 128), ("--note", note or "-", TEXT_MAX)):
            if not value.strip() or len(value) > limit or not value.isprintable():
                problems.append(Problem(option, f"{value[:80]!r}: 1 to {limit} printable characters"))
        read: list[FioFile] = []
        for path in files:
            try:
                read.append(read_fio_file(path))
            except FioImportError as e:
                problems += e.problems
        doc = None
        if read:       # the files read so far judged as steps too: every problem of every file at once
            try:
                doc = build_run(read, Target(host=host, device=device, suite_name=suite_name or "", note=note))
            except FioImportError as e:
                problems += e.problems
        if problems or doc is None:
            raise FioImportError(problems)
        content = {f.sha256: f.raw for f in read}
        bundle = LoadedBundle("fio output", lab, [doc], content.get)
        client = ControllerClient(redis_client(State.config.broker_url), timeout_s=120)
        outcome = import_runs(bundle, lab, client)
    except LabError as e:
        fail(str(e))
        raise typer.Exit(2) from None
    for rid in outcome.imported:
        print(f"{rid}: imported ({len(doc.steps)} steps from {len(read)} file{'s' if len(read) != 1 else ''}, "
              f"lab {lab})")
    for rid in outcome.unchanged:
        print(f"{rid}: unchanged (imported before)")
    for rid, why in outcome.refused:
        again = " (these files were imported before with other options: --device, --host, --lab, --note or " \
                "--suite-name)" if "stored already" in why else ""
        print(f"{rid}: refused: {why}{again}")
    if outcome.refused:
        raise typer.Exit(1)
