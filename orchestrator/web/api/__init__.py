"""The JSON API under /api: one module per resource, each with a ``router``; registered here."""

from labcontract.registry import Registry

ROUTERS: Registry[str] = Registry("web router")   # short name -> the module holding its router, in route order
for _module in (
    "orchestrator.web.api.lab",
    "orchestrator.web.api.runs",
    "orchestrator.web.api.artifacts",
    "orchestrator.web.api.reports",
    "orchestrator.web.api.control",
    "orchestrator.web.api.admin",
    "orchestrator.web.api.regressions",
    "orchestrator.web.api.canary",
    "orchestrator.web.live",          # GET /api/runs/{run_id}/live (server-sent events; helper H3's module)
):
    ROUTERS.add(_module.rsplit(".", 1)[1], _module)
