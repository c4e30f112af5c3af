"""A network result keeps each path's series per second (reports draw it); net.json is untrusted input."""

from __future__ import annotations

import pytest

from orchestrator.runs.netgroups import per_second


def test_target_samples_at_10hz_are_summed_per_second() -> None:
    t0 = 1_700_000_000.0
    ten_hz = [[t0 + i / 10, t0 + (i + 1) / 10, 100.0, 0.0, 60.0, 40.0] for i in range(25)]
    out = per_second(ten_hz)
    assert [round(b[0] - t0, 6) for b in out] == [0.0, 1.0, 2.0]
    assert [b[2] for b in out] == [1000.0, 1000.0, 500.0]          # bytes summed, nothing lost
    assert sum(b[4] for b in out) == 25 * 60.0 and sum(b[5] for b in out) == 25 * 40.0
    assert out[0][1] == pytest.approx(t0 + 1.0) and out[-1][1] == pytest.approx(t0 + 2.5)


def test_initiator_seconds_pass_unchanged() -> None:
    secs = [[10.0, 11.0, 5e8, 3800.0], [11.0, 12.0, 6e8, 4600.0]]
    assert per_second(secs) == secs


@pytest.mark.parametrize("bad", [{"a": 1}, [[1.0, 2.0, "x", 0.0]], [[1.0, 2.0]], [[1.0, 2.0, float("nan"), 0.0]],
                                 [[True, 2.0, 3.0, 4.0]], [[1.0] * 7]])
def test_a_malformed_series_is_refused(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        per_second(bad)
