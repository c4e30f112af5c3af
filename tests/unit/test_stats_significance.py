"""Tests for orchestrator.stats.significance.

Welch's test is checked three ways: a published example (Wikipedia, "Welch's t-test", example 1:
t = -2.46, df = 25.0, p = 0.021 for a vs b, so +2.46 for b - a), its statistics recomputed here
from the textbook formulas, and its p-value recomputed by integrating the t density numerically
(independent of the incomplete beta function the module uses). Mann-Whitney is checked against
the counts of its exact distribution (C(n1+n2, n1) equally likely arrangements) and printed
critical values, and its tie-corrected variance against the permutation variance of midranks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.stats import significance as sig
from orchestrator.stats.summary import t_ppf, t_sf2

WIKI_A = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
WIKI_B = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


def _t_two_sided_by_integration(t: float, df: float) -> float:
    """1 - 2 * integral_0^|t| of the t density, Simpson's rule on a fine grid."""
    x = np.linspace(0.0, abs(t), 20_001)
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    y = c * (1 + x * x / df) ** (-(df + 1) / 2)
    h = x[1] - x[0]
    integral = h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum())
    return float(1 - 2 * integral)


def test_welch_published_example() -> None:
    w = sig.welch(WIKI_A, WIKI_B)
    assert w.t == pytest.approx(2.46, abs=0.005)
    assert w.df == pytest.approx(25.0, abs=0.05)
    assert w.p == pytest.approx(0.021, abs=0.0005)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (WIKI_A, WIKI_B),
        ([41_000, 40_200, 39_800, 40_500], [43_100, 42_000, 44_400, 42_900, 43_800]),
        ([1.0, 2.0, 3.0], [1.5, 9.0, 2.0, 4.0, 3.3, 2.2]),
    ],
)
def test_welch_against_formulas(a: list[float], b: list[float]) -> None:
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1)
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1)
    se = math.sqrt(va / na + vb / nb)
    df = (va / na + vb / nb) ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    sp = math.sqrt(((na - 1) * va + (nb - 1) * vb) / (na + nb - 2))
    g = (mb - ma) / sp * (1 - 3 / (4 * (na + nb) - 9))

    w = sig.welch(a, b)
    assert w.diff == pytest.approx(mb - ma)
    assert w.t == pytest.approx((mb - ma) / se)
    assert w.df == pytest.approx(df)
    assert w.p == pytest.approx(_t_two_sided_by_integration(w.t, df), abs=1e-7)
    assert w.hedges_g == pytest.approx(g)
    # The interval's ends are exactly where the difference would stop being significant at 5%.
    assert w.ci_low < w.diff < w.ci_high
    assert t_sf2((w.diff - w.ci_low) / se, df) == pytest.approx(0.05, abs=1e-9)
    assert w.ci_high - w.diff == pytest.approx(w.diff - w.ci_low)


def test_welch_needs_two_values_a_side() -> None:
    with pytest.raises(ValueError, match="single runs"):
        sig.welch([1.0], [1.0, 2.0])


def test_welch_without_spread() -> None:
    same = sig.welch([5.0, 5.0], [5.0, 5.0, 5.0])
    assert (same.p, same.t, same.hedges_g) == (1.0, 0.0, None)
    apart = sig.welch([5.0, 5.0], [6.0, 6.0])
    assert apart.p == 0.0 and apart.t == math.inf and apart.ci_low == apart.ci_high == 1.0


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


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (2, 3), (3, 3), (4, 6), (7, 5)])
def test_u_distribution_counts_every_arrangement(n1: int, n2: int) -> None:
    # the textbook recursion of U's counts without ties is the independent reference of the midrank knapsack
    counts = _u_counts(n1, n2)
    assert len(counts) == n1 * n2 + 1
    assert sum(counts) == math.comb(n1 + n2, n1)
    assert counts == counts[::-1]  # symmetric about n1 n2 / 2
    # without ties the midranks are 1..n: twice the rank sum of b is 2 U + n2 (n2 + 1)
    knapsack = sig._rank_sum_counts(tuple(2 * r for r in range(1, n1 + n2 + 1)), n2)
    assert [int(knapsack[2 * u + n2 * (n2 + 1)]) for u in range(n1 * n2 + 1)] == counts


@pytest.mark.parametrize(
    ("a", "b", "p"),
    [
        ([1, 2, 3], [4, 5, 6], 2 / 20),  # complete separation: 2 of C(6,3) arrangements as extreme
        ([1, 2, 4], [3, 5, 6], 4 / 20),  # U = 1 (or 8): P(U <= 1) = 2/20, two-sided 0.2
        ([1, 2, 3, 4], [5, 6, 7, 8], 2 / 70),
        ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], 2 / 252),  # printed as 0.0079 in the tables
    ],
)
def test_mann_whitney_exact(a: list[float], b: list[float], p: float) -> None:
    r = sig.mann_whitney(a, b)
    assert r.exact and r.z is None
    assert r.p == pytest.approx(p)
    assert sig.mann_whitney(b, a).p == pytest.approx(p)


def test_mann_whitney_u_and_effect_by_pair_counting() -> None:
    a, b = [3.1, 1.0, 7.5, 4.0], [5.0, 6.2, 2.0, 8.8, 9.1]
    pairs = [(x, y) for x in a for y in b]
    u = sum(1.0 if y > x else 0.5 if y == x else 0.0 for x, y in pairs)
    r = sig.mann_whitney(a, b)
    assert r.u == u
    assert r.rank_biserial == pytest.approx(2 * u / len(pairs) - 1)
    assert r.hodges_lehmann == pytest.approx(float(np.median([y - x for x, y in pairs])))


def test_mann_whitney_normal_approximation_with_ties(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sig, "EXACT_MAX_N", 5)  # the normal branch, which larger samples take
    a = [1, 2, 2, 3, 3, 3, 4, 5, 5, 6]
    b = [3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 9]
    allv = a + b
    n, na, nb = len(allv), len(a), len(b)
    # Midranks, then the permutation variance of the rank sum: na nb / (n (n-1)) * sum (R - (n+1)/2)^2.
    srt = sorted(allv)
    mid = {v: (srt.index(v) + 1 + len(srt) - srt[::-1].index(v)) / 2 for v in set(allv)}
    ranks = [mid[v] for v in allv]
    var = na * nb / (n * (n - 1)) * sum((r - (n + 1) / 2) ** 2 for r in ranks)
    u = sum(ranks[na:]) - nb * (nb + 1) / 2
    z = (abs(u - na * nb / 2) - 0.5) / math.sqrt(var)
    r = sig.mann_whitney(a, b)
    assert not r.exact
    assert r.u == u
    assert r.z == pytest.approx(z)
    assert r.p == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert r.p < 0.05


def test_mann_whitney_normal_close_to_exact_for_larger_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    a = list(rng.normal(100, 10, 20))
    b = list(rng.normal(108, 10, 20))
    exact = sig.mann_whitney(a, b)
    monkeypatch.setattr(sig, "EXACT_MAX_N", 5)
    approx = sig.mann_whitney(a, b)
    assert exact.exact and not approx.exact
    assert approx.p == pytest.approx(exact.p, abs=0.005)


def test_mann_whitney_all_equal() -> None:
    r = sig.mann_whitney([2.0, 2.0, 2.0], [2.0, 2.0])
    assert r.p == 1.0 and r.rank_biserial == 0.0


def test_shift_interval_uses_critical_value() -> None:
    # n1 = n2 = 5, 95% two-sided: the critical U is 2, so the interval runs from the 3rd smallest
    # to the 3rd largest of the 25 pairwise differences.
    a = [10.0, 11.0, 12.5, 9.0, 10.5]
    b = [12.0, 13.5, 11.0, 14.0, 12.8]
    diffs = sorted(y - x for x in a for y in b)
    assert sig.shift_ci(a, b) == (diffs[2], diffs[-3])
    assert sig.shift_ci([1.0, 2.0], [3.0, 4.0]) is None  # too few pairs for any 95% interval


def test_judge_single_runs_cannot_be_judged() -> None:
    v = sig.judge([40_000], [44_000, 45_000])
    assert v.kind == "cannot be judged"
    assert v.reason == "single runs: a difference cannot be judged"
    assert v.p is None and v.ci_low is None
    assert v.rel_diff_pct == pytest.approx(11.25)
    assert not v.significant


def test_judge_significant_with_welch() -> None:
    v = sig.judge(WIKI_A, WIKI_B)
    w = sig.welch(WIKI_A, WIKI_B)
    assert v.kind == "significant" and v.significant and v.test == "welch"
    assert (v.p, v.effect_size, v.ci_low, v.ci_high, v.diff) == (w.p, w.hedges_g, w.ci_low, w.ci_high, w.diff)
    assert v.effect_name == "Hedges' g"
    assert v.rel_diff_pct == pytest.approx(w.diff / (sum(WIKI_A) / 15) * 100)
    assert v.reason.startswith("+")
    assert sig.judge(WIKI_A, WIKI_B, alpha=0.01).kind == "no significant difference"


def test_judge_no_significant_difference() -> None:
    v = sig.judge([40_000, 42_000, 38_000], [41_000, 43_000, 39_500])
    assert v.kind == "no significant difference"
    assert v.reason.startswith("no significant difference")
    assert v.ci_low is not None and v.ci_high is not None and v.ci_low < 0 < v.ci_high


def test_judge_with_mann_whitney() -> None:
    a, b = [1.0, 1.2, 0.9, 1.1, 1.05], [1.6, 1.4, 1.9, 5.0, 1.5]
    v = sig.judge(a, b, test="mann-whitney")
    assert v.test == "mann-whitney" and v.kind == "significant"
    assert v.p == pytest.approx(2 / 252)
    assert v.effect_name == "rank-biserial r" and v.effect_size == 1.0
    assert v.ci_low is not None and v.ci_high is not None and v.ci_low <= v.diff <= v.ci_high  # type: ignore[operator]


def test_judge_baseline_zero_has_no_relative_difference() -> None:
    v = sig.judge([0.0, 0.0], [1.0, 1.0])
    assert v.rel_diff_pct is None and v.kind == "significant"


def test_judge_refuses_bad_alpha() -> None:
    with pytest.raises(ValueError):
        sig.judge([1.0, 2.0], [1.0, 2.0], alpha=0.0)


@pytest.mark.parametrize(
    ("metric", "test"),
    [
        ("iops", "welch"), ("read_iops", "welch"), ("bw_bytes", "welch"), ("lat_mean_us", "welch"),
        ("lat_avg_ms", "welch"), ("tps", "welch"), ("initiator_iops", "welch"),
        ("p99", "mann-whitney"), ("lat_p99_us", "mann-whitney"), ("lat_p95_ms", "mann-whitney"),
        ("lat_p99.9_us", "mann-whitney"), ("lat_max_ns", "mann-whitney"), ("lat_stddev_us", "mann-whitney"),
        ("latency.percentiles", "mann-whitney"),
    ],
)
def test_test_for_metric_family(metric: str, test: str) -> None:
    assert sig.test_for(metric) == test


def test_quantile_used_for_interval_is_t() -> None:
    # With 3 vs 3 values and equal spread, df = 4 and the half width is t(0.975, 4) * se.
    w = sig.welch([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])
    assert w.df == pytest.approx(4.0)
    se = math.sqrt(1 / 3 + 1 / 3)
    assert w.ci_high - w.diff == pytest.approx(t_ppf(0.975, 4) * se)


# --- issue 26: exact where it matters -------------------------------------------------------------------------


def _permutation_p(a: list[float], b: list[float]) -> float:
    """scipy's permutation test (every split enumerated) of |rank sum of b - its mean|: the independent reference."""
    stats = pytest.importorskip("scipy.stats")

    def statistic(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        ranks = stats.rankdata(np.concatenate([x, y], axis=axis), axis=axis)
        n = x.shape[axis] + y.shape[axis]
        return np.abs(ranks[..., x.shape[axis]:].sum(axis=axis) - y.shape[axis] * (n + 1) / 2)

    res = stats.permutation_test((a, b), statistic, permutation_type="independent", n_resamples=10**7,
                                 alternative="greater")
    return float(res.pvalue)


def test_mann_whitney_with_ties_in_small_samples_is_exact() -> None:
    # Three equal values against three other equal values: 2 of the 20 splits are as extreme. The normal
    # approximation said p = 0.047, "significant", where no test on 3 vs 3 can go below 0.1.
    r = sig.mann_whitney([1, 1, 1], [2, 2, 2])
    assert r.exact and r.p == pytest.approx(0.1)
    v = sig.judge([1, 1, 1], [2, 2, 2], test="mann-whitney")
    assert v.kind == "no significant difference" and v.ci_low is None
    assert sig.mann_whitney([10, 20, 20, 30], [20, 30, 30, 40, 40]).p == pytest.approx(
        _permutation_p([10, 20, 20, 30], [20, 30, 30, 40, 40]))


def test_mann_whitney_matches_an_exhaustive_permutation_test() -> None:
    # fio's percentiles come from buckets: ties are the rule. 60 random tied samples of 2..8 values a side.
    rng = np.random.default_rng(26)
    for _ in range(60):
        a = [float(x) for x in rng.integers(0, 6, int(rng.integers(2, 9)))]
        b = [float(x) for x in rng.integers(1, 8, int(rng.integers(2, 9)))]
        assert sig.mann_whitney(a, b).p == pytest.approx(_permutation_p(a, b), abs=1e-12), (a, b)


def test_the_shift_interval_agrees_with_the_p_it_accompanies() -> None:
    # The interval is the test inverted: it leaves 0 out when p is significant and holds it when not, ties or not,
    # small samples (exact) or large (normal).
    rng = np.random.default_rng(1)
    for i in range(300):
        big = i % 10 == 0
        na, nb = (int(rng.integers(31, 45)), int(rng.integers(2, 40))) if big else \
            (int(rng.integers(2, 9)), int(rng.integers(2, 9)))
        tied = i % 2 == 0
        a = [float(x) for x in (rng.integers(0, 8, na) if tied else rng.normal(10, 2, na).round(3))]
        b = [float(x) for x in (rng.integers(1, 9, nb) if tied else rng.normal(11, 2, nb).round(3))]
        v = sig.judge(a, b, test="mann-whitney")
        if v.ci_low is None or v.ci_high is None:
            continue  # too few values to bound the shift on one side
        if v.significant:
            assert not v.ci_low < 0 < v.ci_high, (a, b, v)
        else:
            assert v.ci_low <= 0 <= v.ci_high, (a, b, v)


def test_the_large_sample_interval_rounds_to_the_nearest_rank() -> None:
    # 40 against 4 values: the normal branch. The floor of k gave (-24.65, 0.10) beside p = 0.048.
    a, b = [float(x) for x in range(40)], [6.85, 7.1, 7.35, 7.6]
    v = sig.judge(a, b, test="mann-whitney")
    assert v.p == pytest.approx(0.0477, abs=1e-4) and v.significant
    assert v.ci_low is not None and v.ci_high is not None and v.ci_high < 0
    assert (v.ci_low, v.ci_high) == pytest.approx((-24.4, -0.15))
    assert sig._moses_normal(a, b, 0.95) == pytest.approx((-24.4, -0.15))


def test_welch_answers_at_the_ends_of_the_floating_point_range() -> None:
    base = sig.welch([1.0, 2.0, 3.0], [4.0, 5.0, 6.5])
    for scale in (1e-90, 1e-300, 1e154, 1e300):
        w = sig.welch([x * scale for x in (1.0, 2.0, 3.0)], [x * scale for x in (4.0, 5.0, 6.5)])
        assert (w.t, w.df, w.p, w.hedges_g) == pytest.approx((base.t, base.df, base.p, base.hedges_g), rel=1e-9)
        assert (w.diff, w.ci_low, w.ci_high) == pytest.approx(
            (base.diff * scale, base.ci_low * scale, base.ci_high * scale), rel=1e-9)


def test_welch_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(5)
    for _ in range(50):
        a, b = list(rng.normal(100, 7, int(rng.integers(2, 12)))), list(rng.normal(104, 12, int(rng.integers(2, 12))))
        ref = stats.ttest_ind(b, a, equal_var=False)
        w = sig.welch(a, b)
        assert w.t == pytest.approx(ref.statistic, rel=1e-10)
        assert w.p == pytest.approx(ref.pvalue, rel=1e-8, abs=1e-14)
        lo, hi = ref.confidence_interval(0.95)
        assert (w.ci_low, w.ci_high) == pytest.approx((lo, hi), rel=1e-8)


@pytest.mark.parametrize(("p", "df"), [(1e-300, 1.0), (1e-300, 3.0), (1e-12, 1.0), (1e-8, 2.5), (1 - 1e-16, 10.0),
                                       (1e-200, 30.0), (0.3, 7.0)])
def test_t_quantile_far_in_the_tails(p: float, df: float) -> None:
    if df == 1.0:  # Cauchy: a closed form
        expected = -1.0 / math.tan(math.pi * p) if p > 1e-100 else -1.0 / (math.pi * p)
        assert t_ppf(p, df) == pytest.approx(expected, rel=1e-12)
    tail = p if p < 0.5 else 1 - p
    assert t_sf2(t_ppf(p, df), df) / 2 == pytest.approx(tail, rel=1e-9)
    stats = pytest.importorskip("scipy.stats")
    ref = float(stats.t.ppf(p, df))
    if math.isfinite(ref):  # scipy gives -inf at 1e-300 with 3 degrees of freedom; the answer is -1.03e100
        assert t_ppf(p, df) == pytest.approx(ref, rel=1e-9)
