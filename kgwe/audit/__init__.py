"""The audit trail: which policy commit, by whom, caused each cluster write KGWE makes (docs/audit.md).
Pure: the annotations a write carries (stamp) and the monthly log the leader commits (log)."""
