"""The controller: the store's only writer (see :mod:`.loop`).

Modules by job: :mod:`.core` (state; lifecycle of runs, steps and attempts), :mod:`.events` (agent events),
:mod:`.commands` (CLI commands, schedules, notifications), :mod:`.stepping` (dispatch and the interlock),
:mod:`.watchdogs` (lost hosts, deadlines, orphans, the controller's own steps), :mod:`.loop` (the
:class:`Controller` and its loop). What a step of each kind does is in :mod:`orchestrator.kinds`.

The names other modules and tests import from ``orchestrator.controller`` are re-exported here;
``BACKOFF_FIRST_S`` / ``BACKOFF_MAX_S`` are read from here by the loop (a test may shorten them).
"""

from __future__ import annotations

from labcontract.protocol import PROTOCOL_VERSION
from orchestrator.controller.commands import REPLY_TTL_S
from orchestrator.controller.loop import PENDING_AGAIN_S, Controller
from orchestrator.controller.stepping import step_operation
from orchestrator.controller.transient import BACKOFF_FIRST_S, BACKOFF_MAX_S
from orchestrator.kinds.net import NET_TARGET_EXTRA_S
from orchestrator.runs.cron import next_fire
from orchestrator.runs.submission import new_run_id, submission_problems
from orchestrator.store.models import find_device

__all__ = ["BACKOFF_FIRST_S", "BACKOFF_MAX_S", "NET_TARGET_EXTRA_S", "PENDING_AGAIN_S", "PROTOCOL_VERSION",
           "REPLY_TTL_S", "Controller", "find_device", "new_run_id", "next_fire", "step_operation",
           "submission_problems"]
