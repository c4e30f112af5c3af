"""CSV: one file per table, ``<table>.csv`` in the output directory (a single table may go to a named
``.csv`` file or to standard output). A header row of the documented columns; a missing value is an empty
field, booleans are ``true`` / ``false``, and text starting with = + - @ gets a leading apostrophe (a value an
agent reported never runs as a spreadsheet formula)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from labcontract.errors import ExportError
from orchestrator.export.base import is_dir_target, register
from orchestrator.export.tables import Table, Value

FORMULA_STARTS = frozenset("=+-@\t\r")


def _field(v: Value) -> str | int | float:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str) and v[:1] in FORMULA_STARTS:
        return "'" + v          # text an agent reported (a model, a firmware) never runs as a spreadsheet formula
    return v


def write_table(table: Table, f: TextIO) -> None:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(table.columns)
    for row in table.rows:
        w.writerow([_field(row[c]) for c in table.columns])


class CsvFormat:
    name = "csv"

    def write(self, tables: Sequence[Table], output: Path | None, stdout: TextIO) -> list[Path]:
        if output is None or str(output) == "-":
            if len(tables) != 1:
                raise ExportError(f"--format csv with {len(tables)} tables writes one file per table: "
                                  "give --output DIR (or --table NAME for standard output)")
            write_table(tables[0], stdout)
            return []
        if not is_dir_target(output, ".csv"):
            if len(tables) != 1:
                raise ExportError(f"--output {output}: a .csv file holds one table; give a directory for "
                                  f"{len(tables)} tables")
            files = [(tables[0], output)]
        else:
            files = [(t, output / f"{t.name}.csv") for t in tables]
        for table, path in files:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("w", newline="", encoding="utf-8") as f:
                    write_table(table, f)
            except OSError as e:
                raise ExportError(f"{path}: cannot write: {e.strerror or e}") from e
        return [p for _t, p in files]


register(CsvFormat())
