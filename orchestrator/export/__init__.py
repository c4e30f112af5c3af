"""``labctl export``: a run's results, per-device and per-path figures and per-second series as files for
scripts and spreadsheets (columns: docs/metrics.md, "Export columns").

A format is one module of this package that calls :func:`orchestrator.export.base.register` with an
:class:`~orchestrator.export.base.ExportFormat`, plus its import below; the tables
(:mod:`orchestrator.export.tables`) are the same for every format, so a new format decides only how they are
written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from labcontract.errors import ExportError
from orchestrator.export import csv_format, json_format  # noqa: F401  (registers the built-in formats)
from orchestrator.export.base import FORMAT_VERSION, FORMATS, ExportFormat, is_dir_target, register
from orchestrator.export.tables import TABLES, build
from orchestrator.queries import RunDetail

TABLE_NAMES = tuple(TABLES)
__all__ = ["FORMATS", "FORMAT_VERSION", "TABLE_NAMES", "ExportFormat", "export", "format_of", "is_dir_target",
           "register", "table_names"]


def table_names(choice: str) -> list[str]:
    """``all`` or one table name -> the tables to export; ExportError naming the choices otherwise."""
    if choice == "all":
        return list(TABLE_NAMES)
    if choice not in TABLES:
        raise ExportError(f"--table: unknown table {choice!r} (choose from {', '.join(TABLE_NAMES)}, all)")
    return [choice]


def format_of(fmt: str) -> ExportFormat:
    """The registered format named ``fmt``; ExportError naming the choices otherwise."""
    if fmt not in FORMATS:
        raise ExportError(f"--format: unknown export format {fmt!r} (choose from {', '.join(sorted(FORMATS))})")
    return FORMATS[fmt]


def export(details: Sequence[RunDetail], fmt: str, table: str, output: Path | None, stdout: TextIO,
           units: str = "decimal") -> list[Path]:
    """Build the chosen tables of ``details`` and write them in format ``fmt``, bandwidth in ``units``
    (:mod:`orchestrator.units`); the files written."""
    return format_of(fmt).write(build(details, table_names(table), units), output, stdout)
