"""labctl's API backend: every operation through the web service's REST API (``--api URL --token-file F``,
:class:`orchestrator.labctl.api.ApiClient`), printing what the direct backend prints: the views drawn by the service
for this terminal, the rest from the service's answers. What the service cannot do is refused with its reason."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labcontract.errors import LabError
from orchestrator.labctl import apicmds
from orchestrator.labctl.backend.base import RUN_COMMANDS, Backend, CheckedSuite, QueueView, ScheduleRow, TokenRow

if TYPE_CHECKING:
    from labcontract.errors import Problem
    from orchestrator.labctl.api import ApiClient
    from orchestrator.stats.history import HistoryStatus, Regression


def _refused(path: str) -> LabError:
    """The refusal of a command that reads the lab's own disk (orchestrator/labctl/reach.py says why)."""
    from orchestrator.labctl.reach import NOT_THROUGH_API

    return LabError(f"labctl {path}: not through --api: {NOT_THROUGH_API[path]}")


class ApiBackend(Backend):
    """Every operation of :class:`~orchestrator.labctl.backend.Backend` through the web service."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    # --- runs ---

    def resolve(self, ref: str) -> str:
        return self.api.resolve(ref)

    def submit(self, suite_ref: str, host: str | None, devices: list[str], *, initiators: list[str],
               runtime: int | None, scale: float | None, live: bool, priority: int, not_before: float | None,
               expires_at: float | None, max_rounds: int | None, repeat: int | None, problems: list[Problem],
               wait: bool) -> str:
        """The web service validates the suite and the target."""
        from labcontract.errors import Problem, SubmissionError

        if problems:
            raise SubmissionError(suite_ref, problems)
        if wait:
            raise SubmissionError(suite_ref, [Problem("--wait", "not through --api: follow the run's page")])
        return apicmds.submission(self.api, suite_ref, host or "", devices, initiators=initiators, runtime=runtime,
                                  scale=scale, live=live, priority=priority, not_before=not_before,
                                  expires_at=expires_at, max_rounds=max_rounds, repeat=repeat)

    def run_command(self, run_id: str, what: str, reason: str | None = None) -> None:
        if what not in RUN_COMMANDS:
            raise ValueError(f"not a run command: {what!r}")
        if what == "cancel":
            self.api.cancel(run_id, reason or "cancelled by user")
        else:
            getattr(self.api, what)(run_id)

    def watch(self, run_id: str, timeout_s: float | None, console: Any) -> int:
        """Each frame drawn by the service for this terminal: the same view."""
        from rich.text import Text

        from orchestrator.labctl.watch import follow
        from orchestrator.textout import terminal_of
        from orchestrator.watchframe import Frame

        width, color = terminal_of(console)

        def frame() -> Frame:
            got = self.api.watch_frame(run_id, width=width, color=color)
            return Frame(str(got.get("state", "")), Text.from_ansi(str(got.get("table", "")).rstrip("\n")),
                         str(got.get("line", "")))

        def final() -> None:
            console.file.flush()
            sys.stdout.write(self.api.show(run_id, width=width, color=color))
        return follow(frame, final, run_id, console, timeout_s=timeout_s, pipe_interval=1.0)

    def queue(self) -> QueueView:
        return QueueView(apicmds.queue_rows(self.api))

    def runs_table(self, limit: int) -> Any:
        return apicmds.runs_table(self.api, limit)

    def show_run(self, ref: str, rounds: bool, console: Any) -> None:
        """Drawn by the service for this terminal: the same output."""
        from orchestrator.textout import terminal_of

        width, color = terminal_of(console)
        sys.stdout.write(self.api.show(self.api.resolve(ref), rounds=rounds, width=width, color=color))

    def markdown_report(self, ref: str) -> Path:
        raise _refused("run report")

    # --- reports ---

    def compare(self, runs: list[str], fmt: str, units: str, html: Path | None, baseline: str | None,
                console: Any) -> None:
        """The web service compares (the same code) and draws the table for this terminal's width and colours, so
        that the output is what the command prints against the store."""
        from labcontract.errors import CompareError
        from orchestrator.compare import baseline_first
        from orchestrator.textout import terminal_of
        from orchestrator.units import check_units

        check_units(units)
        if len(runs) < 2:                       # (as compare_runs words it)
            raise CompareError(f"compare needs at least 2 runs, got {len(runs)}")
        ids = [self.api.resolve(r) for r in runs]
        ids = baseline_first(ids, self.api.resolve(baseline) if baseline else None)   # refused as against the store
        width, color = terminal_of(console)
        text, partial = self.api.compare(ids, fmt, units, width=width, color=color, baseline=ids[0])
        sys.stdout.write(text)
        sys.stdout.flush()
        for rid in partial:
            print(f"warning: run {rid} is {self.api.run(rid).get('state')}: partial", file=sys.stderr)
        if html is not None:
            page, _ = self.api.compare(ids, "html", units, baseline=ids[0])
            try:
                html.write_text(page, encoding="utf-8")
            except OSError as e:
                raise LabError(f"{html}: cannot write the HTML report: {e.strerror or e}") from e

    def reference(self, run: str, suite: str, fmt: str, units: str) -> str:
        from orchestrator.units import check_units

        check_units(units)
        return self.api.reference(self.api.resolve(run), suite, fmt, units)

    def report(self, runs: list[str], html: Path | None, markdown: bool, latency_cells: list[str] | None
               ) -> Iterator[Path]:
        """The service's rendering of the runs' HTML report, written to ``html``."""
        if html is None or markdown or latency_cells:
            raise LabError("through --api: the runs' HTML report with --html FILE (no --markdown, --latency-cell)")
        text = self.api.report_of([self.api.resolve(r) for r in runs])
        try:
            html.write_text(text, encoding="utf-8")
        except OSError as e:
            raise LabError(f"{html}: cannot write the HTML report: {e.strerror or e}") from None
        yield html

    def export(self, runs: list[str], fmt: str, table: str, output: Path | None, units: str) -> list[Path]:
        return apicmds.export(self.api, runs, fmt, table, output, units)

    def export_lab(self, runs: list[str], output: Path | None, lab: str | None) -> Path:
        from labcontract.errors import ExportError

        raise ExportError("--format lab reads the store and the artifact directory: not through --api")

    def artifacts(self, ref: str) -> tuple[str, list[dict[str, Any]]]:
        run_id = self.api.resolve(ref)
        return run_id, self.api.artifacts(run_id)

    def fetch_artifact(self, row: dict[str, Any], dest: Path) -> None:
        import hashlib

        got = self.api.download(row["id"], dest)
        if hashlib.sha256(got.read_bytes()).hexdigest() != row["sha256"]:   # the listing's, too
            got.unlink()
            raise LabError(f"{dest}: its SHA-256 differs from the one the run's listing gives")

    # --- the lab's administration ---

    def show_hosts(self, console: Any) -> None:
        """Drawn by the service for this terminal: the same output."""
        from orchestrator.textout import terminal_of

        width, color = terminal_of(console)
        print(self.api.hosts_shown(width=width, color=color), end="")

    def release(self, host: str, device: str | None) -> None:
        self.api.release(host, device)

    def schedule_check(self, suite_ref: str, host: str, devices: list[str], runtime: int | None,
                       scale: float | None) -> CheckedSuite:
        """The service checks the suite and the target as a submission."""
        return CheckedSuite(suite_ref, suite_ref)

    def schedule_add(self, name: str, suite: CheckedSuite, cron: str, host: str, devices: list[str], *,
                     priority: int, runtime: int | None, scale: float | None,
                     expires_after_s: int | None) -> None:
        name_, text = apicmds.suite_of(suite.ref)
        self.api.schedule_add(name, cron, host, devices, suite=name_, suite_yaml=text, source=suite.ref,
                              runtime=runtime, scale=scale, priority=priority,
                              expires_after_s=None if expires_after_s is None else int(expires_after_s))

    def schedules(self) -> list[ScheduleRow]:
        return [ScheduleRow(str(x.get("name")), str(x.get("cron")), str(x.get("suite")), str(x.get("host")),
                            [str(d) for d in x.get("devices") or []], x.get("next_fire_at"), x.get("last_fired_at"),
                            x.get("last_run_id"), str(x.get("last_error") or ""), str(x.get("disabled_reason") or ""))
                for x in self.api.schedules()]

    def schedule_remove(self, name: str) -> None:
        self.api.schedule_remove(name)

    def token_create(self, name: str, role: str, expires_at: float | None) -> str:
        """The service makes the token and stores its hash."""
        made = self.api.token_create(name, role,
                                     None if expires_at is None else max(1, round(expires_at - time.time())))
        return str(made["token"])

    def tokens(self) -> list[TokenRow]:
        return [TokenRow(str(t.get("name")), str(t.get("role")), t.get("created_at"), str(t.get("created_by") or ""),
                         t.get("expires_at"), t.get("revoked_at")) for t in self.api.tokens()]

    def token_revoke(self, name: str) -> None:
        self.api.token_revoke(name)

    def regressions(self, *, since: str | None, after: float | None, host: str | None,
                    include_acknowledged: bool) -> tuple[list[Regression], HistoryStatus]:
        return regressions_from(self.api.regressions(since=since, host=host, all_=include_acknowledged))

    def acknowledge(self, regression_id: str, reason: str) -> None:
        self.api.acknowledge(regression_id, reason)

    def canary_dut(self, host: str, device: str) -> str:
        """Resolved by the service with the same code (orchestrator.canary.resolve): the same refusals."""
        return self.api.canary_dut(host, device)

    def canary_add(self, host: str, device: str, name: str, cron: str, quarantine: bool, priority: int) -> None:
        from labcontract.errors import Problem, SubmissionError
        from labcontract.suite import load_suite
        from orchestrator.canary import SUITE
        from orchestrator.runs.cron import cron_problem

        source = load_suite(SUITE).source        # what the direct backend names in its refusals: the same
        if (why := cron_problem(cron, time.time())) is not None:
            raise SubmissionError(source, [Problem("--cron", why)])
        self.api.canary_add(host, device, cron=cron, quarantine=quarantine, priority=priority, source=source)

    def canaries(self) -> list[dict[str, Any]]:
        return self.api.canaries()

    def notifications(self) -> list[dict[str, Any]]:
        return self.api.notifications()


def regressions_from(doc: dict[str, Any]) -> tuple[list[Regression], HistoryStatus]:
    """The regressions and the history's status as ``GET /api/regressions`` gives them (the store's own objects,
    so that the table, the notes and --json are the same both ways); ServiceError for an answer not of that shape."""
    from labcontract.errors import ServiceError
    from orchestrator.stats.history import HistoryStatus, Regression

    try:
        regs = [Regression(**{**r, "cell_key": tuple(dict(r["cell_key"]).items())})
                for r in doc["regressions"]]
        status = HistoryStatus(int(doc["series"]), int(doc["too_short"]), int(doc["need"]),
                               tuple(str(c) for c in doc.get("changed") or ()))
    except (KeyError, TypeError, ValueError) as e:
        raise ServiceError(f"GET /api/regressions: an answer not of the expected shape ({e})") from None
    return regs, status
