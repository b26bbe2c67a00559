"""The controller: Git revision → desired state → diff → safe MIG rollout → status. The decision parts
(rollout, status conditions) are pure functions; the loop wires them to kgwe.gitops and kgwe.cluster."""
