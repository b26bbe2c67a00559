"""A Kubernetes call of the controller cannot hang longer than its deadline (shorter than the lease
margin): against a loopback server that accepts and never answers, the call fails in about that time."""

from __future__ import annotations

import socket
import time

import pytest
from kubernetes import client

from kgwe.cluster.client import DeadlineApiClient


def test_calls_without_their_own_timeout_get_the_deadline() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        configuration = client.Configuration(host=f"http://127.0.0.1:{silent.getsockname()[1]}")
        api = DeadlineApiClient(configuration)
        api.request_timeout_s = 1.0
        started = time.monotonic()
        with pytest.raises(Exception) as err:  # urllib3 wraps the socket timeout
            client.CoreV1Api(api).list_node()
        assert "timed out" in str(err.value).lower() or "timeout" in type(err.value).__name__.lower()
        assert time.monotonic() - started < 30  # not the forever of a client without a deadline
