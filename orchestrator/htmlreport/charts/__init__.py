"""The built-in chart kinds: importing a module registers its kind (orchestrator.htmlreport.model.register).
A new chart is one module here plus its line below; :func:`chart_kinds` gives them in report order (the model
never imports this package: the kinds depend on the model, not the other way round)."""

from orchestrator.htmlreport.charts import (  # noqa: F401
    against,
    apps,
    bars,
    groups,
    heatmap,
    latency,
    loadcurve,
    network,
    power,
    precondition,
    pts,
    repeats,
    scaling,
    significance,
    thermal,
    wsat,
)
from orchestrator.htmlreport.model import CHART_KINDS, ChartKind


def chart_kinds() -> list[ChartKind]:
    """Every registered chart kind, in the order of the report."""
    return sorted(CHART_KINDS.values(), key=lambda k: (k.order, k.name))
