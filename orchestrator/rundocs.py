"""A stored run as a :class:`labcontract.rundoc.RunDoc` and back: the export of a lab's runs for another lab
(``labctl export --format lab``) reads rows into documents, the controller's import (``import_run``) writes a
document's rows. The columns are the same on both sides, so each table's are named once here."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.rundoc import (
    ArtifactRef,
    AttemptDoc,
    NetGroupDoc,
    PreconditionDoc,
    ResultDoc,
    RunDoc,
    StepDoc,
)
from orchestrator.store.models import Artifact, Attempt, NetGroup, PreconditionRecord, Result, Run, Step


def _fields(model: type[Any], skip: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in model.model_fields if n not in skip)


RUN_COLUMNS = _fields(RunDoc, ("lab", "steps", "preconditions", "net_groups"))
STEP_COLUMNS = _fields(StepDoc, ("attempts",))
ATTEMPT_COLUMNS = _fields(AttemptDoc, ("result", "artifacts"))
RESULT_COLUMNS = _fields(ResultDoc, ())
PRECONDITION_COLUMNS = _fields(PreconditionDoc, ())
NET_GROUP_COLUMNS = _fields(NetGroupDoc, ())


def _cols(row: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: getattr(row, n) for n in names}


def doc_of(s: Session, run: Run) -> RunDoc:
    """The document of a stored run (its ``lab``: the lab it was imported from, "" for this lab's own)."""
    steps = []
    for st in sorted(run.steps, key=lambda x: (x.seq, x.round, x.host, x.id)):
        attempts = []
        for at in st.attempts:
            result = ResultDoc(**_cols(at.result, RESULT_COLUMNS)) if at.result is not None else None
            arts = [ArtifactRef(name=a.name, sha256=a.sha256, size=a.size) for a in at.artifacts]
            attempts.append(AttemptDoc(**_cols(at, ATTEMPT_COLUMNS), result=result, artifacts=arts))
        steps.append(StepDoc(**_cols(st, STEP_COLUMNS), attempts=attempts))
    pre = s.scalars(select(PreconditionRecord).where(PreconditionRecord.run_id == run.id)
                    .order_by(PreconditionRecord.seq))
    net = s.scalars(select(NetGroup).where(NetGroup.run_id == run.id).order_by(NetGroup.seq))
    return RunDoc(**_cols(run, RUN_COLUMNS), lab=run.lab or "", steps=steps,
                  preconditions=[PreconditionDoc(**_cols(p, PRECONDITION_COLUMNS)) for p in pre],
                  net_groups=[NetGroupDoc(**_cols(g, NET_GROUP_COLUMNS)) for g in net])


def canonical(doc: RunDoc) -> str:
    """The document as canonical JSON, without its lab: two imports of one run are the same when this is."""
    data = doc.model_dump(mode="json", exclude={"lab"})
    data["steps"] = sorted(data["steps"], key=lambda st: st["id"])
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def rows_of(doc: RunDoc, lab: str, artifact_paths: dict[str, str]) -> list[Any]:
    """The rows of a document, for a session to add: the run (with its steps, attempts, results, artifacts) and its
    precondition records and network groups. ``artifact_paths``: sha256 -> path in the artifact store."""
    run = Run(**doc.model_dump(include=set(RUN_COLUMNS)), lab=lab)
    for sd in doc.steps:
        step = Step(**sd.model_dump(include=set(STEP_COLUMNS)))
        for ad in sd.attempts:
            att = Attempt(**ad.model_dump(include=set(ATTEMPT_COLUMNS)))
            if ad.result is not None:
                att.result = Result(**ad.result.model_dump(), step_id=sd.id, run_id=doc.id)
            att.artifacts = [Artifact(name=a.name, sha256=a.sha256, size=a.size, path=artifact_paths[a.sha256])
                             for a in ad.artifacts]
            step.attempts.append(att)
        run.steps.append(step)
    pre = [PreconditionRecord(run_id=doc.id, **p.model_dump()) for p in doc.preconditions]
    net = [NetGroup(run_id=doc.id, **g.model_dump()) for g in doc.net_groups]
    return [run, *pre, *net]
