"""Hardware facts as data: GPU models, MIG profiles and their placements."""
