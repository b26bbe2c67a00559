"""MIG partition planning: strategy + demand + current state -> per-GPU layouts (pure functions)."""
