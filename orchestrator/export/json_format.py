"""JSON: one document ``{"format_version": 1, "<table>": [row objects, keys in column order], ...}`` with
the chosen tables; a missing value is ``null``. Written to a ``.json`` file, into a directory as
``export.json``, or to standard output."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from labcontract.errors import ExportError
from orchestrator.export.base import FORMAT_VERSION, is_dir_target, register
from orchestrator.export.tables import Table


class JsonFormat:
    name = "json"

    def write(self, tables: Sequence[Table], output: Path | None, stdout: TextIO) -> list[Path]:
        doc = {"format_version": FORMAT_VERSION, **{t.name: t.rows for t in tables}}
        try:
            text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        except ValueError as e:          # NaN / infinity: not JSON, and not a figure a script can use
            raise ExportError(f"--format json: a value is not a finite number: {e}") from e
        if output is None or str(output) == "-":
            stdout.write(text)
            return []
        path = output / "export.json" if is_dir_target(output, ".json") else output
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            raise ExportError(f"{path}: cannot write: {e.strerror or e}") from e
        return [path]


register(JsonFormat())
