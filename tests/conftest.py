"""Shared pytest plugins: the local cluster (kgwe.localcluster), the image and PostgreSQL harnesses."""

import os

# The tests' Git servers listen on loopback, which the controller refuses unless its operator allows it
# (--allow-git-network, or this variable): the operator's allowance, for every test and the processes they
# start. Tests of the refusal itself set their own (tests/security/test_git_targets.py).
os.environ.setdefault("KGWE_ALLOW_GIT_NETWORKS", "127.0.0.0/8,::1/128")

pytest_plugins: list[str] = [
    "tests.harness.pytest_postgres",
    "tests.harness.pytest_cluster",
    "tests.harness.pytest_image",
]
