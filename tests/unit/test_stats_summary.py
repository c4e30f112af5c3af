"""Tests for orchestrator.stats.summary: Student's t without scipy, and the summary of repeats.

Reference quantiles are the 0.975 column of the usual t table (e.g. NIST/SEMATECH e-Handbook
1.3.6.7.2), given to 6 decimals; closed forms are used where the t distribution has one
(df = 1: Cauchy, df = 2: 1/2 + t / (2 sqrt(2 + t^2))).
"""

from __future__ import annotations

import math

import pytest

from labcontract.errors import InputError
from orchestrator.stats.summary import (
    SINGLE_RUN_NOTE,
    Summary,
    mean_ci,
    reg_inc_beta,
    summarize,
    t_cdf,
    t_ppf,
    t_sf2,
)


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.706205), (2, 4.302653), (4, 2.776445), (9, 2.262157), (30, 2.042272), (1000, 1.962339)],
)
def test_t_quantile_matches_table(df: int, expected: float) -> None:
    assert t_ppf(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_t_quantile_tends_to_normal() -> None:
    assert t_ppf(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)


@pytest.mark.parametrize("df", [1, 2, 3.5, 7, 60])
@pytest.mark.parametrize("p", [0.001, 0.05, 0.3, 0.5, 0.9, 0.995])
def test_t_quantile_inverts_cdf(df: float, p: float) -> None:
    assert t_cdf(t_ppf(p, df), df) == pytest.approx(p, abs=1e-10)


def test_t_quantile_is_antisymmetric() -> None:
    assert t_ppf(0.025, 5) == pytest.approx(-t_ppf(0.975, 5), rel=1e-12)
    assert t_ppf(0.5, 5) == 0.0


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_t_quantile_refuses_p_outside_0_1(bad: float) -> None:
    with pytest.raises(ValueError):
        t_ppf(bad, 3)


@pytest.mark.parametrize("t", [-3.0, -0.5, 0.0, 1.0, 10.0])
def test_t_cdf_closed_forms(t: float) -> None:
    assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
    assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


def test_two_sided_tail() -> None:
    assert t_sf2(0.0, 4) == pytest.approx(1.0)
    assert t_sf2(2.776445, 4) == pytest.approx(0.05, abs=1e-6)
    assert t_sf2(-2.776445, 4) == pytest.approx(0.05, abs=1e-6)
    assert t_sf2(math.inf, 4) == 0.0
    with pytest.raises(ValueError):
        t_sf2(1.0, 0)


@pytest.mark.parametrize("x", [0.0, 0.01, 0.3, 0.5, 0.77, 0.999, 1.0])
def test_incomplete_beta_closed_forms(x: float) -> None:
    assert reg_inc_beta(1, 1, x) == pytest.approx(x, abs=1e-12)
    assert reg_inc_beta(3, 1, x) == pytest.approx(x**3, abs=1e-12)
    assert reg_inc_beta(1, 4, x) == pytest.approx(1 - (1 - x) ** 4, abs=1e-12)
    assert reg_inc_beta(2.5, 0.5, x) + reg_inc_beta(0.5, 2.5, 1 - x) == pytest.approx(1.0, abs=1e-12)


def test_incomplete_beta_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError):
        reg_inc_beta(0, 1, 0.5)
    with pytest.raises(ValueError):
        reg_inc_beta(1, 1, 1.5)


def test_summary_of_four_signed_values() -> None:
    # A figure that can be negative keeps Student's symmetric interval: mean -7.5, sample sd sqrt(5/3) = 1.290994,
    # t(0.975, 3) = 3.182446: half width 2.054260.
    s = summarize([-6, -9, -7, -8])
    assert (s.n, s.mean, s.median) == (4, -7.5, -7.5)
    assert s.stdev == pytest.approx(math.sqrt(5 / 3))
    assert s.ci_low == pytest.approx(-7.5 - 2.054260, abs=1e-5)
    assert s.ci_high == pytest.approx(-7.5 + 2.054260, abs=1e-5)
    assert s.half_width == pytest.approx(2.054260, abs=1e-5)
    assert s.cov_pct == pytest.approx(math.sqrt(5 / 3) / 7.5 * 100)
    assert s.note == "" and not s.too_noisy


def test_a_positive_figure_never_has_an_interval_below_zero() -> None:
    # The cell: three repeats around 82,784 IOPS printed "95% interval -29,683 to 195,251".
    values = [33_113.6, 124_176.0, 91_062.4]
    m = sum(values) / 3
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / 2)
    assert m - 4.302653 * sd / math.sqrt(3) < 0  # Student's symmetric interval would go below zero
    s = summarize(values)
    assert s.too_noisy and s.ci_low is None and s.ci_high is None
    assert s.note == "too noisy: CoV 56% over 3 repeats"
    # Just under the line (half width 50% of the mean) the interval is printed, on the log scale, above zero.
    for n in (2, 3, 5):  # (at 10 repeats the line is at CoV 70%: evenly spread values would go negative)
        t = {2: 12.706205, 3: 4.302653, 5: 2.776445}[n]
        cov = 0.499 * math.sqrt(n) / t
        xs = [100.0 * (1 + cov * z) for z in _unit_spread(n)]
        s = summarize(xs)
        assert not s.too_noisy and s.ci_low is not None and s.ci_high is not None
        assert 0 < s.ci_low < s.mean < s.ci_high
        h = t * cov / math.sqrt(n)
        assert s.ci_low == pytest.approx(s.mean * math.exp(-h), rel=1e-6)
        assert s.ci_high == pytest.approx(s.mean * math.exp(h), rel=1e-6)
        assert summarize([100.0 * (1 + cov * 1.01 * z) for z in _unit_spread(n)]).too_noisy


def _unit_spread(n: int) -> list[float]:
    """n values of mean 0 and sample standard deviation 1."""
    zs = [i - (n - 1) / 2 for i in range(n)]
    sd = math.sqrt(sum(z * z for z in zs) / (n - 1))
    return [z / sd for z in zs]


def test_a_figure_with_zeros_keeps_an_interval_above_zero() -> None:
    s = summarize([0.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0])
    assert s.ci_low is not None and 0 < s.ci_low < s.mean


def test_summary_of_iops_repeats() -> None:
    # Five repeats of a 4K random write: mean 40,000, deviations -1000, +500, 0, +1500, -1000.
    s = summarize([39_000, 40_500, 40_000, 41_500, 39_000])
    sd = math.sqrt((1000**2 + 500**2 + 0 + 1500**2 + 1000**2) / 4)
    assert s.mean == 40_000 and s.median == 40_000
    assert s.stdev == pytest.approx(sd)
    h = 2.776445 * sd / math.sqrt(5) / 40_000  # the log-scale interval: mean * exp(-+ t CoV / sqrt(n))
    assert s.ci_low == pytest.approx(40_000 * math.exp(-h), rel=1e-6)
    assert s.ci_high == pytest.approx(40_000 * math.exp(h), rel=1e-6)
    assert s.half_width == pytest.approx(2.776445 * sd / math.sqrt(5), rel=2e-4)  # first order: Student's t
    assert s.cov_pct == pytest.approx(sd / 400)


def test_single_value_has_no_interval_and_says_so() -> None:
    s = summarize([123.0])
    assert s == Summary(1, 123.0, 123.0, None, None, None, None, SINGLE_RUN_NOTE)
    assert s.half_width is None
    assert "single run" in s.note


def test_mean_zero_has_no_cov() -> None:
    s = summarize([-1.0, 1.0])
    assert s.mean == 0 and s.cov_pct is None and s.ci_low is not None


def test_identical_values_have_a_zero_width_interval() -> None:
    s = summarize([5.0, 5.0, 5.0])
    assert (s.stdev, s.ci_low, s.ci_high, s.cov_pct) == (0.0, 5.0, 5.0, 0.0)


def test_median_of_odd_count() -> None:
    assert summarize([9, 1, 5]).median == 5


def test_empty_is_refused() -> None:
    with pytest.raises(InputError, match="no values"):
        summarize([])


def test_every_bad_value_is_reported() -> None:
    with pytest.raises(InputError) as info:
        summarize([1.0, math.nan, 2.0, math.inf, -math.inf], source="cell 4k-randwrite iops")
    assert [p.location for p in info.value.problems] == ["[1]", "[3]", "[4]"]
    assert "cell 4k-randwrite iops" in str(info.value)


def test_non_numbers_are_refused() -> None:
    with pytest.raises(InputError) as info:
        summarize([1.0, "2", True])  # type: ignore[list-item]
    assert len(info.value.problems) == 2


def test_mean_ci_other_level_and_short_input() -> None:
    assert mean_ci([1.0]) is None
    ci = mean_ci([-1.0, 0.0, 1.0], level=0.90)  # t(0.95, 2) = 2.919986, sd 1
    assert ci is not None
    assert ci[2] - ci[0] == pytest.approx(2.919986 / math.sqrt(3), abs=1e-5)
    pos = mean_ci([1.0, 2.0, 3.0], level=0.90)  # positive: log scale, exp(-+ t (sd / mean) / sqrt(n))
    assert pos is not None
    h = 2.919986 / 2 / math.sqrt(3)
    assert pos[1:] == pytest.approx((2 * math.exp(-h), 2 * math.exp(h)))
