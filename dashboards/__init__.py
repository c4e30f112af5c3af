"""Grafana dashboards of the lab, generated from code (:mod:`dashboards.generate`) and committed as JSON."""
