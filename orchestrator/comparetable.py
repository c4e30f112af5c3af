"""``labctl compare`` in the terminal: a boxed table of the runs' figures per cell, each against the first run,
with the verdict of the difference on the cell's headline figures.

Layout (docs/metrics.md, "Comparing runs"), chosen to stay readable at 100 columns:

* a cell's full name is a line of its own across the table, its runs beneath it, one row each: a long name
  wraps within the table's width instead of taking a column from the figures;
* per run: the figures (the mean over the cell's repeats, ``n=N`` after the run's letter when it has N > 1
  repeats), each with its difference to the first run in %, then one ``verdict`` column on the headline
  figures (:data:`orchestrator.cellmetrics.HEADLINE`: IOPS, MB/s and mean latency; TPS and p95 latency;
  Gbps): ``significantly better`` / ``significantly worse``, ``no significant difference``, ``single run:
  cannot judge``, or a list per figure when they disagree. The test, p, effect size and intervals are in
  ``--format json|csv``: in the table they would need a column per figure;
* a table wider than the terminal first wraps its headers between words, then leaves out the figures that
  are not headline ones (named beneath the table); if it is still wider, it is written wider.
"""

from __future__ import annotations

import textwrap

from rich.console import Console

from orchestrator.cellmetrics import HEADLINE, Metric
from orchestrator.cells import op_modes
from orchestrator.compare import ALPHA, CANNOT_JUDGE, Comparison, Row, ref_name
from orchestrator.power import NOT_MEASURED, POWER_METRICS
from orchestrator.stats.significance import test_for
from orchestrator.textout import ColorSystem, drawn

TEST_NAMES = {"welch": "Welch's t-test", "mann-whitney": "Mann-Whitney U"}
Line = tuple[list[str], bool]      # a row's cells, whether it ends its cell's group; one cell: a spanning line


def run_line(c: Comparison, i: int) -> str:
    d = c.details[i]
    r = d.run
    modes = "/".join(op_modes(st.cell for st in d.steps)) or "-"
    where = (f"{(r.topology or {}).get('target', r.host)} <- {', '.join((r.topology or {}).get('initiators', []))}"
             if c.network else f"{r.host}:{','.join(r.devices or [r.device])}")
    os_name = c.oses[i][0]
    # the OS only when the runs differ in it (one device under Linux and under Windows)
    on = f", {os_name or 'OS unknown'}" if len({name for name, _ in c.oses}) > 1 else ""
    lab = f"lab {r.lab}, " if r.lab else ""       # a run imported from another lab (labctl import)
    line = f"{ref_name(i)}: {r.id} ({lab}suite {r.suite_name}, {where}{on}, {modes}, {r.state})"
    if c.partial(i):
        done = sum(1 for row in c.rows if any(v is not None for v in row.entries[i].values.values()))
        line += f" (partial: {done} of {sum(1 for row in c.rows if row.entries[i].step)} cells measured so far)"
    return line


def fmt_value(metric: Metric, v: float | None) -> str:
    """A metric's value as the tables print it ('-': none)."""
    return "-" if v is None else metric.fmt.format(v)


def verdict_text(c: Comparison, row: Row, i: int) -> str:
    """Run ``i``'s verdict against the first run on the headline figures, in words (see the module docstring)."""
    if i == 0:
        return ""
    said: dict[str, list[str]] = {}
    for m in c.judged:
        v = row.verdict(i, m.name)
        if v is None:
            continue
        if v.kind == "significant":
            better = (v.diff or 0.0) > 0 if HEADLINE.get(m.name, True) else (v.diff or 0.0) < 0
            what = "significantly better" if better else "significantly worse"
        elif v.kind == "no significant difference":
            what = "no significant difference"
        else:
            what = CANNOT_JUDGE
        said.setdefault(what, []).append(m.title)
    if not said:
        return "-"
    if len(said) == 1:
        return next(iter(said))
    return "; ".join(f"{what}: {', '.join(titles)}" for what, titles in said.items())


def _lines(c: Comparison, metrics: list[Metric]) -> list[Line]:
    lines: list[Line] = []
    for row in c.rows:
        lines.append(([row.label], False))
        for i, e in enumerate(row.entries):
            n = row.repeats(i)
            run = f"{ref_name(i)}{f' n={n}' if n > 1 else ''} {e.op_mode or ''}".rstrip()
            cells = [run]
            for m in metrics:
                v = e.values.get(m.name)
                # a measured cell whose host's power was not read says so (orchestrator.power)
                cells.append(NOT_MEASURED if v is None and m.name in POWER_METRICS and e.step else fmt_value(m, v))
                if m.diff:
                    d = row.diff(i, m.name) if i else None
                    cells.append("-" if d is None else f"{d:+.1f}%")
            cells.append(verdict_text(c, row, i))
            lines.append((cells, i == len(row.entries) - 1))
    return lines


def _heads(metrics: list[Metric]) -> list[str]:
    return ["run", *(h for m in metrics for h in ((m.title, "vs A") if m.diff else (m.title,))), "verdict"]


VERDICT_WIDTH = 26          # "no significant difference" on one line; narrower tables wrap it between words


def _widths(heads: list[str], lines: list[Line], wrap_heads: bool, verdict: int) -> list[int]:
    rows = [cells for cells, _ in lines if len(cells) > 1]
    out = []
    for j, h in enumerate(heads):
        content = max([len(cells[j]) for cells in rows], default=1)
        if j == len(heads) - 1:
            longest_word = max([len(w) for cells in rows for w in cells[j].split()], default=1)
            content = max(min(content, verdict), longest_word)
        head = max(len(w) for w in h.split()) if wrap_heads else len(h)
        out.append(max(content, head))
    return out


def _width(widths: list[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1


def print_table(console: Console, c: Comparison) -> None:
    """A header line per run, then each cell's name and a row per run beneath it: each metric with its
    difference to A, and the verdict on the headline figures."""
    for i in range(len(c.details)):
        console.print(run_line(c, i), highlight=False, soft_wrap=True, markup=False)
    match = ("profile, MTU and path mode" if c.network else "test and threads / clients"
             if c.metrics and c.metrics[0].name == "tps" else "profile and swept values")
    common = sum(1 for row in c.rows if all(e.step for e in row.entries))
    console.print(f"cells matched by {match}{' and OP mode' if c.with_op_mode else ''}: {len(c.rows)} cells, "
                  f"{common} in every run; differences are against A", highlight=False, soft_wrap=True, markup=False)
    if c.repeated:
        console.print("figures are the mean of a cell's repeats (n=N: N repeats measured)", highlight=False,
                      markup=False)
    tests = " or ".join(dict.fromkeys(TEST_NAMES[test_for(m.name)] for m in c.judged))
    console.print(f"verdict on {', '.join(m.title for m in c.judged)} against A: {tests} at {ALPHA:.0%}, when both "
                  f"runs have 2 or more repeats of the cell (p, effect size, intervals: --format json|csv)",
                  highlight=False, markup=False)
    headline = [m for m in c.metrics if m.name in HEADLINE] or c.metrics
    choice: tuple[list[Metric], list[str], list[int], list[Line]] | None = None
    for metrics in (c.metrics, headline):
        heads, lines = _heads(metrics), _lines(c, metrics)
        for wrap_heads, verdict in ((False, VERDICT_WIDTH), (True, VERDICT_WIDTH), (True, 20), (True, 13)):
            widths = _widths(heads, lines, wrap_heads, verdict)
            choice = (metrics, heads, widths, lines)
            if _width(widths) <= console.width:
                break
        else:
            continue
        break
    assert choice is not None
    metrics, heads, widths, lines = choice
    console.out("\n".join(grid(heads, widths, lines, left={0, len(heads) - 1})), highlight=False)
    left_out = [m.title for m in c.metrics if m not in metrics]
    if left_out:
        console.print("\n".join(textwrap.wrap(f"not shown at this width: {', '.join(left_out)} (a wider terminal, "
                                               "or --format json|csv)", max(console.width, 40))),
                      highlight=False, soft_wrap=True, markup=False)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def grid(heads: list[str], widths: list[int], rows: list[Line], left: set[int]) -> list[str]:
    """A boxed text table (rich's look) drawn directly: rich measures every cell again, which takes seconds
    for a 10-run pattern-125 compare (1,280 rows); here each line is a join. A row of one cell spans the
    table (a cell's name above its runs)."""
    inner = _width(widths) - 4

    def rule(a: str, mid: str, b: str, fill: str) -> str:
        return a + mid.join(fill * (w + 2) for w in widths) + b

    def block(cells: list[str], bar: str, bottom: bool) -> list[str]:
        if len(cells) == 1:
            return [f"{bar} {part.ljust(inner)} {bar}" for part in _wrap(cells[0], inner)]
        cols = [_wrap(c, w) for c, w in zip(cells, widths, strict=True)]
        height = max(len(c) for c in cols)
        cols = [[""] * (height - len(c)) + c if bottom else c + [""] * (height - len(c)) for c in cols]
        return [bar + bar.join(f" {col[k].ljust(w) if j in left else col[k].rjust(w)} "
                               for j, (col, w) in enumerate(zip(cols, widths, strict=True))) + bar
                for k in range(height)]

    out = [rule("┏", "┳", "┓", "━"), *block(heads, "┃", True), rule("┡", "╇", "┩", "━")]
    for i, (cells, end) in enumerate(rows):
        out += block(cells, "│", False)
        if end and i < len(rows) - 1:
            out.append(rule("├", "┼", "┤", "─"))
    out.append(rule("└", "┴", "┘", "─"))
    return out



def table_text(c: Comparison, width: int, color_system: ColorSystem | None = None) -> str:
    """The table :func:`print_table` prints, as a terminal ``width`` columns wide would show it (what the web API
    sends ``labctl --api compare``)."""
    return drawn(lambda console: print_table(console, c), width, color_system)
