"""One name per workload everywhere (issue 27): the HTML report's every section, the terminal and Markdown reports,
compare (table, JSON, CSV), the export and the web's verdicts name a cell by :func:`orchestrator.cells.cell_label`,
the way reviews label it (``4K random read 100% 16T16Q``) followed by the suite's profile. Before, one cell was
``4K random read 100% 16T16Q`` in the bars, ``4k-random rwmixread=100`` in compare and the latency tables and
``4k-random.r100`` in the preconditioning charts."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cells import cell_label, describe_workload, size_label
from orchestrator.compare import as_csv, as_json, compare_details
from orchestrator.comparetable import print_table
from orchestrator.export import export
from orchestrator.htmlreport import build_html
from orchestrator.queries import RunDetail
from orchestrator.report import print_run, write_markdown
from tests.unit.chartdata_a import enterprise_run

# the column of each chart kind's table that names a cell (the others name runs, rounds or TxQ points)
NAME_COLUMN = {"bars": 0, "compare": 0, "latency": 1}


@pytest.fixture(scope="module")
def runs() -> list[RunDetail]:
    return [enterprise_run("r-names-000001", rounds=3, seconds=20),
            enterprise_run("r-names-000002", "hp:20", speed=1.3, seed=2, rounds=3, seconds=20)]


def names_of(d: RunDetail) -> dict[str, str]:
    """step name -> its cell's name, for the measured and precondition steps."""
    return {st.name: cell_label(st.cell, st.workload) for st in d.steps if st.kind in ("measure", "precondition")}


def test_the_name_is_the_reviews_words_then_the_profile() -> None:
    d = enterprise_run("r-words-000001", rounds=1, seconds=5)
    names = names_of(d)
    assert names["4k-random.r100"] == "4K random read 100% 16T16Q (4k-random)"
    assert names["4k-random.r0"] == "4K random write 100% 16T16Q (4k-random)"
    assert names["precondition.4k-random.r100.round1"] == names["4k-random.r100"]
    assert names["8k-7030.t2.q4"] == "8K random 70/30 2T4Q (8k-7030)"
    assert names["4k-random-1t1q.r0"] == "4K random write 100% 1T1Q (4k-random-1t1q)"
    assert names["128k-seq.read"] == "128K sequential read 16T16Q (128k-seq)"
    measured = [st for st in d.steps if st.kind == "measure"]
    assert len({names[st.name] for st in measured}) == len(measured)      # one name per cell, never shared
    # the OP mode when cells are matched with it; a ladder's name without its TxQ; network and application cells
    st = next(st for st in d.steps if st.name == "4k-random.r100")
    assert cell_label(st.cell, st.workload, with_op_mode=True) == "4K random read 100% 16T16Q (4k-random stock)"
    st = next(st for st in d.steps if st.name == "8k-7030.t2.q4")
    assert cell_label(st.cell, st.workload, tq=False) == "8K random 70/30 (8k-7030)"
    net = {"profile": "pattern", "mtu": 9000, "paths": "multi", "net_paths": "a+b", "role": "initiator"}
    assert cell_label(net, {"rw": "randrw", "bs": 65536, "rwmixread": 75, "percentage_random": 25, "numjobs": 4,
                            "iodepth": 16}) == "64K random 25% 75/25 4T16Q MTU 9000 multipath (pattern)"
    app = {"profile": "oltp_read_write", "app": "sysbench", "threads": 16, "op_mode": "stock"}
    assert cell_label(app) == "oltp_read_write (sysbench) 16 threads"
    assert size_label(1 << 20) == "1M" and size_label(512) == "512B" and size_label("4096") == "4K"
    assert describe_workload({"rw": "randread", "bs": 4096}) == ["4K", "random", "read 100%"]


def test_every_section_of_the_html_report_names_a_cell_as_compare_does(runs: list[RunDetail]) -> None:
    names = set(names_of(runs[0]).values())
    report = build_html(runs, workers=1)
    kinds = {f.chart for f in report.figures}
    assert {"precondition", "scaling", "bars", "latency", "compare"} <= kinds, kinds
    seen: set[str] = set()
    for f in report.figures:
        if f.chart in NAME_COLUMN:
            shown = {row[NAME_COLUMN[f.chart]] for row in f.table.rows}
            assert shown <= names, (f.id, shown - names)
            seen |= shown
        elif f.chart == "precondition":
            assert f.title.removeprefix("Preconditioning ") in names, f.title
            seen.add(f.title.removeprefix("Preconditioning "))
        elif f.chart == "scaling":       # a ladder: its cells' name without the TxQ, each point a TxQ row
            ladder = f.title.split(" TxQ scaling")[0]
            assert ladder == "8K random 70/30 (8k-7030)", f.title
            for row in f.table.rows:
                t, q = row[0].removesuffix("Q").split("T")
                full = f"8K random 70/30 {t}T{q}Q (8k-7030)"
                assert full in names, row[0]
                seen.add(full)
    assert seen == names                  # every cell is named, and by its one name
    compared = compare_details(runs)
    assert [r.label for r in compared.rows] == list(dict.fromkeys(
        cell_label(st.cell, st.workload) for st in runs[0].steps if st.kind == "measure"))


def test_the_text_report_compare_and_export_use_the_same_names(runs: list[RunDetail], tmp_path: Path) -> None:
    names = names_of(runs[0])
    console = Console(width=250, record=True)
    print_run(console, runs[0])
    text = console.export_text()
    for step, name in names.items():
        if not step.startswith("precondition.") or step.endswith("round3"):
            line = next(line for line in text.splitlines() if f" {step} " in line)
            assert name in line, (step, line)            # the step's row names its cell
    assert "precondition 4K random read 100% 16T16Q (4k-random): " in text
    md = write_markdown(runs[0], tmp_path, tmp_path).read_text()
    assert all(f"| {name} |" in md for name in names.values())
    c = compare_details(runs)
    console = Console(width=250, record=True)
    print_table(console, c)
    table = console.export_text()
    labels = [r.label for r in c.rows]
    assert set(labels) == {n for s, n in names.items() if not s.startswith("precondition.")}
    assert all(f"│ {label}" in table for label in labels)
    assert [cell["cell"] for cell in json.loads(as_json(c))["cells"]] == labels
    assert list(dict.fromkeys(r["cell"] for r in csv.DictReader(io.StringIO(as_csv(c))))) == labels
    buf = io.StringIO()
    export(runs[:1], "json", "all", None, buf)
    doc = json.loads(buf.getvalue())
    assert {r["cell"] for r in doc["results"]} == set(names.values())
    assert {r["cell"] for r in doc["cells"]} == set(labels)
