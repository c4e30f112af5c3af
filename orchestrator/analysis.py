"""Offline analysis of series recorded by hand or by other tools (steady state of a
preconditioning series)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from labcontract.errors import InputError, Problem
from labcontract.steady import SteadyCriteria, SteadyVerdict, detect


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _last_field(line: str) -> str:
    fields = next(csv.reader([line]), [""])
    return (fields[-1] if fields else "").strip()


def read_series_csv(path: Path) -> list[float]:
    """One value per round, in order, from a text/CSV file; the first value is round 1.

    * Blank lines are ignored.
    * A line with several comma-separated fields contributes its LAST field, so a
      ``round,iops`` CSV works (the round column is not checked; rows are taken in file order).
      Fields may be CSV-quoted. Thousands separators are therefore not supported:
      ``41,230`` reads as 230.
    * The first non-blank line is a header, and skipped, if its (last) field is not a number.
      Only that line can be a header.
    * Any other line whose field is not a number, or is NaN or infinite, is a problem. All of
      them are reported at once in one :class:`~labcontract.errors.InputError` (locations
      ``line N``, counted from 1 including blank lines), as is a file with no values at all, or
      one that cannot be read.
    """
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(source, [Problem("", f"cannot read file: {why}")]) from exc

    values: list[float] = []
    problems: list[Problem] = []
    seen_first = False
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        field = _last_field(line)
        value = _number(field)
        if not seen_first:
            seen_first = True
            if value is None:
                continue  # header
        if value is None:
            problems.append(Problem(f"line {n}", f"not a number: {line!r}"))
        elif not math.isfinite(value):
            problems.append(Problem(f"line {n}", f"not a finite number: {line!r}"))
        else:
            values.append(value)
    if problems:
        raise InputError(source, problems)
    if not values:
        raise InputError(source, [Problem("", "no values (the file is empty or holds only a header)")])
    return values


def analyze_steady_state(path: Path, criteria: SteadyCriteria = SteadyCriteria()) -> tuple[str, SteadyVerdict]:
    """Read a series with :func:`read_series_csv` and judge it with :func:`labcontract.steady.detect`.

    Returns the line to print -- exactly ``steady at round N`` or ``not steady`` -- and the
    verdict, whose ``reason`` explains it in one line.
    """
    verdict = detect(read_series_csv(path), criteria)
    line = f"steady at round {verdict.round}" if verdict.steady else "not steady"
    return line, verdict
