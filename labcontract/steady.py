"""Steady-state detection for preconditioning (SNIA PTS Enterprise).

A device is preconditioned in rounds, numbered from 1, and one value is tracked per round
(for example the IOPS of the round). Over a window of the last ``window`` rounds (5 by
default) the device is in steady state when both hold:

* range: ``max - min`` of the window is at most ``max_range_pct`` (20%) of the window mean;
* excursion: the least-squares line through the window, evaluated at the window's last round
  minus at its first round -- ``|slope| * (window - 1)`` -- is at most ``max_excursion_pct``
  (10%) of the window mean.

Steady state is *reached at round N* where N is the last round of the first window
(rounds ``N - window + 1 .. N``) that satisfies both, so N >= window. "At most" means ``<=``:
a value exactly on a limit passes, and so does one that misses it only by binary floating-point
rounding (a relative tolerance of 1e-9).

A window whose mean is <= 0 (e.g. all zeros) is never steady: neither criterion can be judged
relative to such a mean, and its percentages are reported as ``inf``.

Everything here is pure (no I/O). :func:`detect` judges a whole series;
:class:`SteadyStateTracker` does the same one round at a time and always agrees with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

__all__ = [
    "SteadyCriteria",
    "SteadyStateTracker",
    "SteadyVerdict",
    "WindowCheck",
    "check_window",
    "detect",
    "fit_line",
]

# A percentage that misses its limit by no more than this relative amount still passes, so that
# e.g. values 0.9 and 1.1 around a mean of 1.0 (a 20.000000000000007% range in binary) pass 20%.
_REL_TOL = 1e-9


@dataclass(frozen=True)
class SteadyCriteria:
    """Window length (rounds) and the two limits, in percent of the window mean."""

    window: int = 5
    max_range_pct: float = 20.0
    max_excursion_pct: float = 10.0

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, int):
            raise ValueError(f"window must be a whole number of rounds, got {self.window!r}")
        if self.window < 2:
            raise ValueError(f"window must be at least 2 rounds, got {self.window}")
        for name in ("max_range_pct", "max_excursion_pct"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a finite percentage > 0, got {value!r}")


@dataclass(frozen=True)
class WindowCheck:
    """One window judged against the criteria.

    ``range`` is ``max - min``; ``slope`` is the least-squares slope per round; ``excursion`` is
    ``|slope| * (rounds in window - 1)``. The ``*_pct`` values are percentages of ``mean``
    (``inf`` when the mean is <= 0, in which case neither criterion passes).
    """

    first_round: int
    last_round: int
    mean: float
    range: float
    range_pct: float
    slope: float
    excursion: float
    excursion_pct: float
    range_ok: bool
    excursion_ok: bool
    values: tuple[float, ...] = field(default=(), repr=False)

    @property
    def steady(self) -> bool:
        return self.range_ok and self.excursion_ok


@dataclass(frozen=True)
class SteadyVerdict:
    """The outcome after ``rounds`` rounds.

    ``round`` is the round at which steady state was reached (``None`` if not reached).
    ``last_window`` is the window that decided the verdict: the first steady window when steady,
    otherwise the last full window (``None`` when there are fewer rounds than the window).
    ``reason`` is a one-line explanation for people.
    """

    steady: bool
    round: int | None
    rounds: int
    criteria: SteadyCriteria
    last_window: WindowCheck | None
    reason: str


def _check_finite(values: Sequence[float], first_round: int) -> None:
    for i, v in enumerate(values):
        if not math.isfinite(v):
            raise ValueError(f"round {first_round + i}: value {v!r} is not a finite number")


def fit_line(values: Sequence[float]) -> tuple[float, float]:
    """Least-squares line through ``(i, values[i])`` for ``i = 0, 1, ...``: ``(slope, intercept)``.

    ``intercept`` is the fitted value at the first point; ``slope`` is per point (per round).
    Needs at least 2 values.
    """
    n = len(values)
    if n < 2:
        raise ValueError(f"a line needs at least 2 values, got {n}")
    x_mean = (n - 1) / 2
    y_mean = math.fsum(values) / n
    sxy = math.fsum((i - x_mean) * (y - y_mean) for i, y in enumerate(values))
    sxx = math.fsum((i - x_mean) ** 2 for i in range(n))
    slope = sxy / sxx
    return slope, y_mean - slope * x_mean


def _within(pct: float, limit: float) -> bool:
    return pct <= limit or math.isclose(pct, limit, rel_tol=_REL_TOL)


def check_window(values: Sequence[float], first_round: int, criteria: SteadyCriteria) -> WindowCheck:
    """Judge one window: ``values`` are rounds ``first_round .. first_round + window - 1``.

    Raises ValueError if ``values`` does not hold exactly ``criteria.window`` values, if
    ``first_round`` < 1, or if a value is NaN or infinite (naming its round).
    """
    if len(values) != criteria.window:
        raise ValueError(f"a window holds {criteria.window} values, got {len(values)}")
    if first_round < 1:
        raise ValueError(f"rounds are numbered from 1, got first_round={first_round}")
    _check_finite(values, first_round)
    vals = tuple(float(v) for v in values)
    n = len(vals)
    mean = math.fsum(vals) / n
    spread = max(vals) - min(vals)
    slope, _ = fit_line(vals)
    excursion = abs(slope) * (n - 1)
    if mean > 0:
        range_pct = 100.0 * spread / mean
        excursion_pct = 100.0 * excursion / mean
        range_ok = _within(range_pct, criteria.max_range_pct)
        excursion_ok = _within(excursion_pct, criteria.max_excursion_pct)
    else:
        range_pct = excursion_pct = math.inf
        range_ok = excursion_ok = False
    return WindowCheck(
        first_round=first_round,
        last_round=first_round + n - 1,
        mean=mean,
        range=spread,
        range_pct=range_pct,
        slope=slope,
        excursion=excursion,
        excursion_pct=excursion_pct,
        range_ok=range_ok,
        excursion_ok=excursion_ok,
        values=vals,
    )


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.4g}"


def _rounds(n: int) -> str:
    return f"{n} round{'' if n == 1 else 's'}"


def _describe(check: WindowCheck, criteria: SteadyCriteria) -> str:
    """``window 3-7 range 8.1% ≤ 20%, excursion 3.2% ≤ 10% of mean 41,230`` (``>`` for a failure)."""
    head = f"window {check.first_round}-{check.last_round}"
    if check.mean <= 0:
        return f"{head} mean {_num(check.mean)} ≤ 0, so range and excursion cannot be judged relative to it"
    r_op = "≤" if check.range_ok else ">"
    e_op = "≤" if check.excursion_ok else ">"
    return (
        f"{head} range {check.range_pct:.1f}% {r_op} {criteria.max_range_pct:g}%, "
        f"excursion {check.excursion_pct:.1f}% {e_op} {criteria.max_excursion_pct:g}% of mean {_num(check.mean)}"
    )


def _steady_verdict(check: WindowCheck, rounds: int, criteria: SteadyCriteria) -> SteadyVerdict:
    return SteadyVerdict(
        steady=True,
        round=check.last_round,
        rounds=rounds,
        criteria=criteria,
        last_window=check,
        reason=f"steady at round {check.last_round}: {_describe(check, criteria)}",
    )


def _not_steady_verdict(check: WindowCheck | None, rounds: int, criteria: SteadyCriteria) -> SteadyVerdict:
    why = f"a window needs {_rounds(criteria.window)}" if check is None else f"last {_describe(check, criteria)}"
    return SteadyVerdict(
        steady=False,
        round=None,
        rounds=rounds,
        criteria=criteria,
        last_window=check,
        reason=f"not steady after {_rounds(rounds)}: {why}",
    )


def detect(values: Sequence[float], criteria: SteadyCriteria = SteadyCriteria()) -> SteadyVerdict:
    """Judge a whole series (``values[0]`` is round 1), scanning windows from the earliest.

    Returns the first steady window's verdict, or a not-steady verdict describing the last full
    window. Fewer values than the window is not steady. Raises ValueError naming the round of
    the first NaN or infinite value.
    """
    _check_finite(values, 1)
    n = len(values)
    w = criteria.window
    check: WindowCheck | None = None
    for start in range(n - w + 1):
        check = check_window(values[start : start + w], start + 1, criteria)
        if check.steady:
            return _steady_verdict(check, n, criteria)
    return _not_steady_verdict(check, n, criteria)


class SteadyStateTracker:
    """Incremental :func:`detect` for the controller: call :meth:`add` after each round.

    Each :meth:`add` returns the same verdict :func:`detect` would give for all values so far.
    Once steady, the verdict keeps its round (later rounds only raise ``rounds``).
    """

    def __init__(self, criteria: SteadyCriteria = SteadyCriteria()) -> None:
        self.criteria = criteria
        self._values: list[float] = []
        self._verdict = _not_steady_verdict(None, 0, criteria)

    @property
    def values(self) -> tuple[float, ...]:
        """The values added so far; index 0 is round 1."""
        return tuple(self._values)

    @property
    def verdict(self) -> SteadyVerdict:
        """The verdict after the rounds added so far."""
        return self._verdict

    @property
    def rounds(self) -> int:
        return len(self._values)

    def add(self, value: float) -> SteadyVerdict:
        """Record the next round's value and return the verdict so far.

        Raises ValueError (naming the round) for NaN or infinite values; such a value is not added.
        """
        round_no = len(self._values) + 1
        _check_finite([value], round_no)
        self._values.append(float(value))
        w = self.criteria.window
        if self._verdict.steady:
            self._verdict = replace(self._verdict, rounds=round_no)
        elif round_no < w:
            self._verdict = _not_steady_verdict(None, round_no, self.criteria)
        else:
            check = check_window(self._values[-w:], round_no - w + 1, self.criteria)
            if check.steady:
                self._verdict = _steady_verdict(check, round_no, self.criteria)
            else:
                self._verdict = _not_steady_verdict(check, round_no, self.criteria)
        return self._verdict

    def done(self, max_rounds: int) -> bool:
        """True when preconditioning can stop: steady, or ``max_rounds`` rounds have run."""
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {max_rounds}")
        return self._verdict.steady or len(self._values) >= max_rounds
