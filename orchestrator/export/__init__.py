"""``labctl export``: a run's results, per-device and per-path figures and per-second series as files for
scripts and spreadsheets (columns: docs/metrics.md, "Export columns").

A format is one module of this package that calls :func:`register` with an :class:`ExportFormat`, plus
its import at the end of this file; the tables (:mod:`orchestrator.export.tables`) are the same for every
format, so a new format decides only how they are written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TextIO

from labcontract.errors import ExportError
from orchestrator.export.tables import TABLES, Table, build
from orchestrator.queries import RunDetail

FORMAT_VERSION = 1
TABLE_NAMES = tuple(TABLES)


class ExportFormat(Protocol):
    name: str        # --format value

    def write(self, tables: Sequence[Table], output: Path | None, stdout: TextIO) -> list[Path]:
        """Write the tables to ``output`` (a file or a directory) or, when None, to ``stdout``; return the
        files written."""
        ...


FORMATS: dict[str, ExportFormat] = {}


def register(fmt: ExportFormat) -> ExportFormat:
    if fmt.name in FORMATS:
        raise ValueError(f"export format {fmt.name!r} registered twice")
    FORMATS[fmt.name] = fmt
    return fmt


def table_names(choice: str) -> list[str]:
    """``all`` or one table name -> the tables to export; ExportError naming the choices otherwise."""
    if choice == "all":
        return list(TABLE_NAMES)
    if choice not in TABLES:
        raise ExportError(f"--table: unknown table {choice!r} (choose from {', '.join(TABLE_NAMES)}, all)")
    return [choice]


def export(details: Sequence[RunDetail], fmt: str, table: str, output: Path | None, stdout: TextIO) -> list[Path]:
    """Build the chosen tables of ``details`` and write them in format ``fmt``; the files written."""
    if fmt not in FORMATS:
        raise ExportError(f"--format: unknown export format {fmt!r} (choose from {', '.join(sorted(FORMATS))})")
    return FORMATS[fmt].write(build(details, table_names(table)), output, stdout)


def is_dir_target(output: Path, suffix: str) -> bool:
    """An existing directory, or a path without the format's suffix, is a directory to write into."""
    return output.is_dir() or output.suffix.lower() != suffix


from orchestrator.export import csv_format, json_format  # noqa: E402,F401  (registers the built-in formats)
