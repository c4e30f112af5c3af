"""labctl's direct backend: the store (read only, through SQLAlchemy sessions) and the controller (commands over
the broker), by area."""

from __future__ import annotations

from orchestrator.labctl.backend.base import Backend
from orchestrator.labctl.backend.direct_admin import DirectAdmin
from orchestrator.labctl.backend.direct_reports import DirectReports
from orchestrator.labctl.backend.direct_runs import DirectRuns


class DirectBackend(DirectRuns, DirectReports, DirectAdmin, Backend):
    """Every operation of :class:`~orchestrator.labctl.backend.Backend` against the lab of a ``LabConfig``."""
