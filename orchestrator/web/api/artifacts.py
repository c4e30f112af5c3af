"""A run's artifacts (fio's JSON, logs, a purge's commands) and their download (viewer).

The file's path comes from the store row, relative to the controller's artifact directory; it is resolved and
must stay inside that directory (a row pointing elsewhere, by a symlink or ``..``, is refused as not found),
so a download can never read another file of the server.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import FileResponse

from labcontract.errors import NotFound
from orchestrator.artifacts import contained, sha256_of
from orchestrator.store.models import Artifact
from orchestrator.web import queries
from orchestrator.web.api.common import route, store
from orchestrator.web.api.models import ArtifactOut

router = APIRouter(prefix="/api", tags=["artifacts"])


@route(router, "GET", "/runs/{run_id}/artifacts", "viewer", response_model=list[ArtifactOut])
def list_artifacts(request: Request, run_id: Annotated[str, Path(max_length=64)]) -> list[ArtifactOut]:
    queries.check_run_id(run_id)
    with store(request) as s:
        return [ArtifactOut.model_validate(a) for a in queries.run_artifacts(s, run_id)]


@route(router, "GET", "/artifacts/{artifact_id}", "viewer", response_class=FileResponse,
       responses={200: {"content": {"application/octet-stream": {}},
                        "description": "the file; headers X-Content-SHA256 and ETag"}})
def download(request: Request, artifact_id: Annotated[int, Path(ge=1, le=2**62)]) -> FileResponse:
    """The artifact's bytes, with their SHA-256 (``X-Content-SHA256``, as the store recorded it, else computed)."""
    with store(request) as s:
        row = s.get(Artifact, artifact_id)
        if row is None:
            raise NotFound("artifact", str(artifact_id))
        rel, name, sha = row.path, row.name, row.sha256
    path = contained(request.app.state.web.cfg.artifact_dir, rel)
    if path is None:
        raise NotFound("artifact file", str(artifact_id))
    digest = sha if isinstance(sha, str) and len(sha) == 64 else sha256_of(path)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:64] or f"artifact-{artifact_id}"
    return FileResponse(path, media_type="application/octet-stream", filename=safe,
                        headers={"X-Content-SHA256": digest, "ETag": f'"{digest}"'})
