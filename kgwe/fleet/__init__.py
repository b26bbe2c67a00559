"""Operator fleet views (`kgwe status`, `nodes`, `workloads`, `health`, `watch`, `submit`, `template`,
`strategy`): the pure part — rows from the objects the API returns, and their table/JSON/YAML rendering —
lives in this package's plain modules; the cluster reads and writes in `cluster.py` and the `*_cmd.py`
modules."""
