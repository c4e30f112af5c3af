"""Tests for labcontract.steady (SNIA PTS steady-state detection) and orchestrator.analysis.

Expectations are computed by hand in the comments. With a window of 5 the least-squares slope
is ``sum(x * y) / 10`` for centred round offsets ``x = -2, -1, 0, 1, 2`` (sum of x^2 = 10), and
the excursion is ``|slope| * 4``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from labcontract.errors import InputError, Problem
from labcontract.steady import (
    SteadyCriteria,
    SteadyStateTracker,
    SteadyVerdict,
    WindowCheck,
    check_window,
    detect,
    fit_line,
)
from orchestrator.analysis import analyze_steady_state, read_series_csv

C = SteadyCriteria()

# FOB burst of 100k IOPS decaying to about 40k.
BURST = [100_000, 80_000, 60_000, 45_000, 41_000, 40_200, 39_800, 40_100, 39_900, 40_000, 40_050]


# ---------------------------------------------------------------- criteria


def test_criteria_defaults() -> None:
    assert (C.window, C.max_range_pct, C.max_excursion_pct) == (5, 20.0, 10.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window": 1},
        {"window": 0},
        {"window": -5},
        {"window": 2.5},
        {"window": True},
        {"max_range_pct": 0},
        {"max_range_pct": -20},
        {"max_excursion_pct": 0.0},
        {"max_excursion_pct": math.nan},
        {"max_range_pct": math.inf},
    ],
)
def test_criteria_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SteadyCriteria(**kwargs)  # type: ignore[arg-type]


def test_criteria_smallest_window_is_2() -> None:
    assert SteadyCriteria(window=2).window == 2


# ---------------------------------------------------------------- least squares


def test_fit_line_hand_computed() -> None:
    # x = 0..3, x_mean = 1.5, y_mean = 11/4 = 2.75; centred x = -1.5, -0.5, 0.5, 1.5
    # Sxy = -1.5*1 - 0.5*3 + 0.5*2 + 1.5*5 = 5.5; Sxx = 2.25 + 0.25 + 0.25 + 2.25 = 5
    # slope = 1.1; intercept = 2.75 - 1.1 * 1.5 = 1.1
    slope, intercept = fit_line([1, 3, 2, 5])
    assert slope == pytest.approx(1.1)
    assert intercept == pytest.approx(1.1)


def test_fit_line_exact_line_and_flat() -> None:
    assert fit_line([7, 5, 3, 1]) == (-2.0, 7.0)
    assert fit_line([4, 4, 4]) == (0.0, 4.0)
    with pytest.raises(ValueError):
        fit_line([1.0])


def test_check_window_hand_computed() -> None:
    crit = SteadyCriteria(window=4)
    check = check_window([1, 3, 2, 5], 3, crit)
    assert (check.first_round, check.last_round) == (3, 6)
    assert check.mean == 2.75
    assert check.range == 4.0
    assert check.range_pct == pytest.approx(400 / 2.75)  # 145.45%
    assert check.slope == pytest.approx(1.1)
    assert check.excursion == pytest.approx(3.3)  # 1.1 * (4 - 1)
    assert check.excursion_pct == pytest.approx(120.0)  # 3.3 / 2.75
    assert not check.range_ok and not check.excursion_ok and not check.steady
    assert check.values == (1.0, 3.0, 2.0, 5.0)


def test_check_window_round_4_to_8_of_burst_fails_only_excursion() -> None:
    # [45000, 41000, 40200, 39800, 40100]: mean 206100/5 = 41220, range 5200 -> 12.615%
    # sum(x*y) = -90000 - 41000 + 0 + 39800 + 80200 = -11000 -> slope -1100, excursion 4400
    # 4400 / 41220 = 10.674% > 10%
    check = check_window(BURST[3:8], 4, C)
    assert (check.first_round, check.last_round) == (4, 8)
    assert check.mean == 41_220
    assert check.range == 5_200
    assert check.range_pct == pytest.approx(100 * 5200 / 41220)
    assert check.slope == pytest.approx(-1100)
    assert check.excursion == pytest.approx(4400)
    assert check.excursion_pct == pytest.approx(100 * 4400 / 41220)
    assert check.range_ok is True
    assert check.excursion_ok is False
    assert check.steady is False


def test_check_window_validates() -> None:
    with pytest.raises(ValueError, match="holds 5 values, got 4"):
        check_window([1, 2, 3, 4], 1, C)
    with pytest.raises(ValueError, match="numbered from 1"):
        check_window([1, 2, 3, 4, 5], 0, C)
    with pytest.raises(ValueError, match="round 12"):
        check_window([1, 2, math.inf, 4, 5], 10, C)


# ---------------------------------------------------------------- detect: reaching steady state


def test_burst_then_flat_is_steady_at_round_9() -> None:
    # windows 1-5 .. 3-7 fail the range (>= 44%), 4-8 fails only the excursion (above).
    # 5-9: [41000, 40200, 39800, 40100, 39900]: mean 201000/5 = 40200, range 1200 -> 2.985%
    # sum(x*y) = -82000 - 40200 + 0 + 40100 + 79800 = -2300 -> slope -230, excursion 920 -> 2.289%
    v = detect(BURST)
    assert v.steady is True
    assert v.round == 9
    assert v.rounds == len(BURST) == 11
    assert v.criteria == C
    w = v.last_window
    assert w is not None
    assert (w.first_round, w.last_round) == (5, 9)
    assert w.mean == 40_200
    assert w.range == 1_200
    assert w.slope == pytest.approx(-230)
    assert w.excursion == pytest.approx(920)
    assert w.steady
    assert v.reason == "steady at round 9: window 5-9 range 3.0% ≤ 20%, excursion 2.3% ≤ 10% of mean 40,200"


def test_steady_round_does_not_move_with_later_rounds() -> None:
    assert detect(BURST[:9]).round == 9
    assert detect(BURST[:8]).steady is False
    assert detect([*BURST, 10_000, 90_000]).round == 9  # later chaos does not undo the first window


def test_noisy_but_flat_is_steady_at_round_5() -> None:
    # +-8% around 1000: [1080, 920, 1000, 1080, 920]: mean 1000, range 160 -> 16%
    # sum(x*y) = -2160 - 920 + 0 + 1080 + 1840 = -160 -> slope -16, excursion 64 -> 6.4%
    series = [1080, 920, 1000, 1080, 920, 1000, 1080, 920]
    v = detect(series)
    assert v.steady and v.round == 5 and v.rounds == 8
    assert v.last_window is not None
    assert v.last_window.range_pct == pytest.approx(16.0)
    assert v.last_window.slope == pytest.approx(-16.0)
    assert v.last_window.excursion_pct == pytest.approx(6.4)
    assert v.reason == "steady at round 5: window 1-5 range 16.0% ≤ 20%, excursion 6.4% ≤ 10% of mean 1,000"


def test_window_of_zeros_is_skipped_until_a_positive_window() -> None:
    # windows 2-6 .. 5-9 contain both 0 and 100 (range >= 125% of the mean); 6-10 is flat at 100
    series = [0, 0, 0, 0, 0, 100, 100, 100, 100, 100]
    v = detect(series)
    assert v.steady and v.round == 10
    assert v.last_window is not None and v.last_window.range == 0 and v.last_window.slope == 0


def test_custom_criteria() -> None:
    # window 3, 30%/15%: [100, 80, 90]: mean 90, range 20 -> 22.2%; slope (90 - 100)/2 = -5,
    # excursion 10 -> 11.1%. Steady at round 3 with these limits, not with the defaults' 20/10.
    crit = SteadyCriteria(window=3, max_range_pct=30, max_excursion_pct=15)
    v = detect([100, 80, 90], crit)
    assert v.steady and v.round == 3 and v.criteria is crit
    assert v.reason == "steady at round 3: window 1-3 range 22.2% ≤ 30%, excursion 11.1% ≤ 15% of mean 90"
    assert not detect([100, 80, 90], SteadyCriteria(window=3)).steady


# ---------------------------------------------------------------- detect: never steady


def test_monotonic_drift_down_5_percent_per_round_never_steady() -> None:
    # any 5 consecutive rounds are a * (1, .95, .9025, .857375, .81450625): mean .90487625 a,
    # range .18549375 a -> 20.50% > 20%; the slope is about -0.0464 a -> excursion about 20.5%
    series = [100_000 * 0.95**i for i in range(20)]
    v = detect(series)
    assert v.steady is False and v.round is None and v.rounds == 20
    w = v.last_window
    assert w is not None and (w.first_round, w.last_round) == (16, 20)
    assert w.range_pct == pytest.approx(100 * 0.18549375 / 0.90487625)
    assert not w.range_ok and not w.excursion_ok
    assert w.excursion_pct > 20
    assert v.reason.startswith("not steady after 20 rounds: last window 16-20 range 20.5% > 20%, excursion ")


def test_wild_oscillation_never_steady_though_slope_is_zero() -> None:
    # [100, 50, 100, 50, 100]: sum(x*y) = -200 - 50 + 0 + 50 + 200 = 0 -> slope 0;
    # range 50 over mean 80 = 62.5% (or over mean 70 = 71.4% for windows starting at 50)
    series = [100, 50] * 6
    v = detect(series)
    assert not v.steady and v.round is None and v.rounds == 12
    w = v.last_window
    assert w is not None and (w.first_round, w.last_round) == (8, 12)
    # rounds 8..12 are 50, 100, 50, 100, 50: mean 70; sum(x*y) = -100 - 100 + 0 + 100 + 100 = 0
    assert w.mean == 70
    assert w.slope == 0
    assert w.range_ok is False and w.excursion_ok is True
    assert v.reason == "not steady after 12 rounds: last window 8-12 range 71.4% > 20%, excursion 0.0% ≤ 10% of mean 70"
    for start in range(len(series) - 4):
        assert not check_window(series[start : start + 5], start + 1, C).range_ok


def test_slow_drift_within_range_but_excursion_too_large() -> None:
    # 3% of the mean per round: [106, 103, 100, 97, 94]: mean 100, range 12 -> 12% (ok)
    # slope -3 exactly, excursion 12 -> 12% > 10%
    v = detect([106, 103, 100, 97, 94])
    assert not v.steady
    w = v.last_window
    assert w is not None
    assert w.mean == 100 and w.range == 12 and w.slope == -3 and w.excursion == 12
    assert w.range_ok and not w.excursion_ok
    assert v.reason == "not steady after 5 rounds: last window 1-5 range 12.0% ≤ 20%, excursion 12.0% > 10% of mean 100"
    # drifting on only gets worse relative to a falling mean
    longer = detect([106 - 3 * i for i in range(15)])
    assert not longer.steady and longer.rounds == 15


# ---------------------------------------------------------------- boundaries (<= passes)


def test_range_exactly_20_percent_passes() -> None:
    # [90, 110, 100, 100, 100]: mean 100, range 20 -> 20.0%; sum(x*y) = -180-110+0+100+200 = 10
    # -> slope 1, excursion 4%
    v = detect([90, 110, 100, 100, 100])
    assert v.last_window is not None and v.last_window.range_pct == 20.0
    assert v.steady and v.round == 5


def test_range_just_over_20_percent_fails() -> None:
    # [900, 1101, 1000, 1000, 999]: mean 1000, range 201 -> 20.1%; sum(x*y) = -1800-1101+1000+1998 = 97
    # -> slope 9.7, excursion 38.8 -> 3.88%
    v = detect([900, 1101, 1000, 1000, 999])
    w = v.last_window
    assert w is not None and w.range_pct == pytest.approx(20.1) and w.excursion_pct == pytest.approx(3.88)
    assert not w.range_ok and w.excursion_ok and not v.steady


def test_range_20_percent_with_binary_rounding_passes() -> None:
    # 1.1 - 0.9 is 0.20000000000000007 in binary; the 20% limit is still met
    v = detect([0.9, 1.1, 1.0, 1.0, 1.0])
    assert v.last_window is not None and v.last_window.range_pct > 20.0
    assert v.last_window.range_ok and v.steady


def test_excursion_exactly_10_percent_passes() -> None:
    # [190, 195, 200, 205, 210]: mean 200, range 20 -> 10%; slope 5, excursion 20 -> 10.0%
    v = detect([190, 195, 200, 205, 210])
    w = v.last_window
    assert w is not None and w.slope == 5.0 and w.excursion_pct == 10.0
    assert w.excursion_ok and v.steady and v.round == 5


def test_excursion_just_over_10_percent_fails() -> None:
    # [190, 195, 200, 205, 211]: mean 200.2; sum(x*y) = -380-195+0+205+422 = 52 -> slope 5.2,
    # excursion 20.8 -> 20.8/200.2 = 10.39%
    v = detect([190, 195, 200, 205, 211])
    w = v.last_window
    assert w is not None and w.excursion_pct == pytest.approx(100 * 20.8 / 200.2)
    assert w.range_ok and not w.excursion_ok and not v.steady


# ---------------------------------------------------------------- detect: degenerate input


@pytest.mark.parametrize("n", [0, 1, 4])
def test_fewer_values_than_window(n: int) -> None:
    v = detect([100.0] * n)
    assert v == SteadyVerdict(
        steady=False,
        round=None,
        rounds=n,
        criteria=C,
        last_window=None,
        reason=f"not steady after {n} round{'' if n == 1 else 's'}: a window needs 5 rounds",
    )


def test_all_zeros_cannot_be_judged() -> None:
    v = detect([0, 0, 0, 0, 0, 0])
    assert not v.steady and v.round is None
    w = v.last_window
    assert w is not None and (w.first_round, w.last_round) == (2, 6)
    assert w.mean == 0 and w.range_pct == math.inf and w.excursion_pct == math.inf
    assert not w.range_ok and not w.excursion_ok
    assert v.reason == (
        "not steady after 6 rounds: last window 2-6 mean 0 ≤ 0, so range and excursion cannot be judged relative to it"
    )


def test_negative_mean_cannot_be_judged() -> None:
    assert not detect([-5, -5, -5, -5, -5]).steady


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_value_names_the_round(bad: float) -> None:
    with pytest.raises(ValueError, match=r"^round 3: value .* is not a finite number"):
        detect([100, 100, bad, 100, 100, 100])
    # even before the first full window
    with pytest.raises(ValueError, match=r"^round 2:"):
        detect([100, bad])


# ---------------------------------------------------------------- tracker


@pytest.mark.parametrize(
    "series",
    [
        BURST,
        [1080, 920, 1000, 1080, 920, 1000],
        [100_000 * 0.95**i for i in range(12)],
        [100, 50] * 5,
        [0, 0, 0, 0, 0, 100, 100, 100, 100, 100, 7],
        [1.0, 2.0],
    ],
)
def test_tracker_matches_detect_after_every_round(series: list[float]) -> None:
    tracker = SteadyStateTracker()
    assert tracker.verdict == detect([])
    for i, value in enumerate(series, start=1):
        verdict = tracker.add(value)
        assert verdict == detect(series[:i])
        assert tracker.verdict == verdict
        assert tracker.values == tuple(float(x) for x in series[:i])
        assert tracker.rounds == i


def test_tracker_done() -> None:
    tracker = SteadyStateTracker()
    assert not tracker.done(max_rounds=3)
    for value in BURST[:8]:
        tracker.add(value)
    assert not tracker.done(max_rounds=20)
    assert tracker.done(max_rounds=8)  # out of rounds, not steady
    assert tracker.add(BURST[8]).round == 9
    assert tracker.done(max_rounds=20)  # steady
    assert tracker.add(BURST[9]).rounds == 10 and tracker.verdict.round == 9
    with pytest.raises(ValueError):
        tracker.done(max_rounds=0)


def test_tracker_custom_criteria_and_rejects_nan_without_adding() -> None:
    crit = SteadyCriteria(window=3, max_range_pct=30, max_excursion_pct=15)
    tracker = SteadyStateTracker(crit)
    tracker.add(100)
    with pytest.raises(ValueError, match=r"^round 2:"):
        tracker.add(math.nan)
    assert tracker.values == (100.0,)
    tracker.add(80)
    v = tracker.add(90)
    assert v.steady and v.round == 3 and v.criteria is crit


# ---------------------------------------------------------------- CSV


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "series.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_read_plain_values(tmp_path: Path) -> None:
    assert read_series_csv(_write(tmp_path, "1\n2.5\n-3\n1e3\n")) == [1.0, 2.5, -3.0, 1000.0]


def test_read_with_header_and_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, "\niops\n41230\n\n  40100  \n\n39900\n")
    assert read_series_csv(path) == [41230.0, 40100.0, 39900.0]


def test_read_two_columns_takes_last_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "round,iops\n1,100000\n2, 80000\n3,60000.5\n")
    assert read_series_csv(path) == [100000.0, 80000.0, 60000.5]


def test_read_quoted_csv_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes('\ufeff"round","iops"\r\n"1","500"\r\n"2","510"\r\n'.encode())
    assert read_series_csv(path) == [500.0, 510.0]


def test_read_first_line_numeric_is_data(tmp_path: Path) -> None:
    assert read_series_csv(_write(tmp_path, "5\n6\n")) == [5.0, 6.0]


def test_read_reports_every_bad_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "round,iops\n1,100\n2,abc\n\n3,\nfoo\n4,nan\n5,200\n6,inf\n")
    with pytest.raises(InputError) as info:
        read_series_csv(path)
    err = info.value
    assert err.source == str(path)
    assert err.problems == [
        Problem("line 3", "not a number: '2,abc'"),
        Problem("line 5", "not a number: '3,'"),
        Problem("line 6", "not a number: 'foo'"),
        Problem("line 7", "not a finite number: '4,nan'"),
        Problem("line 9", "not a finite number: '6,inf'"),
    ]
    assert err.summary == f"{path}: 5 problems in input"
    assert f"{path}: line 3: not a number: '2,abc'" in str(err)


def test_read_only_first_line_can_be_header(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        read_series_csv(_write(tmp_path, "iops\nunits\n1\n"))
    assert info.value.problems == [Problem("line 2", "not a number: 'units'")]


def test_read_nan_first_line_is_not_a_header(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        read_series_csv(_write(tmp_path, "NaN\n1\n"))
    assert info.value.problems == [Problem("line 1", "not a finite number: 'NaN'")]


@pytest.mark.parametrize("text", ["", "\n\n", "round,iops\n", "iops\n\n"])
def test_read_empty_series_is_an_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(InputError) as info:
        read_series_csv(_write(tmp_path, text))
    assert len(info.value.problems) == 1
    assert "no values" in info.value.problems[0].message


def test_read_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read file"):
        read_series_csv(tmp_path / "absent.csv")


# ---------------------------------------------------------------- analyze_steady_state


def test_analyze_steady(tmp_path: Path) -> None:
    path = _write(tmp_path, "round,iops\n" + "".join(f"{i},{v}\n" for i, v in enumerate(BURST, start=1)))
    line, verdict = analyze_steady_state(path, C)
    assert line == "steady at round 9"
    assert verdict == detect(BURST)


def test_analyze_not_steady(tmp_path: Path) -> None:
    path = _write(tmp_path, "106\n103\n100\n97\n94\n")
    line, verdict = analyze_steady_state(path, C)
    assert line == "not steady"
    assert verdict.rounds == 5 and not verdict.steady
    assert verdict.reason.startswith("not steady after 5 rounds: last window 1-5")


def test_analyze_with_looser_criteria(tmp_path: Path) -> None:
    # the slow drift above (excursion 12%) passes a 15% excursion limit
    path = _write(tmp_path, "106\n103\n100\n97\n94\n")
    line, _ = analyze_steady_state(path, SteadyCriteria(max_excursion_pct=15))
    assert line == "steady at round 5"


def test_window_check_is_hashable_and_frozen() -> None:
    check = check_window([1, 1, 1, 1, 1], 1, C)
    assert isinstance(check, WindowCheck) and check.steady
    assert hash(check) == hash(check_window([1, 1, 1, 1, 1], 1, C))
    with pytest.raises(AttributeError):
        check.mean = 2.0  # type: ignore[misc]
