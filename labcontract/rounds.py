"""SNIA PTS-E's steady-state form: a *round* is every measured cell of the suite in turn, and rounds repeat
until one named cell (the tracked cell) is in steady state over the last ``window`` rounds.

This is how the PTS IOPS, throughput and latency tests measure (SNIA Solid State Storage Performance Test
Specification, Enterprise): purge, workload-independent preconditioning (WIPC: the device written twice over
with 128 KiB sequential writes), then rounds of the whole test matrix (for IOPS 7 read/write mixes x 8 block
sizes, a minute each) until the tracked cell (4 KiB 100% write IOPS) is steady by the rule in
:mod:`labcontract.steady`, at most ``max_rounds`` (25). The figures reported are each cell's mean over the
steady-state window's rounds, not a measurement of its own.

A suite asks for it with ``phases.rounds`` (docs/suites.md)::

    phases:
      purge: true
      rounds: {cell: {rwmixread: 0, bs: 4k}, track: iops, window: 5, max_rounds: 25}

Exclusive with ``phases.precondition`` (the rounds are the preconditioning), with ``repeat`` (the window's
rounds are the cell's repeats), with load curves, and with network and application suites.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ROUND = "round"              # a step's cell: the round it belongs to (1, 2, ...)
WIPC = "wipc"                # a WIPC step's cell: its pass (1, 2); its profile is "wipc"
WIPC_BS = 128 << 10          # PTS-E: workload-independent preconditioning in 128 KiB sequential writes
WIPC_PASSES = 2              # ... of twice the user capacity
WIPC_IODEPTH = 32
DEFAULT_WIPC_LIMIT_S = 6 * 3600


def track_key(track: str) -> str:
    """The round record's value a ``track`` judges (``labcontract.steady`` over it)."""
    return {"iops": "iops", "lat_mean": "lat_mean_ns", "bw": "bw_bytes"}[track]


def matches(profile: str, dims: Mapping[str, Any], normalised: Mapping[str, Any]) -> bool:
    """Whether a cell (its profile and swept values) is the tracked cell; ``normalised`` is the suite's
    ``phases.rounds.cell`` with each value validated as its option (``4k`` -> 4096), profile kept as written."""
    for key, want in normalised.items():
        have = profile if key == "profile" else dims.get(key)
        if have is None or str(have) != str(want):
            return False
    return True


def tracked_problems(cells: Sequence[tuple[str, str, Mapping[str, Any]]], normalised: Mapping[str, Any],
                     op_modes: Sequence[str]) -> list[str]:
    """Why the tracked cell does not name exactly one cell per OP mode (``cells``: op_mode, profile, dims)."""
    out = []
    for mode in op_modes:
        found = [(p, d) for m, p, d in cells if m == mode and matches(p, d, normalised)]
        if len(found) != 1:
            names = ", ".join(f"{k}={v}" for k, v in normalised.items())
            out.append(f"{names} names {len(found)} cells{f' in OP mode {mode}' if len(op_modes) > 1 else ''}"
                       f" (it must name exactly one: give the swept values, and the profile when several profiles "
                       f"sweep them)")
            break
    return out


def is_wipc(cell: Mapping[str, Any] | None) -> bool:
    """A workload-independent preconditioning pass (a ``precondition`` step that is no steady-state group)."""
    return cell is not None and WIPC in cell


def round_of(cell: Mapping[str, Any]) -> int | None:
    """The round a measured step's cell belongs to, or None (not a rounds run's step)."""
    r = cell.get(ROUND)
    return r if isinstance(r, int) and not isinstance(r, bool) else None


def window_rounds(reached_round: int | None, window: int, last_round: int) -> range:
    """The rounds whose means are reported: the steady-state window ending at ``reached_round``; not steady
    (``max_rounds`` reached): the last ``window`` rounds, reported as such (PTS-E reports the last window)."""
    end = reached_round if reached_round is not None else last_round
    return range(max(1, end - window + 1), end + 1)
