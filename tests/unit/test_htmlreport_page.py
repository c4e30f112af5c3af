"""The report page frame: cell matching, SVG ids that never collide, untrusted text escaped, partial runs."""

from __future__ import annotations

import re

from orchestrator.cells import cell_key, key_label, needs_op_mode, op_modes
from orchestrator.htmlreport import build_html, plot
from orchestrator.htmlreport.model import Figure, Table
from orchestrator.htmlreport.page import figure_html
from orchestrator.queries import RunDetail
from orchestrator.store.models import Run, Step


def test_cells_match_across_modes_only_when_a_run_holds_several() -> None:
    stock = {"op_mode": "stock", "profile": "4k", "rwmixread": 100, "round": 3}
    hp = {"op_mode": "hp:20", "profile": "4k", "rwmixread": 100}
    assert cell_key(stock) == cell_key(hp)
    assert cell_key(stock, with_op_mode=True) != cell_key(hp, with_op_mode=True)
    assert not needs_op_mode([[stock], [hp]])
    assert needs_op_mode([[stock, hp], [stock]])
    assert op_modes([stock, hp, {"profile": "x"}]) == ["stock", "hp:20"]
    assert key_label(cell_key(stock, with_op_mode=True)) == "read 100% (4k stock)"
    net = {"profile": "128k-read", "mtu": 9000, "paths": "multi", "role": "target", "tool": "fio"}
    assert key_label(cell_key(net)) == "MTU 9000 multipath (128k-read)"


def _svg(prefix: str, label: str) -> str:
    with plot.figure() as (fig, ax):
        ax.plot([1, 2, 3], [3, 1, 2], label=label)
        ax.set_xlabel("time (min)")
        ax.legend()
        return plot.to_svg(fig, prefix)


def test_two_figures_on_one_page_share_no_id_and_text_stays_text() -> None:
    a, b = _svg("fig-a", "stock"), _svg("fig-b", "hp:20")
    ids_a = set(re.findall(r'\bid="([^"]+)"', a))
    ids_b = set(re.findall(r'\bid="([^"]+)"', b))
    assert ids_a and ids_b and not ids_a & ids_b
    for ref in re.findall(r"url\(#([^)]+)\)", a):
        assert ref in ids_a, ref                          # clip paths point inside their own figure
    assert ">time (min)<" in a and ">hp:20<" in b       # svg.fonttype none: searchable text
    assert a.startswith("<svg ") and "<?xml" not in a


def test_untrusted_names_are_escaped_in_svg_and_html() -> None:
    evil = '<script>alert("x")</script>'
    svg = _svg("fig-e", evil)
    assert "<script" not in svg
    page = figure_html(Figure("bars", "bars-1", evil, svg, Table([evil], [[evil]]), f"n = 1 {evil}", 3, evil))
    assert "<script" not in page and "&lt;script&gt;" in page


def test_a_run_with_no_result_yet_is_a_partial_report_without_charts() -> None:
    run = Run(id="r-partial", suite_name="demo <b>", suite_source="demo", suite_text="", suite_sha256="0" * 64,
              host="h", device="/dev/x", devices=["/dev/x"], state="RUNNING", submitted_at=0.0, reason="")
    step = Step(id="r-partial-s000", run_id=run.id, seq=0, round=0, kind="measure", name="4k",
                cell={"op_mode": "stock", "profile": "4k"}, job_text="", state="RUNNING")
    out = build_html([RunDetail(run=run, steps=[step], results={}, preconditions=[])])
    assert "Partial report" in out.html and "r-partial" in out.html
    assert out.figures == []
    assert "None" not in out.html and "<b>" not in out.html
