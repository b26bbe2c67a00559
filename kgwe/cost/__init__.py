"""Cost engine: metering GPU holders into usage intervals, exact pricing and chargeback, budgets and
forecasts, rightsizing from DCGM utilization, reports and metrics.

The arithmetic (usage, pricing, allocate, chargeback, budgets, forecast, rightsizing) is pure: plain
dataclasses in, plain dataclasses out. The store, the watch loop, Prometheus and Git are thin edges.
"""
