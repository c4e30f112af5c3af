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

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from orchestrator.stats.summary import check_values, normal_sf, t_ppf, t_sf2

TestName = Literal["welch", "mann-whitney"]
VerdictKind = Literal["significant", "no significant difference", "cannot be judged"]

SINGLE_RUNS = "single runs: a difference cannot be judged"
EXACT_MAX_N = 30  # Mann-Whitney: exact null distribution (no ties) up to this many values per side

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
    ma, va = _mean_var(xa)
    mb, vb = _mean_var(xb)
    diff = mb - ma
    sa, sb = va / na, vb / nb
    se2 = sa + sb
    if se2 == 0.0:
        # No spread at all on either side: the means are exact.
        df = float(na + nb - 2)
        t = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        p = 1.0 if diff == 0 else 0.0
        return WelchResult(t, df, p, diff, diff, diff, None)
    se = math.sqrt(se2)
    df = se2 * se2 / (sa * sa / (na - 1) + sb * sb / (nb - 1))
    t = diff / se
    p = t_sf2(t, df)
    half = t_ppf(0.5 + level / 2.0, df) * se
    pooled = math.sqrt(((na - 1) * va + (nb - 1) * vb) / (na + nb - 2))
    g: float | None = None
    if pooled > 0:
        g = diff / pooled * (1.0 - 3.0 / (4.0 * (na + nb) - 9.0))
    return WelchResult(t, df, p, diff, diff - half, diff + half, g)


def _ranks(values: list[float]) -> tuple[list[float], list[int]]:
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


def _u_counts(n1: int, n2: int) -> list[int]:
    """Number of arrangements giving each U = 0..n1*n2 (no ties), by the usual recursion
    c(n1, n2, u) = c(n1-1, n2, u-n2) + c(n1, n2-1, u)."""
    # table[j] holds the counts for (i, j) while i grows row by row.
    table: list[list[int]] = [[1] for _ in range(n2 + 1)]  # i = 0: U is always 0
    for i in range(1, n1 + 1):
        row: list[list[int]] = [[1]]  # j = 0: U is always 0
        for j in range(1, n2 + 1):
            size = i * j + 1
            cur = [0] * size
            for u, c in enumerate(table[j]):  # (i-1, j), shifted by j
                cur[u + j] += c
            for u, c in enumerate(row[j - 1]):  # (i, j-1)
                cur[u] += c
            row.append(cur)
        table = row
    return table[n2]


def mann_whitney(a: Iterable[float], b: Iterable[float]) -> MannWhitneyResult:
    """Two-sided Mann-Whitney U test of b against a.

    Without ties and with at most :data:`EXACT_MAX_N` values per side the p-value comes from the
    exact null distribution (the normal approximation is poor for the 3-10 repeats a cell has).
    Otherwise the normal approximation with the tie correction of the variance and a continuity
    correction of 0.5 is used.
    """
    xa, xb = check_values(a, "a"), check_values(b, "b")
    na, nb = len(xa), len(xb)
    if na < 2 or nb < 2:
        raise ValueError(SINGLE_RUNS)
    ranks, ties = _ranks(xa + xb)
    r_b = math.fsum(ranks[na:])
    u_b = r_b - nb * (nb + 1) / 2.0
    n = na + nb
    mu = na * nb / 2.0
    shifts = sorted(y - x for x in xa for y in xb)
    k = len(shifts)
    hl = shifts[k // 2] if k % 2 else (shifts[k // 2 - 1] + shifts[k // 2]) / 2.0
    rbc = 2.0 * u_b / (na * nb) - 1.0
    if not ties and max(na, nb) <= EXACT_MAX_N:
        counts = _u_counts(na, nb)
        total = sum(counts)
        lo_u = min(u_b, na * nb - u_b)  # the distribution is symmetric
        tail = sum(counts[: math.floor(lo_u + 1e-9) + 1])
        p = min(1.0, 2.0 * tail / total)
        return MannWhitneyResult(u_b, None, p, True, rbc, hl)
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1))
    var = na * nb / 12.0 * ((n + 1) - tie_term)
    if var <= 0:  # every value equal
        return MannWhitneyResult(u_b, 0.0, 1.0, False, rbc, hl)
    z = max(0.0, abs(u_b - mu) - 0.5) / math.sqrt(var)
    p = min(1.0, 2.0 * normal_sf(z))
    return MannWhitneyResult(u_b, math.copysign(z, u_b - mu), p, False, rbc, hl)


def shift_ci(a: list[float], b: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free interval of the shift b - a from the ordered pairwise differences
    (Hodges-Lehmann / Moses); None when the samples are too small for that level."""
    shifts = sorted(y - x for x in a for y in b)
    na, nb = len(a), len(b)
    if max(na, nb) <= EXACT_MAX_N:
        counts = _u_counts(na, nb)
        total = sum(counts)
        alpha2 = (1.0 - level) / 2.0
        acc, c_k = 0, -1
        for u, c in enumerate(counts):  # largest C with P(U <= C) <= alpha/2
            if (acc + c) / total > alpha2:
                break
            acc += c
            c_k = u
        if c_k < 0:
            return None
        k = c_k + 1  # the k-th smallest and k-th largest difference (1-based)
    else:
        z = -t_ppf((1.0 - level) / 2.0, 1e9)
        k = math.floor(na * nb / 2.0 - z * math.sqrt(na * nb * (na + nb + 1) / 12.0))
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
