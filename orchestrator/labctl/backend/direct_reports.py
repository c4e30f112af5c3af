"""The direct backend's reports: compare, the reference set, the HTML and Markdown reports, export and the raw
artifacts, read from the store and the lab's artifact directory."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from labcontract.errors import LabError
from orchestrator.labctl.backend.directbase import DirectBase
from orchestrator.states import TERMINAL_RUN


class DirectReports(DirectBase):

    def _write_html(self, details: Any, path: Path, options: dict[str, str] | None, history: Any = None) -> None:
        from orchestrator import htmlreport
        from orchestrator.report import artifact_reader

        try:
            htmlreport.write_html(details, path, options=options,
                                  read_artifact=artifact_reader(self.config.artifact_dir), history=history)
        except OSError as e:
            raise LabError(f"{path}: cannot write the HTML report: {e.strerror or e}") from e

    def compare(self, runs: list[str], fmt: str, units: str, html: Path | None, baseline: str | None,
                console: Any) -> None:
        from orchestrator.compare import FORMATS, compare_runs
        from orchestrator.comparetable import print_table as print_comparison

        with self.sessions()() as s:
            c = compare_runs(s, runs, units, baseline)
            if fmt == "table":
                print_comparison(console, c)
            else:
                sys.stdout.write(FORMATS[fmt](c))
            for i in range(len(c.details)):
                if c.partial(i):
                    print(f"warning: run {c.details[i].run.id} is {c.details[i].run.state}: partial",
                          file=sys.stderr)
            if html is not None:
                self._write_html(c.details, html, None)

    def reference(self, run: str, suite: str, fmt: str, units: str) -> str:
        from orchestrator.reference import as_json, reference_set, table_lines

        with self.sessions()() as s:
            ref = reference_set(s, run, suite, units)
        return as_json(ref) if fmt == "json" else "\n".join(table_lines(ref))

    def report(self, runs: list[str], html: Path | None, markdown: bool, latency_cells: list[str] | None
               ) -> Iterator[Path]:
        from orchestrator.queries import run_detail
        from orchestrator.report import write_markdown

        with self.sessions()() as s:
            details = [run_detail(s, ref) for ref in runs]
            for d in details:
                if d.run.state not in TERMINAL_RUN:
                    print(f"warning: run {d.run.id} is {d.run.state}: partial report (what was measured so far)",
                          file=sys.stderr)
            if html is not None:
                from orchestrator.runhistory import histories

                self._write_html(details, html, {"latency_cells": ",".join(latency_cells)} if latency_cells else None,
                                 histories(s, [d.run.id for d in details]))
                yield html
            if html is None or markdown:
                for d in details:
                    yield write_markdown(d, self.config.report_dir, self.config.artifact_dir)

    def export(self, runs: list[str], fmt: str, table: str, output: Path | None, units: str) -> list[Path]:
        from orchestrator.export import export as write_export
        from orchestrator.queries import run_detail

        with self.sessions()() as s:
            details = [run_detail(s, ref) for ref in runs]
            return list(write_export(details, fmt, table, output, sys.stdout, units))

    def export_lab(self, runs: list[str], output: Path | None, lab: str | None) -> Path:
        import re

        from labcontract.errors import ExportError
        from labcontract.rundoc import LAB_RE
        from orchestrator.export.bundle import documents, load_runs, write_bundle
        from orchestrator.queries import resolve_run_id

        if output is None:
            raise ExportError("--format lab: give --output DIR (or FILE.tar.gz)")
        if lab is not None and not re.match(LAB_RE, lab):
            raise ExportError(f"--lab {lab[:80]!r}: a lab name is 1-64 letters, digits, '_', '.', '-'")
        with self.sessions()() as s:
            docs, files = documents(s, load_runs(s, [resolve_run_id(s, r) for r in runs]), self.config.artifact_dir)
        return write_bundle(docs, files, output, lab)

    def artifacts(self, ref: str) -> tuple[str, list[dict[str, Any]]]:
        from orchestrator.queries import artifact_rows, resolve_run_id

        with self.sessions()() as s:
            run_id = resolve_run_id(s, ref)
            return run_id, artifact_rows(s, run_id)

    def fetch_artifact(self, row: dict[str, Any], dest: Path) -> None:
        from orchestrator.artifacts import contained

        src = contained(self.config.artifact_dir, str(row["path"]))
        if src is None:
            raise LabError(f"artifact {row['name']} of attempt {row['attempt_id']}: its file is not in the artifact "
                           f"directory {self.config.artifact_dir}")
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
        digest = hashlib.sha256()
        try:
            with src.open("rb") as f, tmp.open("wb") as g:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
                    g.write(chunk)
            if digest.hexdigest() != row["sha256"]:
                raise LabError(f"{src}: sha256 {digest.hexdigest()} differs from the {row['sha256']} the store "
                               "recorded")
            shutil.move(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
