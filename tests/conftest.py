"""Shared pytest plugins. Each area's fixtures live in kgwe/testing so the demo and benchmarks reuse them."""

pytest_plugins: list[str] = [
    "kgwe.testing.pytest_postgres",
    "kgwe.testing.pytest_cluster",
    "kgwe.testing.pytest_image",
]
