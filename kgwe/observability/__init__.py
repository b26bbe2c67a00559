"""Observability: fleet and workload gauges, the Grafana dashboards, the alert rules' home, tracing."""
