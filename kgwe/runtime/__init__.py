"""The controller runtime both controllers stand on (docs/controllers.md): a typed cluster interface with a
real and an in-memory implementation, the one list+watch loop, a rate-limited work queue with per-key
backoff, the control loop that joins them under the leader gate, conditions and the status patcher."""
