"""Runs of another lab (``labctl import``): their artifacts into the content-addressed artifact store, then each
run's rows, tagged with its lab. The controller stays the store's only writer: labctl judges the export and
sends one ``import_artifact`` per artifact and one ``import_run`` per run; everything is judged again here.

An artifact is written only when its content matches its sha256 and size (the store is content-addressed: one
copy, however many runs or labs name it). A run is written only when every artifact it names is in the store
with that sha256, and its id is new; a run already imported from the same lab with the same content is left as it
is (importing an export twice changes nothing); one with other content, or an id of another lab's run, is
refused with the reason."""

from __future__ import annotations

import logging

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.errors import ProtocolError
from labcontract.protocol import ARTIFACT_MAX_BYTES, ImportArtifact, ImportRun, Reply
from labcontract.rundoc import RunDoc, problems_of
from orchestrator.artifacts import contained, sha256_of
from orchestrator.controller.core import ControllerCore
from orchestrator.rundocs import canonical, doc_of, rows_of
from orchestrator.store.models import Attempt, Run, Step

log = logging.getLogger("orchestrator.controller")
UNCHANGED = "unchanged: imported before with the same content"


class ImportMixin(ControllerCore):
    def import_artifact(self, cmd: ImportArtifact) -> Reply:
        art = cmd.artifact
        try:
            data = art.content(ARTIFACT_MAX_BYTES)
        except ProtocolError as e:
            return Reply(ok=False, errors=(str(e),))
        self.artifacts.put(data, art.sha256)
        return Reply(ok=True, errors=())

    def import_run(self, cmd: ImportRun) -> Reply:
        try:
            doc = RunDoc.model_validate_json(cmd.run_json)
        except ValidationError as e:
            return Reply(ok=False, errors=tuple(str(p) for p in problems_of(e, "run")))
        missing = []
        paths: dict[str, str] = {}
        for sha, size in sorted(doc.artifacts().items()):
            rel = f"{sha[:2]}/{sha}"
            path = contained(self.artifacts.root, rel)
            if path is None or path.stat().st_size != size or sha256_of(path) != sha:
                missing.append(f"artifact {sha}: not in the artifact store with that sha256 and size {size} "
                               "(send it with import_artifact first)")
            paths[sha] = rel
        if missing:
            return Reply(ok=False, run_id=doc.id, errors=tuple(missing))
        with self.sessions.begin() as s:
            stored = s.get(Run, doc.id)
            if stored is not None:
                if stored.lab != cmd.lab:
                    where = f"lab {stored.lab!r}" if stored.lab else "this lab"
                    return Reply(ok=False, run_id=doc.id, errors=(
                        f"run {doc.id} is stored already as a run of {where}: nothing imported",))
                if canonical(doc_of(s, stored)) != canonical(doc):
                    return Reply(ok=False, run_id=doc.id, errors=(
                        f"run {doc.id} of lab {cmd.lab!r} is stored already with other content (exported again "
                        "after a rerun?): nothing changed",))
                return Reply(ok=True, run_id=doc.id, errors=(UNCHANGED,))
            taken = self._taken_ids(s, doc)
            if taken:
                return Reply(ok=False, run_id=doc.id, errors=(
                    f"run {doc.id}: step or attempt ids another run holds ({', '.join(taken[:5])}): nothing imported",))
            s.add_all(rows_of(doc, cmd.lab, paths))
        log.info("run %s of lab %s imported: %d steps, %d artifacts", doc.id, cmd.lab, len(doc.steps), len(paths),
                 extra={"run": doc.id})
        return Reply(ok=True, run_id=doc.id)

    @staticmethod
    def _taken_ids(s: Session, doc: RunDoc) -> list[str]:
        """Ids of the document's steps and attempts already in the store (a run ``r1`` naming a step of a run
        ``r1-s000``): refused rather than failing on the key."""
        steps = [st.id for st in doc.steps]
        attempts = [at.id for st in doc.steps for at in st.attempts]
        taken: list[str] = []
        for i in range(0, len(steps), 500):
            taken += s.scalars(select(Step.id).where(Step.id.in_(steps[i:i + 500]))).all()
        for i in range(0, len(attempts), 500):
            taken += s.scalars(select(Attempt.id).where(Attempt.id.in_(attempts[i:i + 500]))).all()
        return taken
