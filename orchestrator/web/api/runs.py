"""Reading runs: the filtered, paginated list, one run with its steps, its export tables and series (viewer)."""

from __future__ import annotations

import io
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from orchestrator.web import queries
from orchestrator.web.api.common import route, store
from orchestrator.web.api.models import Epoch, RunOut, RunPage, SeriesOut, Value, WatchFrameOut

router = APIRouter(prefix="/api", tags=["runs"])

RunId = Annotated[str, Path(max_length=64, description="a run id (exact)")]
Text = Annotated[str | None, Query(max_length=128)]
TableName = Literal["results", "devices", "paths", "series", "app_series", "cells"]


@route(router, "GET", "/runs", "viewer", response_model=RunPage)
def list_runs(request: Request, state: Annotated[str | None, Query(max_length=16)] = None, suite: Text = None,
              host: Text = None, model: Text = None, firmware: Annotated[str | None, Query(max_length=64)] = None,
              op_mode: Annotated[str | None, Query(max_length=32)] = None,
              since: Annotated[Epoch | None, Query()] = None, until: Annotated[Epoch | None, Query()] = None,
              limit: Annotated[int, Query(ge=1, le=queries.MAX_LIMIT)] = 50,
              before: Annotated[str | None, Query(max_length=128)] = None) -> RunPage:
    """Runs newest first, filtered (exact matches); ``next`` is the cursor of the following page."""
    f = queries.RunFilter(state=state, suite=suite, host=host, model=model, firmware=firmware, op_mode=op_mode,
                          since=since, until=until)
    with store(request) as s:
        page, nxt = queries.run_page(s, f, limit=limit, before=before)
    return RunPage.model_validate({"runs": page, "next": nxt})


@route(router, "GET", "/runs/{run_id}", "viewer", response_model=RunOut)
def get_run(request: Request, run_id: RunId) -> RunOut:
    """A run with every step and its attempts, and the platform it ran on (provenance)."""
    queries.check_run_id(run_id)
    with store(request) as s:
        return RunOut.model_validate(queries.run_dict(s, run_id))


def _rows(request: Request, run_id: str, table: TableName) -> list[dict[str, Value]]:
    from orchestrator.export.tables import build

    queries.check_run_id(run_id)
    with store(request) as s:
        d = queries.detail(s, run_id)
        return build([d], [table])[0].rows


@route(router, "GET", "/runs/{run_id}/results", "viewer", response_model=list[dict[str, Value]])
def results(request: Request, run_id: RunId) -> list[dict[str, Value]]:
    """The run's measured cells: the export's ``results`` table (columns: docs/metrics.md)."""
    return _rows(request, run_id, "results")


@route(router, "GET", "/runs/{run_id}/devices", "viewer", response_model=list[dict[str, Value]])
def devices(request: Request, run_id: RunId) -> list[dict[str, Value]]:
    """Per-device figures of a device group's cells: the export's ``devices`` table."""
    return _rows(request, run_id, "devices")


@route(router, "GET", "/runs/{run_id}/paths", "viewer", response_model=list[dict[str, Value]])
def paths(request: Request, run_id: RunId) -> list[dict[str, Value]]:
    """Per-path figures of a network run: the export's ``paths`` table."""
    return _rows(request, run_id, "paths")


@route(router, "GET", "/runs/{run_id}/series", "viewer", response_model=SeriesOut)
def series(request: Request, run_id: RunId, step: Annotated[str, Query(min_length=1, max_length=64)]) -> SeriesOut:
    """The per-second series of one step's result."""
    queries.check_run_id(run_id)
    with store(request) as s:
        return SeriesOut.model_validate(queries.step_series(s, run_id, step))


@route(router, "GET", "/runs/{run_id}/export", "viewer", response_class=Response,
       responses={200: {"content": {"text/csv": {}, "application/json": {}}}})
def export(request: Request, run_id: RunId, format: Literal["csv", "json"] = "csv",
           table: TableName | Literal["all"] = "results", units: Literal["decimal", "binary"] = "decimal") -> Response:
    """The run's tables as ``labctl export`` writes them (csv: one table; json: one or ``all``); ``units``:
    bandwidth in MB/s (``*_mb_s`` columns) or MiB/s (``*_mib_s``)."""
    from orchestrator.export import export as write_export

    queries.check_run_id(run_id)
    out = io.StringIO()
    with store(request) as s:
        write_export([queries.detail(s, run_id)], format, table, None, out, units)
    media = "text/csv; charset=utf-8" if format == "csv" else "application/json"
    return Response(out.getvalue(), media_type=media,
                    headers={"Content-Disposition": f'attachment; filename="{run_id}-{table}.{format}"'})


@route(router, "GET", "/runs/{run_id}/show", "viewer", response_class=Response,
       responses={200: {"content": {"text/plain": {}}}})
def show(request: Request, run_id: RunId, rounds: bool = False, width: Annotated[int, Query(ge=40, le=1000)] = 200,
         color: Literal["none", "standard", "256", "truecolor"] = "none") -> Response:
    """What ``labctl run show`` prints (steps, the figures of every cell, repeats, preconditioning verdicts,
    overrides, the platform, drive health), drawn ``width`` columns wide in ``color``: ``labctl --api run show``."""
    from orchestrator.report import print_run
    from orchestrator.textout import drawn

    queries.check_run_id(run_id)
    with store(request) as s:
        d = queries.detail(s, run_id)
        text = drawn(lambda console: print_run(console, d, rounds=rounds,
                                               artifact_root=request.app.state.web.cfg.artifact_dir),
                     width, None if color == "none" else color)
    return Response(text, media_type="text/plain; charset=utf-8")


@route(router, "GET", "/runs/{run_id}/watch", "viewer", response_model=WatchFrameOut)
def watch(request: Request, run_id: RunId, width: Annotated[int, Query(ge=40, le=1000)] = 200,
          color: Literal["none", "standard", "256", "truecolor"] = "none") -> WatchFrameOut:
    """One frame of what ``labctl watch`` shows (each step's progress, live IOPS and latency from its agent), its
    table drawn ``width`` columns wide in ``color``: ``labctl --api watch`` asks for one each second."""
    from orchestrator.textout import drawn
    from orchestrator.watchframe import store_frame

    queries.check_run_id(run_id)
    web = request.app.state.web
    with store(request) as s:
        queries.get_run(s, run_id)                     # 404 for a run that does not exist
    frame = store_frame(web.sessions, web.redis(), run_id)
    table = drawn(lambda console: console.print(frame.table), width, None if color == "none" else color)
    return WatchFrameOut(state=frame.state, table=table, line=frame.line)
