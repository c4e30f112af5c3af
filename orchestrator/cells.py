"""What makes cells of different runs the same cell: one definition for compare, reports and export.

A measured cell is a profile and its swept values (``rwmixread``, ``numjobs`` x ``iodepth``, ``bs``, ...)
under an OP mode; a network cell adds the MTU and the path mode (single / multi); an application cell is a
test (``profile``), its ``app`` kind and its point (``threads`` / ``clients``), an external workload's
parameters too; its ``phase`` (a prepare step) never identifies it. Two runs are compared
cell by cell on :func:`cell_key`. The OP mode is part of the key only when a run itself holds several
modes (a suite with ``op_modes: [stock, "hp:20"]``): then stock meets stock and HP meets HP. Across a
stock run and an HP run of the same suite the mode is what differs, so it is left out and stock meets HP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from labcontract.loadcurve import CURVE, POINT

# keys of Step.cell that never identify a cell: the precondition round, a network step's host role, tool and
# the lab's own path names (two labs with differently named paths still compare), a load curve's percentages
# (its maximum is the cell's own measurement; each point is identified by its ``load_pct``)
_NOT_IDENTITY = frozenset({"round", "role", "tool", "phase", "net_paths", "repeat", CURVE})

CellKey = tuple[tuple[str, str], ...]


def cell_key(cell: Mapping[str, Any], *, with_op_mode: bool = False) -> CellKey:
    """The sorted (key, value) pairs that identify a cell; ``op_mode`` only ``with_op_mode``."""
    return tuple(sorted((k, str(v)) for k, v in cell.items()
                        if k not in _NOT_IDENTITY and (with_op_mode or k != "op_mode")))


def op_modes(cells: Iterable[Mapping[str, Any]]) -> list[str]:
    """The OP modes of a run's cells, in first-seen order (``stock`` when a cell names none)."""
    seen: dict[str, None] = {}
    for c in cells:
        seen.setdefault(str(c.get("op_mode", "stock")), None)
    return list(seen)


def needs_op_mode(runs_cells: Iterable[Iterable[Mapping[str, Any]]]) -> bool:
    """Whether cells must be matched with their OP mode: some run holds more than one mode."""
    return any(len(op_modes(cells)) > 1 for cells in runs_cells)


# what a workload's description says (bs, pattern, read share, T x Q): a cell's dims of these are not repeated
WORKLOAD_DIMS = ("rw", "bs", "rwmixread", "percentage_random", "numjobs", "iodepth")
POINT_NAMES = {"threads": "threads", "clients": "clients"}
_READS, _WRITES, _SEQUENTIAL = ("read", "randread"), ("write", "randwrite"), ("read", "write", "rw", "readwrite")


def size_label(bs: object) -> str:
    """``4K``, ``128K``, ``1M``, ``512B``: a block size as reviews print it (binary units)."""
    try:
        b = int(str(bs))
    except ValueError:
        return str(bs)
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= size and b % size == 0:
            return f"{b // size}{unit}"
    return f"{b}B"


def _int(v: object) -> int | None:
    try:
        return None if v is None or isinstance(v, bool) else int(str(v))
    except ValueError:
        return None


def describe_workload(w: Mapping[str, Any], *, tq: bool = True) -> list[str]:
    """The review's words for a fio workload: ``4K random read 100% 16T16Q``, ``8K random 70/30 8T16Q``,
    ``128K sequential write 1T8Q``, ``64K random 25% read 100% 4T16Q``; ``tq=False`` leaves T x Q out (a ladder)."""
    rw = str(w.get("rw") or "")
    parts = [size_label(w["bs"])] if w.get("bs") is not None else []
    rand = _int(w.get("percentage_random"))
    if rand == 100 or (rand is None and rw.startswith("rand")):
        parts.append("random")
    elif rand == 0 or (rand is None and rw in _SEQUENTIAL):
        parts.append("sequential")
    elif rand is not None:
        parts.append(f"random {rand}%")
    mix = _int(w.get("rwmixread"))
    share = "" if parts and parts[-1] == "sequential" else " 100%"
    if rw in _READS or (rw not in _WRITES and mix == 100):
        parts.append("read" + share)
    elif rw in _WRITES or mix == 0:
        parts.append("write" + share)
    elif rw in ("randrw", "rw", "readwrite") or mix is not None:
        parts.append(f"{50 if mix is None else mix}/{50 if mix is None else 100 - mix}")
    elif rw:
        parts.append(rw)
    t, q = _int(w.get("numjobs")), _int(w.get("iodepth"))
    if tq and (t is not None or q is not None):
        parts.append(f"{t or 1}T{q or 1}Q")
    return parts


def cell_label(cell: Mapping[str, Any], workload: Mapping[str, Any] | None = None, *, with_op_mode: bool = False,
               tq: bool = True) -> str:
    """The one name of a workload / cell, everywhere it is shown (the HTML report's sections, the text and
    Markdown reports, compare, export, the web pages): what reviews call it, then what the suite calls it.

    ``4K random read 100% 16T16Q (4k-random)``; ``8K random 70/30 16T16Q (8k-7030)``; a network cell ``128K
    sequential read 100% 4T16Q MTU 9000 multipath (128k-read)``; an application point ``oltp_read_write
    (sysbench) 16 threads``. The workload's words come from ``workload`` (the step's fio workload) with the
    cell's own values first; a cell dim they do not say (another swept option) follows as ``key=value``; the OP
    mode ``with_op_mode`` (cells matched with it: a run of several modes). ``tq=False``: without the T x Q (a
    ladder's name). With no workload (a cell key alone) the words come from the cell's dims: the name is unique
    per :func:`cell_key` either way."""
    d = dict(cell_key(cell, with_op_mode=with_op_mode))
    profile, op_mode, app = d.pop("profile", None), d.pop("op_mode", None), d.pop("app", None)
    if app is not None:
        head = [f"{profile} ({app})" if profile else str(app)]
        head += [f"{d.pop(k)} {POINT_NAMES[k]}" for k in POINT_NAMES if k in d and tq]
        for k in POINT_NAMES:
            d.pop(k, None)
        tail = f" ({op_mode})" if op_mode else ""
        return " ".join([*head, *(f"{k}={v}" for k, v in sorted(d.items()))]) + tail
    w = {**{k: v for k, v in (workload or {}).items() if k in WORKLOAD_DIMS},
         **{k: v for k, v in d.items() if k in WORKLOAD_DIMS}}
    words = describe_workload(w, tq=tq)
    for k in WORKLOAD_DIMS:
        d.pop(k, None)
    if not tq:
        d.pop("numjobs", None)
        d.pop("iodepth", None)
    if "mtu" in d:
        words.append(f"MTU {d.pop('mtu')}")
    if "paths" in d:
        paths = str(d.pop("paths"))
        words.append({"multi": "multipath", "single": "single path"}.get(paths, f"{paths} path"))
    if POINT in d:                               # a load curve's point (labcontract.loadcurve)
        words.append(f"at {d.pop(POINT)}% load")
    words += [f"{k}={v}" for k, v in sorted(d.items())]
    if not words:                # nothing but a profile (a key alone): ``4k-randread`` / ``4k-randread (hp:20)``
        return " ".join([str(profile or "(cell)"), *([f"({op_mode})"] if op_mode else [])])
    ident = " ".join(str(x) for x in (profile, op_mode) if x)
    return " ".join(words) + (f" ({ident})" if ident else "")


def key_label(key: CellKey) -> str:
    """:func:`cell_label` of a cell key alone (no workload at hand: its words from the key's dims)."""
    return cell_label(dict(key), with_op_mode=True)
