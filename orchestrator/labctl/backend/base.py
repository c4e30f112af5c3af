"""The interface of labctl's backends (:class:`Backend`) and what its operations answer; the package's docstring
(orchestrator/labctl/backend/__init__.py) says how it is used. Nothing heavy is imported here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from labcontract.errors import Problem
    from orchestrator.stats.history import HistoryStatus, Regression

RUN_COMMANDS = {"cancel": "cancelled", "pause": "paused", "resume": "resumed", "rerun": "queued again"}


@dataclass
class QueueView:
    """``labctl queue``: a row per run (run, suite, prio, target, state, steps, status), and why the states may be
    stale (the controller unreachable), printed to stderr before the table."""

    rows: list[tuple[str, ...]]
    warning: str | None = None


@dataclass
class ScheduleRow:
    """One schedule as ``labctl schedule list`` prints it (from the store or from the API alike)."""

    name: str
    cron: str
    suite: str
    host: str
    devices: list[str]
    next_fire_at: float | None
    last_fired_at: float | None
    last_run_id: str | None
    last_error: str
    disabled_reason: str


@dataclass
class TokenRow:
    name: str
    role: str
    created_at: Any
    created_by: str
    expires_at: Any
    revoked_at: Any


@dataclass
class CheckedSuite:
    """A schedule's suite as checked before the schedule is sent: ``source`` names it in refusals; ``suite`` is the
    loaded suite when it was judged here (direct), None when the web service judges it (API)."""

    ref: str
    source: str
    suite: Any = field(default=None)


class Backend(Protocol):
    """The operations of the labctl commands, the same through the store and broker or through the web service."""

    # --- runs (direct_runs) ---------------------------------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """The run id of a run id, unique prefix or 'last'."""
        ...

    def submit(self, suite_ref: str, host: str | None, devices: list[str], *, initiators: list[str],
               runtime: int | None, scale: float | None, live: bool, priority: int, not_before: float | None,
               expires_at: float | None, max_rounds: int | None, repeat: int | None, problems: list[Problem],
               wait: bool) -> str:
        """Queue a suite; the run id. ``problems`` found in the options are raised with the submission's own."""
        ...

    def run_command(self, run_id: str, what: str, reason: str | None = None) -> None:
        """cancel / pause / resume / rerun (:data:`RUN_COMMANDS`) a run; LabError when refused."""
        ...

    def watch(self, run_id: str, timeout_s: float | None, console: Any) -> int:
        """Follow a run on ``console`` until it ends, then its results; the exit code (0: it succeeded)."""
        ...

    def queue(self) -> QueueView:
        ...

    def runs_table(self, limit: int) -> Any:
        """The newest runs as a rich Table (through the API it also names who submitted each)."""
        ...

    def show_run(self, ref: str, rounds: bool, console: Any) -> None:
        """``labctl run show``, printed on ``console``."""
        ...

    def markdown_report(self, ref: str) -> Path:
        """Write the run's Markdown report; its path (not through the API)."""
        ...

    # --- reports (direct_reports) ---------------------------------------------------------------------------------

    def compare(self, runs: list[str], fmt: str, units: str, html: Path | None, baseline: str | None,
                console: Any) -> None:
        """``labctl compare`` printed (the table on ``console``, another format to stdout), its partial runs warned
        about, the HTML page written to ``html`` (the command says where)."""
        ...

    def reference(self, run: str, suite: str, fmt: str, units: str) -> str:
        """A run against the reference set of a suite, as text (``table`` or ``json``)."""
        ...

    def report(self, runs: list[str], html: Path | None, markdown: bool, latency_cells: list[str] | None
               ) -> Iterator[Path]:
        """Write the runs' HTML report and / or their Markdown reports; each file once written, to be printed."""
        ...

    def export(self, runs: list[str], fmt: str, table: str, output: Path | None, units: str) -> list[Path]:
        """Write the runs' tables (to stdout without ``output``); the files written."""
        ...

    def export_lab(self, runs: list[str], output: Path | None, lab: str | None) -> Path:
        """Export the runs for another lab (not through the API)."""
        ...

    def artifacts(self, ref: str) -> tuple[str, list[dict[str, Any]]]:
        """The run id and its artifacts' rows (step, step_id, attempt_id, id, name, size, sha256...)."""
        ...

    def fetch_artifact(self, row: dict[str, Any], dest: Path) -> None:
        """Copy (or download) one artifact to ``dest``, checked against its SHA-256."""
        ...

    # --- the lab's administration (direct_admin) --------------------------------------------------------------------

    def show_hosts(self, console: Any) -> None:
        """``labctl hosts``, printed on ``console``."""
        ...

    def release(self, host: str, device: str | None) -> None:
        ...

    def schedule_check(self, suite_ref: str, host: str, devices: list[str], runtime: int | None,
                       scale: float | None) -> CheckedSuite:
        """The schedule's suite, judged here as a submission when the web service will not judge it."""
        ...

    def schedule_add(self, name: str, suite: CheckedSuite, cron: str, host: str, devices: list[str], *,
                     priority: int, runtime: int | None, scale: float | None,
                     expires_after_s: int | None) -> None:
        ...

    def schedules(self) -> list[ScheduleRow]:
        ...

    def schedule_remove(self, name: str) -> None:
        ...

    def token_create(self, name: str, role: str, expires_at: float | None) -> str:
        """Make a token; the token itself (to be shown once)."""
        ...

    def tokens(self) -> list[TokenRow]:
        ...

    def token_revoke(self, name: str) -> None:
        ...

    def regressions(self, *, since: str | None, after: float | None, host: str | None,
                    include_acknowledged: bool) -> tuple[list[Regression], HistoryStatus]:
        """The regressions (``since`` as given, ``after`` as parsed from it) and the history's status."""
        ...

    def acknowledge(self, regression_id: str, reason: str) -> None:
        ...

    def canary_dut(self, host: str, device: str) -> str:
        """The name of a declared DUT named by name, path or by-id link; SubmissionError naming every problem."""
        ...

    def canary_add(self, host: str, device: str, name: str, cron: str, quarantine: bool, priority: int) -> None:
        ...

    def canaries(self) -> list[dict[str, Any]]:
        ...

    def notifications(self) -> list[dict[str, Any]]:
        ...
