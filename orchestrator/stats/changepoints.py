"""Change points in a history of runs: E-Divisive means (Matteson & James, 2014).

The method MongoDB's signal-processing-algorithms (``e_divisive``) and apache-otava (Hunter) use
to find performance regressions in nightly results. It assumes nothing about the distribution,
and a single outlier moves it far less than it moves a mean-shift test.

* For a segment Z[0:m] and each split tau, the energy statistic (alpha = 1) is

      Q(tau) = tau (m - tau) / m * ( 2/(tau (m-tau)) sum_{i<tau<=j} |Zi - Zj|
                                     - 1/C(tau, 2)   sum_{i<k<tau}   |Zi - Zk|
                                     - 1/C(m-tau, 2) sum_{tau<=j<k}  |Zj - Zk| )

  (between-distances minus within-distances, weighted by the sizes). As in MongoDB's and otava's
  implementations the right end is the segment's end (the original also maximises over it).
* Recursive bisection: the best split over all current segments is a candidate; a permutation
  test shuffles the values within each segment ``permutations`` times and counts how often the
  best Q of a shuffle reaches the candidate's; p = (count + 1) / (permutations + 1). A candidate
  with p <= ``p_value`` is kept and the search goes on; the first that is not ends it.
* Each segment keeps at least ``min_size`` points while it is searched, so one spike cannot become a segment.
  A change found at that limit (a step in the last two runs of a series) is placed where the two sides' means
  fit best within the ``min_size - 1`` points beyond it (:func:`_place`), so that it keeps its run from the
  night it is first seen through every later night.
* The permutations come from a generator seeded with ``seed``: the same series gives the same
  answer every time (a report must not flip between two renderings).

Sums over pairs are computed from the matrix of absolute differences with cumulative sums, so a
whole segment's Q values cost O(m^2) numpy work.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from labcontract.errors import InputError, Problem

Array = npt.NDArray[np.float64]
Small = npt.NDArray[np.float32]

MIN_SIZE = 3
PERMUTATIONS = 199
P_VALUE = 0.05
SEED = 1234
MAX_POINTS = 1000  # the difference matrix is MAX_POINTS^2 floats (4 MB), times 199 shuffles per change
_BATCH_ELEMENTS = 4_000_000  # shuffles evaluated at once: at most this many matrix cells (16 MB)


class HistoryTooShort(InputError):
    """A series with fewer points than the detector needs: said, not guessed."""

    what = "history"


@dataclass(frozen=True)
class ChangePoint:
    """A change found in a series. ``index`` is the 0-based position of the first point of the new
    segment; the means are those of the segments either side (up to the neighbouring change
    points); ``change_pct`` is (after - before) / |before| in % (None when before is 0)."""

    index: int
    mean_before: float
    mean_after: float
    change_pct: float | None
    p_value: float


def min_points(min_size: int = MIN_SIZE) -> int:
    """Fewest points the detector works on: two segments of ``min_size`` plus two, since with
    exactly two minimal segments there is a single split, and even a perfect step then reaches
    only p = 2/C(2k, k) under the permutation test (0.1 for k = 3), never significance."""
    return 2 * min_size + 2


def _q_values(z: Small, min_size: int) -> Small:
    """Q(tau) for tau = min_size .. m - min_size of each row of ``z`` (shape (B, m): B segments of
    the same length, typically B shuffles of one segment). Returns shape (B, m - 2 min_size + 1)."""
    m = z.shape[1]
    d = z[:, :, None] - z[:, None, :]
    np.abs(d, out=d)
    full = d.sum(axis=1)  # full[b, j] = sum_i d[i, j]
    d *= _upper(m)
    col = d.sum(axis=1)  # col[b, j] = sum_{i<j} d[i, j]
    row = full - col  # row[b, j] = sum_{k>j} d[j, k], as d is symmetric
    total = col.sum(axis=1, keepdims=True)
    taus = np.arange(min_size, m - min_size + 1)
    within_left = np.cumsum(col, axis=1)[:, taus - 1]  # pairs inside [0, tau)
    within_right = np.cumsum(row[:, ::-1], axis=1)[:, ::-1][:, taus]  # pairs inside [tau, m)
    between = total - within_left - within_right
    left = taus.astype(np.float32)
    right = np.float32(m) - left
    energy = (2.0 * between / (left * right)
              - within_left / (left * (left - 1) / 2.0)
              - within_right / (right * (right - 1) / 2.0))
    q: Small = (left * right / m * energy).astype(np.float32)
    return q


_MASKS: dict[int, Small] = {}


def _upper(m: int) -> Small:
    """Strictly upper triangular mask of ones (cached: the same sizes recur in every permutation)."""
    mask = _MASKS.get(m)
    if mask is None:
        if len(_MASKS) > 64:
            _MASKS.clear()
        mask = _MASKS[m] = np.triu(np.ones((m, m), dtype=np.float32), 1)
    return mask


def _best_split(z: Small, min_size: int) -> tuple[int, float]:
    """(tau, Q) of the best split of one segment; tau is relative to the segment."""
    q = _q_values(z[None, :], min_size)[0]
    k = int(np.argmax(q))
    return k + min_size, float(q[k])


def _shuffled_best(z: Small, segments: list[tuple[int, int]], count: int, rng: np.random.Generator,
                   min_size: int) -> Small:
    """Best Q over all ``segments`` for each of ``count`` shuffles (values shuffled within each segment)."""
    best = np.full(count, -np.inf, dtype=np.float32)
    for s, e in segments:
        m = e - s
        chunk = max(1, _BATCH_ELEMENTS // (m * m))
        for lo in range(0, count, chunk):
            n = min(chunk, count - lo)
            shuffled = rng.permuted(np.broadcast_to(z[s:e], (n, m)), axis=1)
            q = _q_values(shuffled, min_size).max(axis=1)
            np.maximum(best[lo:lo + n], q, out=best[lo:lo + n])
    return best


def _check_series(series: Sequence[float], min_size: int, source: str) -> Array:
    problems: list[Problem] = []
    z = np.asarray(series, dtype=np.float64)
    if z.ndim != 1:
        raise InputError(source, [Problem("", "a series must be one-dimensional")])
    bad = np.flatnonzero(~np.isfinite(z))
    problems.extend(Problem(f"[{int(i)}]", f"not a finite number: {float(z[i])!r}") for i in bad[:20])
    if len(bad) > 20:
        problems.append(Problem("", f"... and {len(bad) - 20} more values that are not finite"))
    if len(z) > MAX_POINTS:
        problems.append(Problem("", f"history too long: {len(z)} points; the detector takes at most {MAX_POINTS} "
                                    "(give it the latest ones)"))
    if problems:
        raise InputError(source, problems)
    need = min_points(min_size)
    if len(z) < need:
        raise HistoryTooShort(source, [Problem("", too_short_message(len(z), min_size))])
    return z


def too_short_message(n: int, min_size: int = MIN_SIZE) -> str:
    return f"history too short: {n} point{'s' if n != 1 else ''}; the detector needs at least {min_points(min_size)}"


def detect_changes(series: Sequence[float], *, min_size: int = MIN_SIZE, permutations: int = PERMUTATIONS,
                   p_value: float = P_VALUE, seed: int = SEED, source: str = "series") -> list[ChangePoint]:
    """Change points of ``series`` (values in time order), sorted by index. Raises
    :class:`HistoryTooShort` for fewer than :func:`min_points` values, :class:`InputError` for
    NaN/infinite values or more than :data:`MAX_POINTS`."""
    if min_size < 2:
        raise ValueError(f"min_size must be at least 2 (got {min_size})")
    if permutations < 1:
        raise ValueError(f"permutations must be at least 1 (got {permutations})")
    if not 0.0 < p_value < 1.0:
        raise ValueError(f"p_value must be within (0, 1) (got {p_value})")
    limit = math.floor(p_value * (permutations + 1) + 1e-9) - 1  # most exceedances a kept change may have
    if limit < 0:
        raise ValueError(f"p_value {p_value} is below the smallest p {permutations} permutations can give "
                         f"(1/{permutations + 1})")
    z = _check_series(series, min_size, source)
    spread = float(np.std(z))
    if spread == 0.0:
        return []  # a constant series has no change
    # Q scales with the data, so standardising changes no decision and keeps float32 accurate.
    zs = ((z - float(np.mean(z))) / spread).astype(np.float32)
    rng = np.random.default_rng(seed)
    bounds = [0, len(z)]  # segment edges
    found: dict[int, float] = {}
    best: dict[int, tuple[int, float]] = {}  # segment start -> (split, Q); kept until the segment is split
    batch = 20  # shuffles between checks of the early stop
    while True:
        segments = [(s, e) for s, e in itertools.pairwise(bounds) if e - s >= 2 * min_size]
        for s, e in segments:
            if s not in best:
                tau, q = _best_split(zs[s:e], min_size)
                best[s] = (s + tau, q)
        if not best:
            break
        seg_start = max(best, key=lambda k: best[k][1])
        cand, q_obs = best[seg_start]
        count, done = 0, 0
        while done < permutations and count <= limit:
            n = min(batch, permutations - done)
            count += int(np.count_nonzero(_shuffled_best(zs, segments, n, rng, min_size) >= q_obs))
            done += n
        if count > limit:
            break  # not significant: the search ends
        cand = _place(z, seg_start, _segment_end(bounds, seg_start), cand, min_size)
        found[cand] = (count + 1) / (permutations + 1)
        bounds = sorted([*bounds, cand])
        del best[seg_start]  # its two halves are evaluated on the next pass
    return _describe(z, sorted(found), found)


def _segment_end(bounds: list[int], start: int) -> int:
    return next(e for e in bounds if e > start)


def _place(z: Array, s: int, e: int, tau: int, min_size: int) -> int:
    """Where a significant change at ``tau`` in segment [s, e) begins, when ``min_size`` kept the split from it.

    The split search stops ``min_size`` points from either end of a segment, so a step in the last (or first)
    ``min_size - 1`` points of a series is found at the nearest allowed split: ``[100]*40 + [80, 80]`` splits at
    39, a run whose value was normal. The next night it splits at 40, and the change's run, and the regression's
    id with it, would move. A split at the limit is therefore moved to where the two sides' means fit the values
    best (least squares), looking only in the ``min_size - 1`` points beyond that limit; a split inside the
    allowed range stands as the energy statistic placed it."""
    if tau == e - min_size:
        span = range(tau, e)
    elif tau == s + min_size:
        span = range(s + 1, tau + 1)
    else:
        return tau
    seg = z[s:e]
    best, best_cost = tau, math.inf
    for t in span:
        left, right = seg[: t - s], seg[t - s:]
        cost = float(((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum())
        if cost < best_cost * (1.0 - 1e-12):  # the earliest of equal fits
            best, best_cost = t, cost
    return best


def _describe(z: Array, indexes: list[int], p_values: dict[int, float]) -> list[ChangePoint]:
    edges = [0, *indexes, len(z)]
    means = [float(np.mean(z[s:e])) for s, e in itertools.pairwise(edges)]
    out: list[ChangePoint] = []
    for k, idx in enumerate(indexes):
        before, after = means[k], means[k + 1]
        pct = (after - before) / abs(before) * 100.0 if before != 0 else None
        out.append(ChangePoint(idx, before, after, pct, p_values[idx]))
    return out
