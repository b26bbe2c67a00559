"""Shared pytest plugins: the local cluster (kgwe.localcluster), the image and PostgreSQL harnesses."""

pytest_plugins: list[str] = [
    "tests.harness.pytest_postgres",
    "tests.harness.pytest_cluster",
    "tests.harness.pytest_image",
]
