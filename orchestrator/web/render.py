"""HTML reports for the web service, drawn in a subprocess.

The report code (orchestrator.htmlreport) forks worker processes to draw its figures; forking a threaded
server (uvicorn's thread pool, the broker client's sockets) is unsafe, so the service runs
``python -m orchestrator.web.render report RUN --out FILE`` (or ``compare RUN RUN... --out FILE``) and reads
the file. The store URL travels in the environment (``SLAB_RENDER_STORE``), never on a command line others
can read in ``ps``. A report of an ended run is cached under ``cache_dir`` by run id and end time (a rerun
ends it again: a new end time, a new report); a report of a run in progress is drawn each time.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from labcontract.errors import Busy, LabError, ReportError, ServiceError

log = logging.getLogger(__name__)

STORE_ENV = "SLAB_RENDER_STORE"
DEFAULT_TIMEOUT_S = 300.0
MAX_OUTPUT_BYTES = 256 << 20
STDERR_TAIL = 2000
MAX_CONCURRENT = 2              # reports drawn at once (each draws with up to 4 processes of its own)
MAX_CACHED = 500                # reports of ended runs kept (each 0.2-2 MB)
MAX_CACHE_BYTES = 1 << 30
MAX_WAITING = 4                 # requests waiting for a drawing slot (each holds a server thread); beyond: Busy
WAIT_S = 60.0
_drawing = threading.BoundedSemaphore(MAX_CONCURRENT)
_waiting = threading.BoundedSemaphore(MAX_WAITING)


def cache_path(cache_dir: Path, kind: str, run_ids: Sequence[str], ended: Sequence[float | None]) -> Path | None:
    """Where the report of these runs is cached; None when one of them has not ended (not cacheable)."""
    if any(e is None for e in ended):
        return None
    key = hashlib.sha256(repr((kind, list(run_ids), list(ended))).encode()).hexdigest()[:32]
    return cache_dir / f"{kind}-{key}.html"


def render(kind: str, run_ids: Sequence[str], *, store_url: str, artifact_dir: Path, cache: Path | None,
           work_dir: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """The HTML of a ``report`` (one run) or ``compare`` (several); from ``cache`` when it exists, written
    there when given. ReportError for runs that cannot be reported (the subprocess's reason), ServiceError
    when drawing takes longer than ``timeout_s``."""
    if cache is not None and cache.is_file():
        return cache.read_text(encoding="utf-8")
    # a waiting request holds a thread of the server's pool: a few may wait (a page framing a report while
    # another is drawn), more are refused at once, so that parallel requests of one viewer never stall every
    # request of everyone (the red team's finding 1)
    if not _drawing.acquire(blocking=False):
        if not _waiting.acquire(blocking=False):
            raise Busy(f"{MAX_CONCURRENT} reports are being drawn and {MAX_WAITING} wait; try again in a few seconds")
        try:
            got = _drawing.acquire(timeout=min(timeout_s, WAIT_S))
        finally:
            _waiting.release()
        if not got:
            raise Busy(f"{MAX_CONCURRENT} reports are being drawn; try again in a few seconds")
    try:
        if cache is not None and cache.is_file():        # drawn by the request this one waited for
            return cache.read_text(encoding="utf-8")
        html = _draw(kind, run_ids, store_url, artifact_dir, cache, work_dir, timeout_s)
    finally:
        _drawing.release()
    if cache is not None:
        prune(cache.parent)
    return html


def prune(cache_dir: Path, max_files: int = MAX_CACHED, max_bytes: int = MAX_CACHE_BYTES) -> None:
    """Keep the cache within ``max_files`` and ``max_bytes``, the least recently written first out: every set of
    runs compared is a file of its own, and a viewer could otherwise fill the disk."""
    try:
        files = sorted(((p.stat().st_mtime, p.stat().st_size, p) for p in cache_dir.glob("*.html")),
                       key=lambda t: t[0], reverse=True)
    except OSError:
        return
    total = 0
    for i, (_mtime, size, path) in enumerate(files):
        total += size
        if i >= max_files or total > max_bytes:
            path.unlink(missing_ok=True)


def _draw(kind: str, run_ids: Sequence[str], store_url: str, artifact_dir: Path, cache: Path | None,
          work_dir: Path, timeout_s: float) -> str:
    work_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{kind}-", suffix=".html", dir=work_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    argv = [sys.executable, "-m", "orchestrator.web.render", kind, *run_ids, "--out", str(tmp),
            "--artifact-dir", str(artifact_dir)]
    env = {**os.environ, STORE_ENV: store_url}
    try:
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, timeout=max(timeout_s, 1.0), check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ServiceError(f"drawing the {kind} took longer than {timeout_s:g}s; try again later") from None
        if proc.returncode != 0:
            why = proc.stderr.decode(errors="replace").strip().splitlines()
            msg = why[-1][:STDERR_TAIL] if why else f"exit code {proc.returncode}"
            if proc.returncode == 2:
                raise ReportError(msg)
            log.warning("drawing the %s of %s failed (exit code %d): %s", kind, ", ".join(run_ids), proc.returncode,
                        proc.stderr.decode(errors="replace")[-STDERR_TAIL * 4:])
            raise ServiceError(f"drawing the {kind} failed: {msg}")
        if tmp.stat().st_size > MAX_OUTPUT_BYTES:
            raise ServiceError(f"the {kind} is larger than {MAX_OUTPUT_BYTES >> 20} MiB")
        html = tmp.read_text(encoding="utf-8")
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, cache)       # atomic: a concurrent reader sees the old file or the whole new one
        return html
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 with the HTML in --out; 2 with the reason on stderr for runs that cannot be reported."""
    p = argparse.ArgumentParser(prog="orchestrator.web.render")
    p.add_argument("kind", choices=("report", "compare"))
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--artifact-dir", type=Path)
    a = p.parse_args(argv)
    store_url = os.environ.get(STORE_ENV)
    if not store_url:
        print(f"{STORE_ENV} is not set", file=sys.stderr)
        return 2
    from orchestrator import htmlreport
    from orchestrator.compare import compare_details
    from orchestrator.report import artifact_reader
    from orchestrator.runhistory import histories
    from orchestrator.store.db import make_engine, sessions
    from orchestrator.web.queries import detail

    t0 = time.monotonic()
    try:
        with sessions(make_engine(store_url))() as s:
            details = [detail(s, rid) for rid in a.runs]
            if a.kind == "compare":
                details = compare_details(details).details     # CompareError: no cell in common, ...
            htmlreport.write_html(details, a.out, read_artifact=artifact_reader(a.artifact_dir),
                                  history=histories(s, [d.run.id for d in details]) if a.kind == "report" else None)
    except LabError as e:
        print(str(e).splitlines()[0] if str(e) else type(e).__name__, file=sys.stderr)
        return 2
    print(f"{a.kind} of {', '.join(a.runs)} drawn in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
