"""What an export format is and where it registers (the formats import this module, never the package that loads
them: :mod:`orchestrator.export`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TextIO

from labcontract.registry import Registry
from orchestrator.export.tables import Table

FORMAT_VERSION = 1


class ExportFormat(Protocol):
    name: str        # --format value

    def write(self, tables: Sequence[Table], output: Path | None, stdout: TextIO) -> list[Path]:
        """Write the tables to ``output`` (a file or a directory) or, when None, to ``stdout``; return the
        files written."""
        ...


FORMATS: Registry[ExportFormat] = Registry("export format")


def register(fmt: ExportFormat) -> ExportFormat:
    return FORMATS.add(fmt.name, fmt)


def is_dir_target(output: Path, suffix: str) -> bool:
    """An existing directory, or a path without the format's suffix, is a directory to write into."""
    return output.is_dir() or output.suffix.lower() != suffix
