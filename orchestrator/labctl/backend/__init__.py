"""How ``labctl`` reaches the lab: one interface, :class:`Backend`, with two implementations. The commands
(``cli``, ``reports``, ``hosts``, ``schedules``, ``tokens``, ``regressions``, ``artifacts``, ``canary``,
``notifications``) parse their options, call :func:`backend` once and print what it answers; none of them asks
which implementation it holds.

- :class:`~orchestrator.labctl.backend.direct.DirectBackend`: the store through SQLAlchemy sessions (read only) and
  the controller through the broker (``orchestrator.runs.client``); by area in ``direct_runs``, ``direct_reports``
  and ``direct_admin``;
- :class:`~orchestrator.labctl.backend.viaapi.ApiBackend`: the web service's REST API (``--api URL --token-file F``,
  :class:`orchestrator.labctl.api.ApiClient`), which prints what the direct one prints.

An operation answers data where both ways print the same thing from it (the command prints it once); the views the
web service draws for the client's terminal (``run show``, ``hosts``, ``watch``, ``compare``) are printed by the
backend on the console it is given, and ``runs`` answers its table (through the API it also names the submitter).
What has no API equivalent (``run report``, ``report --markdown`` / ``--latency-cell``, ``export --format lab``,
``submit --wait``) is refused by :class:`ApiBackend` with its reason, as before.

This module imports nothing heavy (``labctl --version`` and ``--help`` load it with cli.py); the implementations are
imported by :func:`backend` when a command runs.
"""

from __future__ import annotations

from orchestrator.labctl.backend.base import (
    RUN_COMMANDS,
    Backend,
    CheckedSuite,
    QueueView,
    ScheduleRow,
    TokenRow,
)

__all__ = ["RUN_COMMANDS", "Backend", "CheckedSuite", "QueueView", "ScheduleRow", "TokenRow", "backend"]


def backend() -> Backend:
    """The backend the global options chose: through the web service with ``--api`` (and ``--token-file``), else
    the store and the broker of the lab config. The one place that asks
    :func:`~orchestrator.labctl.apicmds.api_client` (a unit test keeps it so: tests/unit/test_labctl_backend.py)."""
    from orchestrator.labctl.apicmds import api_client

    api = api_client()
    if api is not None:
        from orchestrator.labctl.backend.viaapi import ApiBackend

        return ApiBackend(api)
    from orchestrator.labctl.backend.direct import DirectBackend
    from orchestrator.labctl.common import State

    return DirectBackend(State.config)

