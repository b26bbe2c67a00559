"""Test-only helpers (pytest plugins, the chart and image harnesses, PostgreSQL, Flux); the local cluster
itself is a product feature in kgwe.localcluster."""
