"""Statistics of repeated runs and of run histories (issue 16): summaries with confidence
intervals, significance of a difference, and change points over time. Pure Python and numpy;
see docs/statistics.md for what is computed and why."""

from orchestrator.stats.changepoints import ChangePoint, HistoryTooShort, detect_changes, min_points
from orchestrator.stats.significance import Verdict, judge, mann_whitney, test_for, welch
from orchestrator.stats.summary import Summary, summarize, t_ppf

__all__ = [
    "ChangePoint",
    "HistoryTooShort",
    "Summary",
    "Verdict",
    "detect_changes",
    "judge",
    "mann_whitney",
    "min_points",
    "summarize",
    "t_ppf",
    "test_for",
    "welch",
]
