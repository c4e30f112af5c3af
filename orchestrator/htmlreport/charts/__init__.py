"""The built-in chart kinds: importing a module registers its kind (orchestrator.htmlreport.model.register).
A new chart is one module here plus its line below."""

from orchestrator.htmlreport.charts import (  # noqa: F401
    against,
    apps,
    bars,
    groups,
    heatmap,
    latency,
    network,
    precondition,
    repeats,
    scaling,
    significance,
)
