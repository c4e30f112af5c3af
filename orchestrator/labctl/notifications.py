"""``labctl notifications``: where the controller sends the end of each run (the lab file's ``[notify]`` and its
``--notify-*`` options), each sink redacted as the store keeps it, with its delivery state. From the store, or with
``--api URL --token-file F`` from ``GET /api/notifications``: the same rows, printed the same way."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from orchestrator.labctl.common import fails_cleanly, out


@fails_cleanly
def notifications(as_json: Annotated[bool, typer.Option("--json", help="Print the sinks as JSON.")] = False) -> None:
    """The notification sinks of the lab (a webhook by its scheme and host only) and how delivery goes: runs
    delivered and pending, last success, last failure and its reason."""
    from orchestrator.labctl.backend import backend
    from orchestrator.notifysinks import print_sinks

    rows = backend().notifications()
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        print_sinks(out, rows)
