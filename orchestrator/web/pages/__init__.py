"""The server-rendered pages: one module per page group, each with a ``router``; registered here.

``install(app)`` (called by ``create_app``) makes errors on pages render as pages: the login form for 401,
an error page with the reason and every problem otherwise (the API keeps its JSON errors).
"""

from __future__ import annotations

from typing import Any

from labcontract.registry import Registry

ROUTERS: Registry[str] = Registry("web router")   # short name -> the module holding its router, in route order
for _module in (
    "orchestrator.web.pages.login",
    "orchestrator.web.pages.overview",
    "orchestrator.web.pages.runs",
    "orchestrator.web.pages.compare",
    "orchestrator.web.pages.regressions",
    "orchestrator.web.pages.submit",
    "orchestrator.web.pages.apidocs",
):
    ROUTERS.add(_module.rsplit(".", 1)[1], _module)


def install(app: Any) -> None:
    from orchestrator.web.pages.common import html_error

    app.state.web.html_error = html_error
