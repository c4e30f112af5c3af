"""How each labctl command reaches the lab, so that ``--api`` is never silently ignored (issue 27: ``watch``,
``compare`` and others read the local store when given ``--api``).

Every command is in exactly one of three tables (a unit test walks the command tree and fails on a command in none):

- :data:`THROUGH_API`: the command asks the web service when ``--api`` is given (the API backend that
  ``backend.backend`` chooses) and prints what it prints against the store and the broker; a case the service cannot
  serve is refused by the command itself, with its reason;
- :data:`LAB_FREE`: the command reads no lab (a suite file, a series, SSH to hosts named on its command line), so it
  does the same with and without ``--api``;
- :data:`NOT_THROUGH_API`: the command cannot go through a web service; with ``--api`` it is refused before it does
  anything, with the reason and what to use instead (:func:`guard`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import typer

from orchestrator.labctl.groups import LOADED

THROUGH_API = frozenset({
    "submit", "cancel", "pause", "resume", "rerun", "watch", "queue", "runs", "run show", "compare", "report",
    "export", "artifacts", "notifications", "hosts", "hosts release", "hosts collect-logs", "regressions",
    "regressions ack", "canary add", "canary list", "canary remove", "schedule add", "schedule list", "schedule rm",
    "token create", "token list", "token revoke",
})

LAB_FREE: dict[str, str] = {
    "suite validate": "checks suite files",
    "suite list": "lists the built-in suites",
    "suite render": "renders a suite's jobs",
    "suite import": "writes a suite from fio job files",
    "analyze steady-state": "judges a series given on its command line",
    "analyze changes": "judges a series given on its command line",
    "analyze fio": "reads fio output files",
    "hosts exec": "runs a command over SSH on the hosts its options name",
}

NOT_THROUGH_API: dict[str, str] = {
    "serve": "it runs the web service on this machine",
    "controller": "it runs the controller on this machine",
    "agent": "it runs an agent on this machine",
    "demo": "it starts a lab on this machine",
    "lab up": "it starts a lab on this machine",
    "broker acl": "it writes the broker's ACL file on the broker's host",
    "import": "the controller takes imported runs through the broker (an admin's broker user on the central lab)",
    "import-fio": "the controller takes imported runs through the broker (a broker user of the lab that may send "
                  "commands)",
    "run report": "the Markdown report links the artifacts on the store's disk: use `labctl report RUN --html FILE` "
                  "or `labctl artifacts RUN`",
    "prometheus targets": "the agents' metrics addresses are read from the store: give --inventory DIR instead of "
                          "--api, or run it on the controller host",
}


def refused(path: str, api_url: str | None) -> str | None:
    """Why ``labctl PATH`` is refused, given ``--api`` (None when it goes ahead)."""
    if api_url is None or path not in NOT_THROUGH_API:
        return None
    return f"labctl {path}: not through --api: {NOT_THROUGH_API[path]}"


def guard(app: typer.Typer, api_url: Callable[[], str | None]) -> None:
    """Wrap every command of :data:`NOT_THROUGH_API` in ``app`` (and its groups, those loaded later included:
    groups.LOADED) so that, given ``--api``, it is refused with the reason (exit 2) before it does anything."""
    def walk(t: typer.Typer, prefix: str) -> None:
        for info in t.registered_commands:
            name = info.name or (info.callback.__name__.replace("_", "-") if info.callback else "")
            path = f"{prefix}{name}"
            if info.callback is not None and path in NOT_THROUGH_API:
                info.callback = _refusing(info.callback, path, api_url)
        for group in t.registered_groups:
            if group.typer_instance is not None and group.name:
                walk(group.typer_instance, f"{prefix}{group.name} ")

    walk(app, "")
    LOADED.append(lambda group, name: walk(group, f"{name} "))


def _refusing(fn: Callable[..., Any], path: str, api_url: Callable[[], str | None]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if (why := refused(path, api_url())) is not None:
            from orchestrator.labctl.common import fail

            fail(why)
            raise typer.Exit(2)
        return fn(*args, **kwargs)

    return wrapper
