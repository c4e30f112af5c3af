"""``labctl analyze changes FILE.csv``: change points of a history kept elsewhere.

The file is a CSV with a header row naming a ``value`` column (any other columns -- a date, a run
id -- are ignored), then one row per run in time order. Rows are numbered from 1 at the first data
row, and ``change at row N`` names the first run after the change, so an engineer can find it in
the file (a spreadsheet shows it at line N + 1, under the header).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import NoReturn

from labcontract.errors import InputError, Problem
from orchestrator.stats.changepoints import (
    MAX_POINTS,
    MIN_SIZE,
    P_VALUE,
    PERMUTATIONS,
    ChangePoint,
    detect_changes,
    min_points,
    too_short_message,
)

MAX_BYTES = 16 * 1024 * 1024  # a history of MAX_POINTS runs is far smaller; refuse anything absurd
MAX_LISTED = 20  # bad rows listed one by one before "... and N more"
MAX_VALUE = 1e18  # beyond any IOPS, byte rate or latency in ns


def read_value_column(path: Path) -> list[float]:
    """The ``value`` column of ``path`` as floats, in row order. Every problem is reported at once
    in one :class:`InputError`: an unreadable file, no header or no ``value`` column, a value that is
    empty, not a number or not finite (with its row number), too few or too many rows."""
    source = str(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise InputError(source, [Problem("", f"file larger than {MAX_BYTES // (1024 * 1024)} MiB")])
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(source, [Problem("", f"cannot read file: {why}")]) from exc

    try:
        rows = [r for r in csv.reader(io.StringIO(text)) if any(f.strip() for f in r)]
    except csv.Error as exc:
        raise InputError(source, [Problem("", f"not a CSV file: {exc}")]) from exc
    if not rows:
        raise InputError(source, [Problem("", "empty file: a header with a 'value' column is needed")])
    header = [h.strip().lower() for h in rows[0]]
    where = [i for i, h in enumerate(header) if h == "value"]
    if len(where) != 1:
        why = "no 'value' column" if not where else "more than one 'value' column"
        _fail(source, [Problem("header", f"{why} (columns: {', '.join(rows[0]) or 'none'})")])
    col = where[0]

    values: list[float] = []
    problems: list[Problem] = []
    bad = 0
    for n, row in enumerate(rows[1:], start=1):
        field = row[col].strip() if col < len(row) else ""
        why = ""
        if not field:
            why = "no value"
        else:
            try:
                v = float(field)
            except ValueError:
                why = f"not a number: {field[:40]!r}"
            else:
                if not math.isfinite(v):
                    why = f"not a finite number: {field[:40]!r}"
                elif abs(v) > MAX_VALUE:          # 1e308s overflow the detector's sums (an OverflowError)
                    why = f"out of range: {field[:40]!r} (at most {MAX_VALUE:g} in size)"
                else:
                    values.append(v)
        if why:
            bad += 1
            if bad <= MAX_LISTED:
                problems.append(Problem(f"row {n}", why))
    if bad > MAX_LISTED:
        problems.append(Problem("", f"... and {bad - MAX_LISTED} more rows without a valid value"))
    rows_n = len(rows) - 1
    if rows_n < min_points(MIN_SIZE):
        problems.append(Problem("", too_short_message(rows_n, MIN_SIZE)))
    elif rows_n > MAX_POINTS:
        problems.append(Problem("", f"history too long: {rows_n} rows; the detector takes at most {MAX_POINTS} "
                                    "(keep the latest ones)"))
    if problems:
        _fail(source, problems)
    return values


def _fail(source: str, problems: list[Problem]) -> NoReturn:
    raise InputError(source, problems)


def fmt(x: float) -> str:
    """Four significant digits without an exponent for everyday magnitudes: 41234.5 -> 41230,
    0.012345 -> 0.01235, 1.5 -> 1.500."""
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    if mag >= 15 or mag < -5:
        return f"{x:.4g}"
    decimals = 3 - mag
    if decimals <= 0:
        return f"{round(x, decimals):.0f}"
    return f"{x:.{decimals}f}"


def change_lines(points: list[ChangePoint]) -> list[str]:
    """``change at row N: BEFORE -> AFTER`` for each change (N is 1-based), or ``no change``."""
    if not points:
        return ["no change"]
    return [f"change at row {p.index + 1}: {fmt(p.mean_before)} -> {fmt(p.mean_after)}" for p in points]


def analyze_changes_detailed(path: Path) -> tuple[list[str], str]:
    """The lines to print and a one-line account for stderr (magnitude and p-value of each change)."""
    values = read_value_column(path)
    points = detect_changes(values, source=str(path))
    how = (f"{len(values)} runs; E-Divisive means, {PERMUTATIONS} permutations, p <= {P_VALUE}, "
           f"segments of at least {MIN_SIZE} runs")
    if points:
        each = "; ".join(f"row {p.index + 1}: "
                         + (f"{p.change_pct:+.1f}%" if p.change_pct is not None else "from 0")
                         + f" (p={p.p_value:.3f})" for p in points)
        how = f"{how}: {each}"
    else:
        how = f"{how}: no significant change"
    return change_lines(points), how


def analyze_changes(path: Path) -> list[str]:
    """Lines ``change at row N: MEAN_BEFORE -> MEAN_AFTER`` (N: the 1-based data row of the first
    run after the change; means of the runs between neighbouring changes), or ``["no change"]``."""
    return analyze_changes_detailed(path)[0]
