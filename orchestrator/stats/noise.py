"""How much a history series can see: the last-point rule (orchestrator.stats.history) flags a run beyond
max(3 sd, 5% of the mean) of the history before it, so a history whose CoV is 23% cannot show a change under 69%
on the night it happens. :class:`Noise` says so beside every series a run is judged in."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Noise:
    """A series' run-to-run noise over its reference runs and the smallest one-run change it can tell from it."""

    cov_pct: float
    runs: int
    detectable_pct: float

    def line(self) -> str:
        return (f"at CoV {self.cov_pct:.1f}% over {self.runs} runs, a change under {self.detectable_pct:.0f}% "
                "in one run cannot be told from noise")


def detectable_pct(cov_pct: float, outlier_sd: float, threshold_pct: float) -> float:
    """The last-point rule's band in % of the mean: max(outlier_sd * CoV, threshold)."""
    return max(outlier_sd * cov_pct, threshold_pct)


def noise_of(values: Sequence[float], outlier_sd: float, threshold_pct: float) -> Noise | None:
    """The noise of reference ``values`` (None for fewer than 2, or a mean of 0)."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    if mean == 0:
        return None
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    cov = sd / abs(mean) * 100.0
    return Noise(cov, n, detectable_pct(cov, outlier_sd, threshold_pct))
