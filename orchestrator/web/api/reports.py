"""A run's HTML report and comparisons of runs (viewer). HTML is drawn in a subprocess
(orchestrator.web.render); a comparison as JSON or CSV is the same as ``labctl compare --format``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, Response

from labcontract.errors import CompareError, ReportError
from orchestrator.web import queries
from orchestrator.web.api.common import route, store
from orchestrator.web.render import cache_path, render

router = APIRouter(prefix="/api", tags=["reports"])
MAX_COMPARE = 16


def html_of(request: Request, kind: Literal["report", "compare"], run_ids: list[str]) -> str:
    """The HTML report of runs (one: its report; several: the comparison), cached once they all ended.
    Used by the API and the pages."""
    cfg = request.app.state.web.cfg
    with store(request) as s:
        ended = [queries.get_run(s, rid).ended_at for rid in run_ids]
    return render(kind, run_ids, store_url=cfg.store_url, artifact_dir=cfg.artifact_dir,
                  cache=cache_path(cfg.cache_dir, kind, run_ids, ended), work_dir=cfg.cache_dir)


@route(router, "GET", "/runs/{run_id}/report", "viewer", response_class=HTMLResponse,
       responses={200: {"content": {"text/html": {}}}})
def report(request: Request, run_id: Annotated[str, Path(max_length=64)]) -> HTMLResponse:
    """The run's self-contained HTML report (``labctl report --html``); partial while the run goes on."""
    queries.check_run_id(run_id)
    return HTMLResponse(html_of(request, "report", [run_id]))


@route(router, "GET", "/report", "viewer", response_class=HTMLResponse,
       responses={200: {"content": {"text/html": {}}}})
def report_of_runs(request: Request, run: Annotated[list[Annotated[str, Query(max_length=64)]],
                                                    Query(min_length=1, max_length=MAX_COMPARE)]) -> HTMLResponse:
    """One self-contained HTML report of the runs (``labctl report RUN... --html``): one run, its report; several,
    overlaid on every chart, each with its history."""
    if len(set(run)) != len(run):
        raise ReportError("a run is named twice")
    for rid in run:
        queries.check_run_id(rid)
    return HTMLResponse(html_of(request, "report", list(run)))


@route(router, "GET", "/compare", "viewer", response_class=Response,
       responses={200: {"content": {"text/html": {}, "application/json": {}, "text/csv": {}}}})
def compare(request: Request,
            run: Annotated[list[Annotated[str, Query(max_length=64)]], Query(min_length=2, max_length=MAX_COMPARE)],
            format: Literal["html", "json", "csv", "table"] = "html",
            units: Literal["decimal", "binary"] = "decimal",
            width: Annotated[int, Query(ge=40, le=1000)] = 200,
            color: Literal["none", "standard", "256", "truecolor"] = "none",
            baseline: Annotated[str, Query(max_length=64)] = "") -> Response:
    """Runs side by side, cell by cell; the ``baseline`` (one of the runs; by default the first) comes first
    (``labctl compare --baseline``): each run's mean over a cell's repeats and, per figure, the verdict against the
    baseline (``verdicts`` in JSON, ``*_verdict`` columns in CSV; docs/metrics.md "Comparing runs"); a baseline
    that is not one of the runs is refused (422). ``units``: bandwidth in MB/s or MiB/s (``mib_s``).
    ``table``: the terminal table ``labctl compare`` prints, drawn ``width`` columns wide in ``color`` (what the
    client's terminal takes); the header ``X-Partial-Runs`` names the runs still going on."""
    from orchestrator.compare import as_csv, as_json, baseline_first, compare_details

    if len(set(run)) != len(run):
        raise CompareError("a run is named twice")
    for rid in run:
        queries.check_run_id(rid)
    run = baseline_first(run, baseline.strip())
    if format == "html":
        return HTMLResponse(html_of(request, "compare", list(run)))
    with store(request) as s:
        c = compare_details([queries.detail(s, rid, light=True) for rid in run], units)
        partial = {"X-Partial-Runs": ",".join(d.run.id for i, d in enumerate(c.details) if c.partial(i))}
        if format == "json":
            return Response(as_json(c), media_type="application/json", headers=partial)
        if format == "table":
            from orchestrator.comparetable import table_text

            return Response(table_text(c, width, None if color == "none" else color),
                            media_type="text/plain; charset=utf-8", headers=partial)
        return Response(as_csv(c), media_type="text/csv; charset=utf-8", headers=partial)


@route(router, "GET", "/reference", "viewer", response_class=Response,
       responses={200: {"content": {"application/json": {}, "text/plain": {}}}})
def reference(request: Request, run: Annotated[str, Query(max_length=64)],
              suite: Annotated[str, Query(min_length=1, max_length=128)],
              format: Literal["json", "table"] = "json",
              units: Literal["decimal", "binary"] = "decimal") -> Response:
    """The run against the reference set of ``suite`` (``labctl compare RUN --reference SUITE``): every device any
    lab measured with the suite, each by its latest run, and per headline figure min / median / max and the run's
    percentile rank. ``table``: the lines labctl prints. No device measured with the suite: 422 with the reason."""
    from orchestrator.reference import as_json, reference_set, table_lines

    queries.check_run_id(run)
    with store(request) as s:
        ref = reference_set(s, run, suite.strip(), units)
    if format == "json":
        return Response(as_json(ref), media_type="application/json")
    return Response("\n".join(table_lines(ref)), media_type="text/plain; charset=utf-8")
