"""``/docs``: the API's reference, drawn here from the OpenAPI document (no script, no CDN: Swagger UI would
need one of the two and does not read OpenAPI 3.1), and ``/openapi.json``, the document itself for tools.
Both need a viewer, as every route does."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse

from orchestrator.web.auth import Principal, require
from orchestrator.web.pages.common import need, render

router = APIRouter(include_in_schema=False)
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
          "maxItems", "enum", "default")


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"list of {_type(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def _bounds(schema: dict[str, Any]) -> str:
    found = {k: schema[k] for k in BOUNDS if k in schema}
    for alt in schema.get("anyOf", ()):
        found.update({k: alt[k] for k in BOUNDS if k in alt})
    return ", ".join(f"{k} {v}" for k, v in found.items())


def operations(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Each operation as the page shows it: method, path, least role, summary, parameters, body fields, answers."""
    schemas = spec.get("components", {}).get("schemas", {})
    out = []
    for path, item in spec.get("paths", {}).items():
        for method, op in item.items():
            params = [{"name": p["name"], "in": p["in"], "required": p.get("required", False),
                       "type": _type(p.get("schema", {})), "bounds": _bounds(p.get("schema", {}))}
                      for p in op.get("parameters", [])]
            body: list[dict[str, Any]] = []
            content = op.get("requestBody", {}).get("content", {})
            for media in content.values():
                ref = _type(media.get("schema", {}))
                model = schemas.get(ref, {})
                required = set(model.get("required", ()))
                body = [{"name": name, "required": name in required, "type": _type(s), "bounds": _bounds(s)}
                        for name, s in model.get("properties", {}).items()]
            out.append({"method": method.upper(), "path": path, "role": op.get("x-required-role", "?"),
                        "summary": op.get("summary", ""), "description": op.get("description", ""),
                        "params": params, "body": body, "responses": sorted(op.get("responses", {}))})
    return sorted(out, key=lambda o: (o["path"], o["method"]))


@router.get("/openapi.json")
def openapi(request: Request, _who: Annotated[Principal, Depends(require("viewer"))]) -> JSONResponse:
    spec: dict[str, Any] = request.app.openapi()
    return JSONResponse(spec)


@router.get("/docs", response_class=HTMLResponse)
def docs(request: Request) -> HTMLResponse:
    need(request, "viewer")
    return render(request, "apidocs.html", ops=operations(request.app.openapi()))
