"""``labctl regressions``: where a headline figure of a cell got worse across the run history
(orchestrator.stats.history), and acknowledging one so it is not flagged again. The list reads the store; an
acknowledgement is a command to the controller (the store's only writer)."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from labcontract.errors import LabError
from orchestrator.labctl.backend import backend
from orchestrator.labctl.common import command_group, fails_cleanly, out
from orchestrator.labctl.groups import HELP

if TYPE_CHECKING:
    from rich.table import Table

    from orchestrator.stats.history import HistoryStatus, Regression

regressions_app = command_group(help=HELP["regressions"])


def _value(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.1f}" if abs(v) >= 10 else f"{v:,.2f}" if abs(v) >= 0.1 \
        else f"{v:.3g}"


def regression_table(regs: list[Regression], show_ack: bool = False) -> Table:
    """The regressions of one series family (host, device, suite: the heading above it). Fixed widths keep the
    tables of several families aligned; the cell takes what is left (folded) and the table fits 100 columns."""
    from rich.table import Table

    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, 1, 0, 0), width=100)
    t.add_column("id", no_wrap=True, min_width=12)
    t.add_column("run", no_wrap=True, min_width=16)
    t.add_column("cell", overflow="fold", ratio=1)
    t.add_column("metric", no_wrap=True, min_width=11)
    t.add_column("before → after", justify="right", no_wrap=True, min_width=17)
    t.add_column("change", justify="right", no_wrap=True, min_width=7)
    t.add_column("conf", justify="right", no_wrap=True, min_width=5)
    t.add_column("noise", justify="right", no_wrap=True, min_width=8)
    if show_ack:
        t.add_column("ack", no_wrap=True)
    for r in regs:
        when = datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M") if r.started_at else ""
        row = [r.id, f"{r.run_id}\n{when}" if when else r.run_id, r.cell, r.metric,
               f"{_value(r.before)} → {_value(r.after)}", f"{r.change_pct:+.1f}%",
               f"{r.confidence:.2f}" + ("*" if r.rule == "last" else ""),
               "-" if r.noise_cov_pct is None or r.detectable_pct is None
               else f"CoV {r.noise_cov_pct:.1f}%\nsees ≥{r.detectable_pct:.0f}%"]
        if show_ack:
            row.append("yes" if r.acknowledged else "")
        t.add_row(*row)
    return t


def family(r: Regression) -> str:
    """The heading of a series family: host, device model and firmware, suite."""
    device = " ".join(x for x in (r.model, f"fw {r.firmware}" if r.firmware else "") if x) or "no device"
    return f"{r.host} · {device} · suite {r.suite}"


def _print(regs: list[Regression], status: HistoryStatus, show_ack: bool, since: str | None) -> None:
    groups: dict[str, list[Regression]] = {}
    for r in regs:
        groups.setdefault(family(r), []).append(r)
    for i, (heading, members) in enumerate(groups.items()):
        if i:
            out.print()
        out.print(heading, style="bold", markup=False, highlight=False)
        out.print(regression_table(members, show_ack))
    for r in regs:
        if r.acknowledged and r.ack_reason:
            print(f"{r.id} acknowledged: {r.ack_reason}")
    if regs:
        print("noise: the series' CoV over the history its latest run is judged against, and the smallest\n"
              "change in one run it can tell from that noise")
    if any(r.rule == "last" for r in regs):
        print("* the latest runs, judged against the history before them (the detector needs 3 runs after a "
              "change)")
    if not regs:
        print("no regressions" + (f" since {since}" if since else "") + f" ({status.series} series judged)")
    note = status.message()
    if note:
        print(note)


@regressions_app.callback(invoke_without_command=True)
@fails_cleanly
def regressions_list(
    ctx: typer.Context,
    since: Annotated[str | None, typer.Option(help="Only changes at runs started since: a duration ago (7d, 12h) "
                                                   "or a date (YYYY-MM-DD[ HH:MM]).")] = None,
    host: Annotated[str | None, typer.Option(help="Only this host's series.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Also the acknowledged ones.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON: the regressions and the series counts.")] = False,
) -> None:
    """Where a headline figure (IOPS, MB/s, mean latency, TPS, p95 latency, Gbps) of a cell got worse by more
    than 5% across the runs of a host, device model, firmware and suite (see docs/statistics.md)."""
    if ctx.invoked_subcommand is not None:
        return
    from orchestrator.stats.history import parse_since

    after = parse_since(since, time.time()) if since is not None else None      # (refused here, both ways)
    regs, status = backend().regressions(since=since, after=after, host=host, include_acknowledged=all_)
    if as_json:
        print(json.dumps({"regressions": [r.as_dict() for r in regs], "series": status.series,
                          "too_short": status.too_short, "need": status.need, "changed": list(status.changed)},
                         indent=2))
        return
    _print(regs, status, all_, since)


@regressions_app.command("ack")
@fails_cleanly
def regressions_ack(
    regression_id: Annotated[str, typer.Argument(metavar="ID", help="The regression's id (labctl regressions).")],
    reason: Annotated[str, typer.Option(help="Why it is accepted (e.g. new firmware, expected).")] = "",
) -> None:
    """Acknowledge a regression: it is not listed (nor flagged on its run) again; --all still shows it."""
    rid = regression_id.strip().lower()
    if len(reason) > 1024:
        raise LabError(f"--reason: {len(reason)} characters; at most 1024")
    b = backend()
    regs, _ = b.regressions(since=None, after=None, host=None, include_acknowledged=True)
    match = next((r for r in regs if r.id == rid), None)
    if match is None:
        raise LabError(f"no regression {regression_id[:40]!r} (labctl regressions --all lists them)")
    if match.acknowledged:
        print(f"regression {rid} was already acknowledged")
        return
    b.acknowledge(rid, reason)
    print(f"regression {rid} acknowledged ({match.host} {match.suite} {match.cell} {match.metric} at "
          f"{match.run_id})")
