"""The write saturation chart's points (orchestrator.htmlreport.charts.wsat): a step's series in at most 360 spans,
IOPS time-weighted over each span, the bytes written summed to its end; which cells it draws."""

from __future__ import annotations

import itertools

import pytest

from orchestrator.htmlreport.charts.wsat import MAX_POINTS, points, random_write_only
from orchestrator.store.models import Step


def series(n: int, dt: float, iops: float) -> dict[str, list[float]]:
    return {"t": [dt * (i + 1) for i in range(n)], "iops": [iops] * n, "write_iops": [iops] * n}


def test_a_short_series_is_drawn_point_by_point_with_its_bytes() -> None:
    pts = points(series(8, 1.0, 1000.0), 4096)
    assert [p.seconds for p in pts] == [1.0 * (i + 1) for i in range(8)]
    assert all(p.iops == 1000.0 for p in pts)
    assert pts[-1].tgbw == pytest.approx(8 * 1000 * 4096 / 1e9)


def test_six_hours_at_22_seconds_fit_in_360_points_with_the_time_weighted_mean() -> None:
    n = 6 * 3600 // 22
    s = series(n, 22.0, 0.0)
    s["iops"] = [100_000.0 if i < n // 2 else 20_000.0 for i in range(n)]     # the write cliff at half time
    s["write_iops"] = list(s["iops"])
    pts = points(s, 4096)
    assert len(pts) <= MAX_POINTS and pts[-1].seconds == s["t"][-1]
    assert pts[0].iops == 100_000.0 and pts[-1].iops == 20_000.0
    total = sum(v * 22.0 for v in s["write_iops"]) * 4096 / 1e9
    assert pts[-1].tgbw == pytest.approx(total)
    assert all(a.tgbw < b.tgbw for a, b in itertools.pairwise(pts))


def test_an_uneven_first_interval_weighs_by_its_length() -> None:
    pts = points({"t": [0.5, 1.5], "iops": [10.0, 20.0], "write_iops": [10.0, 20.0]}, 512)
    assert [p.iops for p in pts] == [10.0, 20.0]
    assert pts[-1].tgbw == pytest.approx((10 * 0.5 + 20 * 1.0) * 512 / 1e9)


def test_nothing_to_draw_from_a_missing_or_one_sample_series() -> None:
    assert points(None, 4096) == [] and points({"t": [1.0], "iops": [5.0], "write_iops": [5.0]}, 4096) == []
    assert points({"t": [1.0, 2.0], "iops": [None, 3.0], "write_iops": [None, 3.0]}, 4096)[0].iops == 0.0


@pytest.mark.parametrize(("workload", "drawn"), [
    ({"rw": "randwrite"}, True), ({"rw": "randrw", "rwmixread": 0}, True), ({"rw": "randrw", "rwmixread": 30}, False),
    ({"rw": "write"}, False), ({"rw": "randread"}, False), (None, False),
])
def test_only_random_writes_are_write_saturation_cells(workload: dict[str, object] | None, drawn: bool) -> None:
    assert random_write_only(Step(kind="measure", workload=workload, cell={})) is drawn
