"""The report page: one self-contained HTML file (inline SVG and CSS, no script, no font, no request).

Layout, as a review reads: title and the runs it holds (partial runs marked), a contents list, the test
platform and devices of every run, then one section per chart kind, each figure followed by its data
table and its n. Print CSS keeps a figure and its table together and drops the contents list.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

from orchestrator.htmlreport.model import ChartKind, Figure, ReportContext, Table

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 0;
       padding: 1.5rem; color: #1b1b1b; background: #fff; }
/* the text reads in a 1,100 px column; a table is as wide as it needs, up to the window, and scrolls in its box
   beyond that (never the page) */
body > header > :not(.tablewrap), nav.toc, main > section > :not(figure):not(.tablewrap),
figure.chart > :not(.tablewrap) { max-width: min(100%, 1100px); margin-left: auto; margin-right: auto; }
h1 { font-size: 1.6rem; margin: 0 0 .3rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem;
  border-bottom: 1px solid #ccc; padding-bottom: .2rem; } h3 { font-size: 1.02rem; margin: 1.4rem 0 .3rem; }
.meta, .n, .caption { color: #555; font-size: .86rem; }
.partial { background: #fff3cd; border: 1px solid #e0b84d; padding: .5rem .8rem; border-radius: 4px; }
table { border-collapse: collapse; font-size: .8rem; margin: .4rem 0 1rem; }
th, td { border: 1px solid #ddd; padding: .18rem .45rem; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
/* names wrap within their column (a heading, a cell's or run's name) before a table needs to scroll; numbers never */
th, table.data td:first-child { white-space: normal; } table.data td:first-child { min-width: 12em; }
table.kv td { text-align: left; white-space: normal; } table.kv td:first-child { color: #555; }
.tablewrap { overflow-x: auto; width: fit-content; margin-left: max(0px, (100% - 1100px) / 2);
             max-width: calc(100% - max(0px, (100% - 1100px) / 2)); }
.tablewrap > table { margin: .4rem 0 1rem; }
figure.chart { margin: 0 0 1.6rem; break-inside: avoid; page-break-inside: avoid; }
figure.chart svg { max-width: 100%; height: auto; display: block; }
nav.toc ul { columns: 2; font-size: .9rem; }
table.runs th, table.runs td { text-align: left; }
@media print { nav.toc { display: none; } body { padding: 0; font-size: 11px; }
  h2 { break-before: auto; } a { color: inherit; text-decoration: none; } }
"""


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def table_html(t: Table, cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    c = f' class="{cls}"' if cls else ""
    return f'<div class="tablewrap"><table{c}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def figure_html(f: Figure) -> str:
    cap = f'<p class="caption">{esc(f.caption)}</p>' if f.caption else ""
    return (f'<figure class="chart" id="{esc(f.id)}" data-chart="{esc(f.chart)}" data-points="{f.points}">'
            f'<h3 id="{esc(f.id)}-title">{esc(f.title)}</h3>{f.svg}'
            f'<figcaption><span class="n">{esc(f.n)}</span>{cap}</figcaption>{table_html(f.table, "data")}</figure>')


def _runs_table(ctx: ReportContext) -> str:
    rows = []
    for v in ctx.runs:
        r = v.detail.run
        state = r.state + (" (partial: figures so far)" if v.provenance.partial else "")
        rows.append([f"run {v.index + 1}", r.id, r.suite_name, v.label(), state,
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(r.submitted_at))])
        if ctx.history:                        # given by a caller with a store session (orchestrator.runhistory)
            hist = ctx.history.get(r.id)
            rows[-1].append(hist.summary() if hist is not None else "-")
    heads = ["", "run", "suite", "legend", "state", "submitted"] + (["against history"] if ctx.history else [])
    return table_html(Table(heads, rows), "runs")


def _provenance_html(ctx: ReportContext) -> str:
    out = []
    for v in ctx.runs:
        out.append(f'<h3 id="platform-{esc(v.id)}">Run {v.index + 1}: {esc(v.id)}</h3>')
        for title, kv in v.provenance.sections:
            out.append(f"<h4>{esc(title)}</h4>" + table_html(Table(["", ""], [[k, val] for k, val in kv]), "kv"))
        if v.provenance.devices:
            cols = list(v.provenance.devices[0])
            out.append("<h4>Devices under test</h4>" + table_html(
                Table(cols, [[d[c] for c in cols] for d in v.provenance.devices]), "devices"))
    return "\n".join(out)


def render(ctx: ReportContext, sections: Sequence[tuple[ChartKind, list[Figure]]], title: str) -> str:
    partial = [v.id for v in ctx.runs if v.provenance.partial]
    banner = (f'<p class="partial">Partial report: run(s) {esc(", ".join(partial))} had not ended when this '
              f"report was built; only what was measured so far is shown, nothing is extrapolated.</p>"
              if partial else "")
    toc = ["<li><a href=\"#platform\">Test platform and devices</a></li>"]
    body = []
    for kind, figs in sections:
        toc.append(f'<li><a href="#section-{esc(kind.name)}">{esc(kind.title)}</a> ({len(figs)})</li>')
        body.append(f'<section class="kind" id="section-{esc(kind.name)}" data-kind="{esc(kind.name)}">'
                    f"<h2>{esc(kind.title)}</h2>" + "\n".join(figure_html(f) for f in figs) + "</section>")
    if not sections:
        body.append('<p class="meta">No chart: the run(s) hold no stored result yet.</p>')
    built = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="storagelab labctl report">
<title>{esc(title)}</title><style>{CSS}</style></head>
<body><header><h1>{esc(title)}</h1><p class="meta">Built {esc(built)} from the store by <code>labctl report</code>;
{esc(ctx.n_runs())}.</p>{banner}{_runs_table(ctx)}</header>
<nav class="toc"><h2>Contents</h2><ul>{"".join(toc)}</ul></nav>
<main><section id="platform"><h2>Test platform and devices</h2>{_provenance_html(ctx)}</section>
{"".join(body)}</main>
</body></html>
"""
