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

# keys of Step.cell that never identify a cell: the precondition round, a network step's host role, tool and
# the lab's own path names (two labs with differently named paths still compare)
_NOT_IDENTITY = frozenset({"round", "role", "tool", "phase", "net_paths", "repeat"})

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


def key_label(key: CellKey) -> str:
    """A full, human name for a cell key: ``4k-random rwmixread=100`` / ``128k-read mtu=9000 paths=multi``."""
    d = dict(key)
    head = [d.pop("profile", "")] if "profile" in d else []
    if "op_mode" in d:
        head.append(d.pop("op_mode"))
    return " ".join([*head, *(f"{k}={v}" for k, v in d.items())]).strip() or "(cell)"
