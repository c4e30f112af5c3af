"""Summary of repeated measurements: mean, median, sample standard deviation, the 95% confidence
interval of the mean from Student's t, and the coefficient of variation.

Why Student's t and not mean +- 1.96 sd/sqrt(n): a cell is repeated 3 to 10 times, and with so few
values the normal quantile understates the interval badly (at n=3 the t quantile is 4.30, not 1.96).

scipy is not a dependency, so the t distribution is computed here: its CDF through the regularized
incomplete beta function (continued fraction evaluated with the modified Lentz method, as in
Numerical Recipes 6.4), and its quantile by bisection on that CDF. Accuracy is far better than
the 1e-4 the tests check against printed tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from labcontract.errors import InputError, Problem

_EPS = 3e-16
_TINY = 1e-300
_MAX_ITER = 10_000


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_ITER + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")  # pragma: no cover


def reg_inc_beta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0):
        raise ValueError(f"reg_inc_beta needs a, b > 0 (got a={a}, b={b})")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"reg_inc_beta needs 0 <= x <= 1 (got {x})")
    if x == 0.0 or x == 1.0:
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    # The continued fraction converges fast for x < (a+1)/(a+b+2); use the symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def t_sf2(t: float, df: float) -> float:
    """Two-sided tail probability P(|T| >= |t|) of Student's t with ``df`` degrees of freedom."""
    if df <= 0 or math.isnan(df):
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    if math.isnan(t):
        raise ValueError("t is not a number")
    if math.isinf(t):
        return 0.0
    r = math.sqrt(df) / abs(t) if t != 0 else math.inf  # x = df / (df + t^2) without overflowing t^2
    a = df / 2.0
    if r < 1e-100:  # x below 1e-200: I_x(a, 1/2) = x^a / (a B(a, 1/2)) to double precision, in logs (x underflows)
        return math.exp(math.lgamma(a + 0.5) - math.lgamma(a) - math.lgamma(0.5) + 2.0 * a * math.log(r)) / a
    x = 1.0 if math.isinf(r) else r * r / (1.0 + r * r)
    return reg_inc_beta(a, 0.5, x)


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t."""
    tail = t_sf2(t, df) / 2.0
    return 1.0 - tail if t >= 0 else tail


def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t (inverse CDF): bisection on the smaller tail, so that a p within a hair of 0 or 1
    (1e-300, 1 - 1e-16) is answered as precisely as one near 0.5."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t quantile needs 0 < p < 1 (got {p})")
    if df <= 0 or math.isnan(df):
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    if p == 0.5:
        return 0.0
    tail = p if p < 0.5 else 1.0 - p  # exact for p >= 0.5 (Sterbenz)
    lo, hi = 0.0, 1.0
    while t_sf2(hi, df) / 2.0 > tail:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:
            raise ValueError(f"the t quantile of p={p} with df={df} is beyond the floating-point range")
    for _ in range(400):
        mid = (lo + hi) / 2.0
        if t_sf2(mid, df) / 2.0 > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    q = (lo + hi) / 2.0
    return q if p > 0.5 else -q


def normal_sf(z: float) -> float:
    """Upper tail of the standard normal distribution."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


@dataclass(frozen=True)
class Summary:
    """Figures of n repeated measurements of one metric.

    ``ci_low``/``ci_high`` bound the 95% confidence interval of the mean; ``stdev`` is the sample
    standard deviation (n-1); ``cov_pct`` is stdev / mean in %. With a single value none of
    these can be estimated, so they are ``None`` and ``note`` says so. ``cov_pct`` is also
    ``None`` when the mean is 0. The interval of a figure that cannot be negative (every value >= 0:
    IOPS, bandwidth, latency) is taken on the log scale and never goes below zero; a figure too noisy
    for its interval to say anything (half width over :data:`NOISY_HALF_WIDTH` of the mean) has no
    interval, ``too_noisy`` set and a ``note`` such as ``too noisy: CoV 54% over 3 repeats``.
    """

    n: int
    mean: float
    median: float
    stdev: float | None
    ci_low: float | None
    ci_high: float | None
    cov_pct: float | None
    note: str = ""
    too_noisy: bool = False

    @property
    def half_width(self) -> float | None:
        """Half the width of the confidence interval (the "+-" figure)."""
        if self.ci_low is None or self.ci_high is None:
            return None
        return (self.ci_high - self.ci_low) / 2.0


SINGLE_RUN_NOTE = "single run: no interval or variation can be estimated"


def check_values(values: Iterable[float], source: str = "values") -> list[float]:
    """The values as floats; every NaN, infinite or non-number is reported at once, as is emptiness."""
    out: list[float] = []
    problems: list[Problem] = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float):
            problems.append(Problem(f"[{i}]", f"not a number: {v!r}"))
            continue
        f = float(v)
        if not math.isfinite(f):
            problems.append(Problem(f"[{i}]", f"not a finite number: {v!r}"))
        else:
            out.append(f)
    if not out and not problems:
        problems.append(Problem("", "no values"))
    if problems:
        raise InputError(source, problems)
    return out


NOISY_HALF_WIDTH = 0.5  # an interval wider than +-50% of its mean says nothing publishable (docs/statistics.md)


def _relative_half_width(values: list[float], level: float) -> tuple[float, float, float] | None:
    """(mean, sd, t * sd / sqrt(n)) of the values; None for n < 2."""
    n = len(values)
    if n < 2:
        return None
    m = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))
    return m, sd, t_ppf(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)


def mean_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """(mean, low, high) of the ``level`` confidence interval of the mean; None for n < 2.

    Student's t, on the log scale when no value is negative (a figure that cannot go below zero: IOPS, MB/s,
    latency): log(mean) has the standard error CoV / sqrt(n) (delta method), so the interval is
    mean * exp(-+ t CoV / sqrt(n)). It never reaches zero, leans to the high side as the mean of a skewed
    positive figure does, and matches the symmetric t interval to first order when the CoV is small
    (within 0.1% of the mean at CoV 5% over 5 repeats). Values of either sign keep the symmetric interval."""
    got = _relative_half_width(values, level)
    if got is None:
        return None
    m, _, half = got
    return m, *_bounds(m, half, min(values) >= 0)


def _bounds(m: float, half: float, nonnegative: bool) -> tuple[float, float]:
    """The interval of mean ``m`` whose Student half width is ``half``: on the log scale for a non-negative figure."""
    if m > 0 and nonnegative:
        return m * math.exp(-half / m), m * math.exp(half / m)
    return m - half, m + half


def summarize(values: Iterable[float], source: str = "values") -> Summary:
    """Summarise repeated measurements (see :class:`Summary`). Raises :class:`InputError` for an
    empty input or a NaN/infinite value, since either would make every figure meaningless."""
    xs = check_values(values, source)
    n = len(xs)
    mean = math.fsum(xs) / n
    ordered = sorted(xs)
    mid = n // 2
    median = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
    if n == 1:
        return Summary(1, mean, median, None, None, None, None, SINGLE_RUN_NOTE)
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in xs) / (n - 1))
    cov = stdev / abs(mean) * 100.0 if mean != 0 else None
    half = t_ppf(0.975, n - 1) * stdev / math.sqrt(n)
    if mean != 0 and half / abs(mean) > NOISY_HALF_WIDTH:
        return Summary(n, mean, median, stdev, None, None, cov, too_noisy_note(cov, n), too_noisy=True)
    low, high = _bounds(mean, half, ordered[0] >= 0)
    return Summary(n, mean, median, stdev, low, high, cov)


def too_noisy_note(cov_pct: float | None, n: int) -> str:
    return f"too noisy: CoV {cov_pct or 0:.0f}% over {n} repeats"
