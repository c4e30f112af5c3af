"""Is the difference between two cells' repeats real? Welch's t-test and Mann-Whitney U.

``a`` is always the baseline and ``b`` the candidate: differences are ``b - a`` and relative
differences are in % of ``a``'s mean.

Why two tests (docs/statistics.md): a throughput or mean-latency figure of one repeat is itself a
mean over millions of I/Os, so across repeats it is close to normal, and Welch's t-test (which
does not assume equal variances: two devices rarely vary alike) is the most powerful choice and
gives an interval for the difference. Tail figures (p99, p99.9, max latency, the spread of the
latency) are single extreme observations per repeat, skewed and prone to outliers, so they are
judged by the rank-based Mann-Whitney U, which assumes no distribution. :func:`test_for` picks
the test from the metric name.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from orchestrator.stats.summary import check_values, normal_sf, t_ppf, t_sf2

TestName = Literal["welch", "mann-whitney"]
VerdictKind = Literal["significant", "no significant difference", "cannot be judged"]

SINGLE_RUNS = "single runs: a difference cannot be judged"
EXACT_MAX_N = 30  # Mann-Whitney: exact permutation distribution (ties included) up to this many values per side

# Tokens of a metric name that mark a tail or extreme figure: p99, p99_9, p999, max, stddev, percentile...
_TAIL = re.compile(r"(^|[_.\-\s])(p\d+(\.\d+)?|max|maximum|std|stdev|stddev|percentiles?|tail)($|[_.\-\s])")


def test_for(metric: str) -> TestName:
    """The test a metric family is judged with: Mann-Whitney for tail/extreme figures (p95, p99,
    max, standard deviation of latency), Welch's t-test for everything else (IOPS, bandwidth, mean
    latency, TPS), whose per-repeat values are means of many I/Os and so close to normal."""
    return "mann-whitney" if _TAIL.search(metric.lower()) else "welch"


test_for.__test__ = False  # type: ignore[attr-defined]  # not a pytest test despite the name


@dataclass(frozen=True)
class WelchResult:
    t: float
    df: float
    p: float
    diff: float  # mean(b) - mean(a)
    ci_low: float  # 95% interval of diff
    ci_high: float
    hedges_g: float | None  # None when both sides have no spread


@dataclass(frozen=True)
class MannWhitneyResult:
    u: float  # U of b: pairs (a_i, b_j) with b_j > a_i, ties counting 1/2
    z: float | None  # None when the exact distribution was used
    p: float
    exact: bool
    rank_biserial: float  # P(b > a) - P(b < a), in [-1, 1]
    hodges_lehmann: float  # median of all b_j - a_i


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    reason: str
    test: TestName
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    diff: float | None = None  # mean_b - mean_a (welch, single runs) or the Hodges-Lehmann shift (mann-whitney)
    rel_diff_pct: float | None = None  # diff / |mean_a| in %
    p: float | None = None
    effect_size: float | None = None  # Hedges' g (welch) or rank-biserial correlation (mann-whitney)
    effect_name: str = ""
    ci_low: float | None = None  # 95% interval of diff (welch) or of the shift (mann-whitney)
    ci_high: float | None = None

    @property
    def significant(self) -> bool:
        return self.kind == "significant"


def _mean_var(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    m = math.fsum(xs) / n
    return m, math.fsum((x - m) ** 2 for x in xs) / (n - 1)


def welch(a: Iterable[float], b: Iterable[float], level: float = 0.95) -> WelchResult:
    """Welch's unequal-variances t-test of mean(b) - mean(a), two-sided, with the Welch-Satterthwaite
    degrees of freedom, the ``level`` interval of the difference and Hedges' g (bias-corrected
    standardized difference on the pooled standard deviation)."""
    xa, xb = check_values(a, "a"), check_values(b, "b")
    na, nb = len(xa), len(xb)
    if na < 2 or nb < 2:
        raise ValueError(SINGLE_RUNS)
    # t, df and g do not depend on the unit: computed on values scaled to at most 1, so that squares of squared
    # deviations neither overflow (values near 1e154) nor vanish (near 1e-90); differences are scaled back.
    # (All zeros give frexp exponent 0: a scale of 1.)
    scale = 2.0 ** math.frexp(max(max(abs(x) for x in xa), max(abs(x) for x in xb)))[1]  # a power of 2: exact
    ma, va = _mean_var([x / scale for x in xa])
    mb, vb = _mean_var([x / scale for x in xb])
    diff = mb - ma
    sa, sb = va / na, vb / nb
    se2 = sa + sb
    if se2 == 0.0:
        # No spread at all on either side: the means are exact.
        df = float(na + nb - 2)
        t = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        p = 1.0 if diff == 0 else 0.0
        return WelchResult(t, df, p, diff * scale, diff * scale, diff * scale, None)
    se = math.sqrt(se2)
    df = se2 * se2 / (sa * sa / (na - 1) + sb * sb / (nb - 1))
    t = diff / se
    p = t_sf2(t, df)
    half = t_ppf(0.5 + level / 2.0, df) * se
    pooled = math.sqrt(((na - 1) * va + (nb - 1) * vb) / (na + nb - 2))
    g: float | None = None
    if pooled > 0:
        g = diff / pooled * (1.0 - 3.0 / (4.0 * (na + nb) - 9.0))
    return WelchResult(t, df, p, diff * scale, (diff - half) * scale, (diff + half) * scale, g)


def _ranks(values: Sequence[float | Fraction]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of tie groups."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@functools.lru_cache(maxsize=256)
def _rank_sum_counts(doubled: tuple[int, ...], nb: int) -> npt.NDArray[np.float64]:
    """The permutation distribution of twice the rank sum of ``nb`` values drawn from the midranks ``doubled / 2``:
    element s counts the subsets of size ``nb`` whose doubled midranks add up to s. With ties this is the exact
    conditional null distribution of Mann-Whitney's U (every split of the observed midranks equally likely).
    A 0/1 knapsack over the values: at most 60 of them and sums below 3,700 here, a few ms of numpy."""
    table = np.zeros((nb + 1, sum(doubled) + 1), dtype=np.float64)
    table[0, 0] = 1.0
    for w in doubled:
        table[1:, w:] += table[:-1, :-w]  # numpy reads the right side before writing (overlap-safe)
    out: npt.NDArray[np.float64] = table[nb]
    return out


@dataclass(frozen=True)
class _Arrangement:
    """The combined sample of ``a`` and ``b - d`` for one shift ``d``: U of ``b - d`` and its p-value."""

    u: float
    p: float
    z: float | None
    exact: bool


def _arrangement(a: Sequence[Fraction], b: Sequence[Fraction], d: Fraction) -> _Arrangement:
    """Mann-Whitney's two-sided p of ``b - d`` against ``a``: exact (the permutation distribution of the
    observed midranks, ties included) with at most :data:`EXACT_MAX_N` values a side, else the normal
    approximation with the tie-corrected variance and a continuity correction of 0.5. Values are exact
    fractions, so a tie is a tie and a shift's arrangement does not depend on rounding."""
    na, nb = len(a), len(b)
    n = na + nb
    ranks, ties = _ranks([*a, *(y - d for y in b)])
    r_b = math.fsum(ranks[na:])
    u = r_b - nb * (nb + 1) / 2.0
    if max(na, nb) <= EXACT_MAX_N:
        doubled = tuple(sorted(round(2 * r) for r in ranks))
        counts = _rank_sum_counts(doubled, nb)
        centre = nb * (n + 1)  # twice the mean rank sum
        far = abs(round(2 * r_b) - centre)
        sums = np.arange(len(counts))
        tail = float(counts[np.abs(sums - centre) >= far].sum())
        return _Arrangement(u, min(1.0, tail / float(counts.sum())), None, True)
    mu = na * nb / 2.0
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1))
    var = na * nb / 12.0 * ((n + 1) - tie_term)
    if var <= 0:  # every value equal
        return _Arrangement(u, 1.0, 0.0, False)
    z = max(0.0, abs(u - mu) - 0.5) / math.sqrt(var)
    return _Arrangement(u, min(1.0, 2.0 * normal_sf(z)), math.copysign(z, u - mu), False)


def _exact(xs: Iterable[float]) -> list[Fraction]:
    return [Fraction(x) for x in xs]


def mann_whitney(a: Iterable[float], b: Iterable[float]) -> MannWhitneyResult:
    """Two-sided Mann-Whitney U test of b against a.

    With at most :data:`EXACT_MAX_N` values per side the p-value comes from the exact permutation
    distribution of the observed midranks, ties included (the normal approximation is poor for the
    3-10 repeats a cell has, and anti-conservative with the ties fio's bucketed percentiles make:
    3 equal values against 3 other equal values is p = 0.1, never below). Otherwise the normal
    approximation with the tie correction of the variance and a continuity correction of 0.5 is used.
    """
    xa, xb = check_values(a, "a"), check_values(b, "b")
    na, nb = len(xa), len(xb)
    if na < 2 or nb < 2:
        raise ValueError(SINGLE_RUNS)
    arr = _arrangement(_exact(xa), _exact(xb), Fraction(0))
    shifts = sorted(y - x for x in xa for y in xb)
    k = len(shifts)
    hl = shifts[k // 2] if k % 2 else (shifts[k // 2 - 1] + shifts[k // 2]) / 2.0
    rbc = 2.0 * arr.u / (na * nb) - 1.0
    return MannWhitneyResult(arr.u, arr.z, arr.p, arr.exact, rbc, hl)


MAX_INVERTED_PAIRS = 40_000  # shift_ci inverts the test over the pairwise differences up to this many pairs


def shift_ci(a: list[float], b: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free interval of the shift b - a: the shifts ``d`` for which Mann-Whitney does not reject
    ``b - d`` against ``a`` at ``1 - level`` (the Hodges-Lehmann / Moses interval, by inverting the very test
    whose p accompanies it, so the interval leaves 0 out exactly when that p is significant). Its ends are
    pairwise differences b_j - a_i. None when the samples are too small to bound the shift at that level."""
    alpha = 1.0 - level
    na, nb = len(a), len(b)
    if na * nb > MAX_INVERTED_PAIRS:
        return _moses_normal(a, b, level)
    ea, eb = _exact(a), _exact(b)
    values = sorted({y - x for x in ea for y in eb})
    # Candidates in increasing order: the gap below the smallest difference, each difference, the gap above it...
    cands: list[Fraction] = [values[0] - 1]
    for lo, hi in itertools.pairwise(values):
        cands += [lo, (lo + hi) / 2]
    cands += [values[-1], values[-1] + 1]

    def accepted(i: int) -> bool:
        return _arrangement(ea, eb, cands[i]).p > alpha

    centre = max(range(len(cands)), key=lambda i: _arrangement(ea, eb, cands[i]).p) if len(cands) <= 64 else \
        _median_candidate(cands, values, ea, eb)
    if not accepted(centre) or accepted(0) or accepted(len(cands) - 1):
        return None
    low = _first(lambda i: accepted(i), 0, centre)  # first accepted from the left (p grows towards the centre)
    high = _first(lambda i: not accepted(i), centre, len(cands) - 1) - 1  # last accepted
    zero = bisect.bisect_left(cands, Fraction(0))
    if zero < len(cands) and cands[zero] == 0 and accepted(zero):  # the arrangement at 0 itself
        low, high = min(low, zero), max(high, zero)
    return float(_closure(cands, low, values, below=True)), float(_closure(cands, high, values, below=False))


def _median_candidate(cands: list[Fraction], values: list[Fraction], ea: list[Fraction], eb: list[Fraction]) -> int:
    """The candidate at the Hodges-Lehmann shift (U closest to its mean, so accepted whenever any is)."""
    shifts = sorted(y - x for x in ea for y in eb)
    k = len(shifts)
    hl = shifts[k // 2] if k % 2 else (shifts[k // 2 - 1] + shifts[k // 2]) / 2
    return bisect.bisect_left(cands, hl)


def _first(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """The first index in [lo, hi] where ``pred`` holds (binary search: it holds on a suffix), hi if none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _closure(cands: list[Fraction], i: int, values: list[Fraction], *, below: bool) -> Fraction:
    """The difference that bounds accepted candidate ``i``: itself, or the difference next to its gap."""
    if i % 2 == 1:  # odd positions are the differences themselves
        return cands[i]
    j = i // 2  # gap j lies between values[j - 1] and values[j]
    return values[j - 1] if below else values[j]


def _moses_normal(a: list[float], b: list[float], level: float) -> tuple[float, float] | None:
    """Large samples: the k-th smallest and largest of the differences, k from the normal approximation with the
    same continuity correction as the test (k is the nearest integer, not the floor)."""
    shifts = sorted(y - x for x in a for y in b)
    na, nb = len(a), len(b)
    z = -t_ppf((1.0 - level) / 2.0, 1e9)
    k = math.floor(na * nb / 2.0 - z * math.sqrt(na * nb * (na + nb + 1) / 12.0) + 0.5)
    if k < 1:
        return None
    return shifts[k - 1], shifts[len(shifts) - k]


def _rel(diff: float, base: float) -> float | None:
    return diff / abs(base) * 100.0 if base != 0 else None


def judge(a: Iterable[float], b: Iterable[float], alpha: float = 0.05, test: TestName = "welch") -> Verdict:
    """Say whether candidate ``b`` differs from baseline ``a`` at level ``alpha`` (two-sided).

    With fewer than two values on either side the verdict is "cannot be judged" (a single run
    carries no estimate of its own noise). The interval is the (1 - alpha) interval, 95% by default, of the
    difference (Welch) or of the shift (Mann-Whitney, Hodges-Lehmann), in the metric's units.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1) (got {alpha})")
    xa, xb = check_values(a, "a"), check_values(b, "b")
    ma, mb = math.fsum(xa) / len(xa), math.fsum(xb) / len(xb)
    if len(xa) < 2 or len(xb) < 2:
        return Verdict("cannot be judged", SINGLE_RUNS, test, len(xa), len(xb), ma, mb,
                       diff=mb - ma, rel_diff_pct=_rel(mb - ma, ma))
    level = 1.0 - alpha
    lo: float | None
    hi: float | None
    if test == "welch":
        w = welch(xa, xb, level)
        p, eff, name, lo, hi, diff = w.p, w.hedges_g, "Hedges' g", w.ci_low, w.ci_high, w.diff
        how = f"Welch's t-test: t={w.t:.3g}, df={w.df:.3g}"
    else:
        mw = mann_whitney(xa, xb)
        ci = shift_ci(xa, xb, level)
        p, eff, name, diff = mw.p, mw.rank_biserial, "rank-biserial r", mw.hodges_lehmann
        lo, hi = (ci[0], ci[1]) if ci else (None, None)
        how = f"Mann-Whitney U={mw.u:g}{' (exact)' if mw.exact else ''}"
    kind: VerdictKind = "significant" if p <= alpha else "no significant difference"
    rel = _rel(diff, ma)
    rel_text = f"{rel:+.1f}%" if rel is not None else f"{diff:+.4g}"
    reason = f"{rel_text}, p={p:.3g} ({how}, n={len(xa)} vs {len(xb)})"
    if kind == "no significant difference":
        reason = f"no significant difference ({reason})"
    return Verdict(kind, reason, test, len(xa), len(xb), ma, mb, diff, rel, p, eff, name, lo, hi)
