"""The JSON API under /api: one module per resource, each with a ``router``; registered here."""

ROUTERS: tuple[str, ...] = (
    "orchestrator.web.api.lab",
    "orchestrator.web.api.runs",
    "orchestrator.web.api.artifacts",
    "orchestrator.web.api.reports",
    "orchestrator.web.api.control",
    "orchestrator.web.api.admin",
    "orchestrator.web.api.regressions",
    "orchestrator.web.api.canary",
    "orchestrator.web.live",          # GET /api/runs/{run_id}/live (server-sent events; helper H3's module)
)
