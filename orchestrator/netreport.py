"""Network runs in the terminal: per-path Gbps per cell, single path vs multipath, MTU 1500 vs 9000,
the start skew, path failures, and the cells and figures :mod:`orchestrator.compare` puts network runs
side by side with."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from orchestrator.cellbase import Entry, Metric
from orchestrator.cells import CellKey, cell_label
from orchestrator.cells import cell_key as identity
from orchestrator.queries import RunDetail
from orchestrator.store.models import NetGroup


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _initiator_paths(groups: Sequence[NetGroup]) -> list[str]:
    keys: dict[str, None] = {}
    for g in groups:
        for k, v in sorted(g.per_path.items()):
            if v.get("role") == "initiator":
                keys[k] = None
    return list(keys)


def cell_key(g: NetGroup) -> tuple[str, int, str]:
    """What makes two network cells comparable: profile, MTU, path mode (not the tool)."""
    return (str(g.cell.get("profile")), int(g.cell.get("mtu", 0)), str(g.cell.get("paths")))


def net_table(detail: RunDetail) -> Table:
    run, groups = detail.run, detail.net_groups
    topo = run.topology or {}
    table = Table(title=f"run {run.id}  suite {run.suite_name}  target {topo.get('target')}  initiator(s) "
                        f"{', '.join(topo.get('initiators', []))}  {topo.get('tool')}  {run.state}",
                  title_justify="left")
    paths = _initiator_paths(groups)
    for col in ("cell", "MTU", "paths", *[f"{p} Gbps" for p in paths], "total Gbps", "target Gbps", "IOPS",
                "avg lat us", "skew ms", "window s", "state"):
        table.add_column(col, justify="left" if col in ("cell", "paths", "state") else "right")
    done = {g.seq for g in groups}
    for g in groups:
        t = g.total
        lat = t.get("lat_mean_ns")
        table.add_row(g.name, str(g.cell.get("mtu")), str(g.cell.get("paths")),
                      *[_g(g.per_path[p]["gbps"]) if p in g.per_path else "-" for p in paths],
                      _g(t.get("initiator_gbps")), _g(t.get("target_gbps")),
                      f"{t['initiator_iops']:,.0f}" if t.get("initiator_iops") is not None else "-",
                      "-" if lat is None else f"{lat / 1000:,.1f}",
                      "-" if g.skew_ms is None else f"{g.skew_ms:.1f}",
                      "-" if g.window_start is None or g.window_end is None else f"{g.window_end - g.window_start:.1f}",
                      "ok" if g.complete else f"incomplete: {g.reason}")
    for st in detail.steps:                  # cells not measured (yet): their steps' states
        if st.seq not in done and st.kind == "net" and st.cell.get("role") == "initiator":
            table.add_row(st.name.rsplit("@", 1)[0], str(st.cell.get("mtu")), str(st.cell.get("paths")),
                          *["-"] * (len(paths) + 7), st.state)
    return table


def comparisons(groups: Sequence[NetGroup]) -> list[str]:
    """Multipath against single path at each MTU, and MTU 9000 against 1500 in each path mode."""
    by = {cell_key(g): g.total.get("initiator_gbps") for g in groups if g.complete}
    lines = []
    for (profile, mtu, mode), gbps in sorted(by.items()):
        if mode == "multi" and (single := by.get((profile, mtu, "single"))) and gbps is not None:
            lines.append(f"multipath vs single path: {profile} at MTU {mtu}: {gbps:.3f} vs {single:.3f} Gbps "
                         f"(x{gbps / single:.2f})")
    for (profile, mtu, mode), gbps in sorted(by.items()):
        if mtu == 9000 and (small := by.get((profile, 1500, mode))) and gbps is not None:
            lines.append(f"MTU 9000 vs 1500: {profile} {mode} path: {gbps:.3f} vs {small:.3f} Gbps "
                         f"({(gbps / small - 1) * 100:+.1f}%)")
    return lines


def failure_lines(groups: Sequence[NetGroup]) -> list[str]:
    lines = []
    for g in groups:
        for f in g.failures:
            began = g.starts.get(f.get("host", ""), g.window_start or 0.0)
            others = ", ".join(f.get("survivors", [])) or "no path"
            back = (f", back {f['resumed_at'] - f['stopped_at']:.1f}s later" if f.get("resumed_at") is not None
                    else "")
            stall = (f"; no I/O completed for {f['io_stalled_s']:.1f}s (the failover window)"
                     if f.get("io_stalled_s") is not None else "")
            lines.append(f"path failure: {g.name}: {f.get('host')} path {f['path']} stopped "
                         f"{f['stopped_at'] - began:+.1f}s after the start{back}; {others} carried on "
                         f"{f['carried_on_s']:.1f}s at {f['survivor_gbps']:.3f} Gbps{stall}")
    return lines


def print_net_run(console: Console, detail: RunDetail) -> None:
    console.print(net_table(detail))
    groups = detail.net_groups
    for line in comparisons(groups) + failure_lines(groups):
        console.print(line, highlight=False)
    skews = [g.skew_ms for g in groups if g.skew_ms is not None]
    if skews:
        console.print(f"start skew across hosts: max {max(skews):.1f} ms over {len(skews)} cell(s) (limit 100 ms)",
                      highlight=False)
    run = detail.run
    if run.reason:
        console.print(f"reason: {run.reason}")
    for step in detail.steps:
        if step.state != "SUCCEEDED" and step.reason:
            console.print(f"  {step.name}: {step.reason}")
    hosts: dict[str, Any] = {}
    for res in detail.results.values():
        h = res.provenance.get("host", {})
        hosts.setdefault(h.get("hostname", "?"), h)
    for name, h in sorted(hosts.items()):
        decl = ", ".join(f"{p['name']}={p['iface']}" + (f"@{p['peer']}" if p.get("peer") else "")
                         for p in h.get("net_paths", []))
        console.print(f"host {name}: kernel {h.get('kernel')} | {h.get('fio_version')} | paths {decl}", highlight=False)


def net_metrics(details: Sequence[RunDetail]) -> list[Metric]:
    """What a network comparison shows: total Gbps at the initiators (compared to the first run), at the
    target, IOPS, then each initiator path's Gbps (``host.path``, as the groups name them)."""
    paths = _initiator_paths([g for d in details for g in d.net_groups])
    return [Metric("gbps", "Gbps", "{:.3f}"), Metric("target_gbps", "target Gbps", "{:.3f}"),
            Metric("iops", "IOPS", "{:,.0f}"),
            *(Metric(f"gbps.{p}", f"{p} Gbps", "{:.3f}", diff=False) for p in paths)]


def _identity(cell: dict[str, Any], with_op_mode: bool) -> CellKey:
    """orchestrator.cells' key without ``net_paths`` (the path names a path mode resolves to on one lab):
    multipath on paths a+b meets multipath on p1+p2."""
    return identity({k: v for k, v in cell.items() if k != "net_paths"}, with_op_mode=with_op_mode)


def net_entries(detail: RunDetail, with_op_mode: bool = False) -> Iterator[tuple[CellKey, Entry]]:
    """A network run's measured groups (each repeat) as (cell key, entry) with their window figures, then a
    cell planned but not measured yet with no figures, so a partial run shows what it lacks."""
    seen: set[CellKey] = set()
    workloads = {st.seq: st.workload for st in detail.steps if st.kind == "net" and st.cell.get("role") == "initiator"}
    for g in detail.net_groups:
        t = g.total
        values: dict[str, float | None] = {"gbps": t.get("initiator_gbps"), "target_gbps": t.get("target_gbps"),
                                           "iops": t.get("initiator_iops")}
        values.update({f"gbps.{p}": v.get("gbps") for p, v in g.per_path.items() if v.get("role") == "initiator"})
        key = _identity(g.cell, with_op_mode)
        seen.add(key)
        yield key, Entry(g.name, str(g.cell.get("op_mode", "stock")), values, cell_label(
            g.cell, workloads.get(g.seq), with_op_mode=with_op_mode))
    for st in detail.steps:
        key = _identity(st.cell, with_op_mode)
        if st.kind == "net" and st.cell.get("role") == "initiator" and key not in seen:
            seen.add(key)
            yield key, Entry(st.name.rsplit("@", 1)[0], str(st.cell.get("op_mode", "stock")), {},
                             cell_label(st.cell, st.workload, with_op_mode=with_op_mode))
