"""A lab export: runs with everything another lab needs to hold them (run, steps, attempts, results, precondition
records, network groups, provenance, artifacts with their sha256), as ``labctl export --format lab`` writes it and
``labctl import`` reads it: a directory (or a ``.tar.gz`` of one) holding ``lab-export.json``
(:class:`labcontract.rundoc.Bundle`) and ``artifacts/<sha256>``.

Reading one is reading untrusted input: the document's size is bounded before it is parsed, it is validated whole
(every problem listed at once, with its key path), an artifact is only ever looked up by the sha256 the document
names (a path is never taken from the export, and never followed out of it: symbolic links, ``..`` and archive
members other than regular files are refused), and each artifact is bounded in size."""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from labcontract.errors import ExportBundleError, ExportError, Problem
from labcontract.protocol import ARTIFACT_MAX_BYTES
from labcontract.rundoc import ARTIFACTS_DIR, FORMAT, FORMAT_VERSION, MANIFEST, MANIFEST_MAX_BYTES, Bundle, RunDoc
from labcontract.rundoc import problems_of as validation_problems
from orchestrator.artifacts import contained
from orchestrator.rundocs import doc_of
from orchestrator.states import TERMINAL_RUN
from orchestrator.store.models import Attempt, Run, Step

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
MEMBER_RE = re.compile(rf"^(?:[^/]+/)?({re.escape(MANIFEST)}|{ARTIFACTS_DIR}/[0-9a-f]{{64}})$")
MAX_MEMBERS = 1_000_000


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def load_runs(s: Session, run_ids: Iterable[str]) -> list[Run]:
    q = (select(Run).where(Run.id.in_(list(run_ids)))
         .options(selectinload(Run.steps).selectinload(Step.attempts).selectinload(Attempt.result),
                  selectinload(Run.steps).selectinload(Step.attempts).selectinload(Attempt.artifacts)))
    return sorted(s.scalars(q), key=lambda r: (r.submitted_at, r.id))


def documents(s: Session, runs: Iterable[Run], artifact_root: Path) -> tuple[list[RunDoc], dict[str, Path]]:
    """The documents of ``runs`` and where each artifact they name lies; ExportError listing every run that is
    still going and every artifact that is missing or not what its row says."""
    problems: list[str] = []
    docs: list[RunDoc] = []
    files: dict[str, Path] = {}
    for run in runs:
        if run.state not in TERMINAL_RUN:
            problems.append(f"run {run.id} is {run.state}: only a run that ended can be exported for another lab")
            continue
        for st in run.steps:
            for at in st.attempts:
                for a in at.artifacts:
                    path = contained(artifact_root, a.path)
                    if path is None or path.stat().st_size != a.size:
                        problems.append(f"run {run.id}: artifact {a.name} of attempt {at.id} ({a.path}) is missing "
                                        f"from {artifact_root} or is not of its size")
                    else:
                        files[a.sha256] = path
        docs.append(doc_of(s, run))
    if problems:
        raise ExportError("cannot export for another lab:\n  " + "\n  ".join(problems))
    return docs, files


def write_bundle(docs: list[RunDoc], files: dict[str, Path], output: Path, lab: str | None) -> Path:
    """Write the export to ``output`` (a directory, or a ``.tar.gz`` archive of one); the path written."""
    manifest = Bundle(format=FORMAT, format_version=FORMAT_VERSION, lab=lab, exported_at=time.time(), runs=docs)
    text = manifest.model_dump_json(indent=1).encode()
    try:
        if is_archive(output):
            output.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(output, "w:gz") as tar:
                info = tarfile.TarInfo(MANIFEST)
                info.size, info.mtime = len(text), int(time.time())
                tar.addfile(info, io.BytesIO(text))
                for sha, path in sorted(files.items()):
                    tar.add(path, arcname=f"{ARTIFACTS_DIR}/{sha}", recursive=False)
        else:
            (output / ARTIFACTS_DIR).mkdir(parents=True, exist_ok=True)
            for sha, path in sorted(files.items()):
                target = output / ARTIFACTS_DIR / sha
                if not target.exists():
                    target.write_bytes(path.read_bytes())
            (output / MANIFEST).write_bytes(text)
    except OSError as e:
        raise ExportError(f"{output}: cannot write the lab export: {e.strerror or e}") from e
    return output


@dataclass
class LoadedBundle:
    """A lab export read and validated: its lab name (None: it names none), runs, and its artifacts by sha256."""

    source: str
    lab: str | None
    runs: list[RunDoc]
    read_artifact: Callable[[str], bytes | None]    # sha256 -> content (at most ARTIFACT_MAX_BYTES + 1), None


def _bounded_read(f: IO[bytes], limit: int) -> bytes:
    """At most ``limit`` + 1 bytes (one past the limit tells the reader it is over)."""
    return f.read(limit + 1)


def _parse(source: str, raw: bytes | None, problems: list[Problem]) -> Bundle | None:
    if raw is None:
        problems.append(Problem(MANIFEST, "missing (not a lab export: labctl export --format lab writes one)"))
        return None
    if len(raw) > MANIFEST_MAX_BYTES:
        problems.append(Problem(MANIFEST, f"larger than {MANIFEST_MAX_BYTES} bytes"))
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        problems.append(Problem(MANIFEST, f"not JSON: {e}"[:300]))
        return None
    try:
        return Bundle.model_validate(data)
    except ValidationError as e:
        problems += [Problem(f"{MANIFEST}: {p.location}", p.message) for p in validation_problems(e)]
        return None


def read_bundle(path: Path) -> LoadedBundle:
    """Read a lab export (a directory or a ``.tar.gz``); ExportBundleError with every problem found."""
    source = str(path)
    problems: list[Problem] = []
    if is_archive(path) and path.is_file():
        read_artifact, raw = _archive(path, problems)
    elif path.is_dir():
        read_artifact, raw = _directory(path, problems)
    else:
        raise ExportBundleError(source, [Problem("", "neither a directory nor a .tar.gz archive")])
    bundle = _parse(source, raw, problems) if not problems else None
    if problems or bundle is None:
        raise ExportBundleError(source, problems)
    return LoadedBundle(source, bundle.lab, list(bundle.runs), read_artifact)


def _directory(root: Path, problems: list[Problem]) -> tuple[Callable[[str], bytes | None], bytes | None]:
    manifest = contained(root, MANIFEST)
    raw = None
    if manifest is not None:
        if manifest.stat().st_size > MANIFEST_MAX_BYTES:
            problems.append(Problem(MANIFEST, f"larger than {MANIFEST_MAX_BYTES} bytes"))
        else:
            raw = manifest.read_bytes()
    elif (root / MANIFEST).exists() or (root / MANIFEST).is_symlink():
        problems.append(Problem(MANIFEST, "not a regular file inside the export (a link out of it is not followed)"))

    def read(sha: str) -> bytes | None:
        p = contained(root, f"{ARTIFACTS_DIR}/{sha}")
        if p is None:
            return None
        with p.open("rb") as f:
            return _bounded_read(f, ARTIFACT_MAX_BYTES)
    return read, raw


def _archive(path: Path, problems: list[Problem]) -> tuple[Callable[[str], bytes | None], bytes | None]:
    members: dict[str, tarfile.TarInfo] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            raw = _members(tar, members, problems)
    except (tarfile.TarError, OSError, EOFError) as e:
        problems.append(Problem("", f"not a readable .tar.gz archive: {e}"[:300]))
        return (lambda _sha: None), None

    def read(sha: str) -> bytes | None:
        m = members.get(f"{ARTIFACTS_DIR}/{sha}")
        if m is None:
            return None
        try:
            with tarfile.open(path, "r:gz") as tar:
                f = tar.extractfile(m)
                return _bounded_read(f, ARTIFACT_MAX_BYTES) if f is not None else None
        except (tarfile.TarError, OSError, EOFError):
            return None
    return read, raw


def _members(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], problems: list[Problem]) -> bytes | None:
    """The archive's members of a lab export into ``members``, every other one a problem; the manifest's bytes."""
    raw = None
    for n, m in enumerate(tar):
        if n >= MAX_MEMBERS:
            problems.append(Problem("", f"more than {MAX_MEMBERS} archive members"))
            break
        if m.isdir():
            continue
        match = MEMBER_RE.match(m.name)
        if not m.isfile() or match is None:
            problems.append(Problem(m.name[:200], "not a member of a lab export (only a regular "
                                    f"{MANIFEST} and {ARTIFACTS_DIR}/<sha256> files)"))
            continue
        members[match.group(1)] = m
    got = members.get(MANIFEST)
    if got is not None and not problems:
        if got.size > MANIFEST_MAX_BYTES:
            problems.append(Problem(MANIFEST, f"larger than {MANIFEST_MAX_BYTES} bytes"))
        else:
            f = tar.extractfile(got)
            raw = f.read(MANIFEST_MAX_BYTES + 1) if f is not None else None
    return raw

def read_store(url: str, artifact_root: Path, refs: Iterable[str] = ()) -> LoadedBundle:
    """Another lab's runs read from its store (read-only) and its artifact directory, as a lab export of them
    would carry them: the runs named (ids, unique prefixes), else every run of it that ended."""
    from sqlalchemy.engine import make_url

    from orchestrator.queries import resolve_run_id
    from orchestrator.store.db import make_engine, require_schema, sessions

    engine = make_engine(url)
    shown = make_url(url).render_as_string(hide_password=True)
    try:
        require_schema(engine)
        problems: list[Problem] = []
        docs: list[RunDoc] = []
        files: dict[str, Path] = {}
        with sessions(engine)() as s:
            ids = [resolve_run_id(s, r) for r in refs] or list(
                s.scalars(select(Run.id).where(Run.state.in_([str(x) for x in TERMINAL_RUN]))))
            for run in load_runs(s, ids):
                try:
                    docs.append(doc_of(s, run))
                except ValidationError as e:
                    problems += validation_problems(e, f"run {run.id}")
                    continue
                for st in run.steps:
                    for at in st.attempts:
                        for a in at.artifacts:
                            if (p := contained(artifact_root, a.path)) is not None:
                                files[a.sha256] = p
    finally:
        engine.dispose()
    if problems:
        raise ExportBundleError(shown, problems)

    def read(sha: str) -> bytes | None:
        if (p := files.get(sha)) is None:
            return None
        with p.open("rb") as f:
            return _bounded_read(f, ARTIFACT_MAX_BYTES)
    return LoadedBundle(shown, None, docs, read)
