"""kgwe.runtime.watch.list_and_watch against the real API server: it lists, follows every change, resumes
after the server ends a watch, and lists again after an expiry (410 Gone) or a broken connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.runtime.watch import list_and_watch

pytestmark = pytest.mark.cluster


class Seen:
    """What the loop handed over: the names of the last listing, every event, every restart."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.listed: list[set[str]] = []
        self.events: list[tuple[str, str]] = []
        self.restarts: list[BaseException | None] = []
        self.watch_ends = 0
        self.changed = threading.Condition(self.lock)

    def on_list(self, items: Any) -> None:
        with self.changed:
            self.listed.append({_name(i) for i in items})
            self.changed.notify_all()

    def on_event(self, kind: str, obj: Any) -> None:
        with self.changed:
            self.events.append((kind, _name(obj)))
            self.changed.notify_all()

    def on_watch_end(self) -> None:
        with self.changed:
            self.watch_ends += 1
            self.changed.notify_all()

    def on_restart(self, error: BaseException | None) -> None:
        with self.changed:
            self.restarts.append(error)
            self.changed.notify_all()

    def wait(self, predicate: Callable[[], bool], what: str) -> None:
        with self.changed:
            if not self.changed.wait_for(predicate, timeout=60):
                pytest.fail(f"timed out waiting for {what}: {self.listed} {self.events} {self.restarts}")


def _name(obj: Any) -> str:
    return obj["metadata"]["name"] if isinstance(obj, dict) else obj.metadata.name


def _config_map(core: client.CoreV1Api, namespace: str, name: str) -> None:
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name)))


@pytest.fixture
def run_loop(k8s_api: client.ApiClient) -> Iterator[Callable[..., Seen]]:
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(list_fn: Callable[..., Any], **kwargs: Any) -> Seen:
        seen = Seen()
        thread = threading.Thread(
            target=list_and_watch,
            args=(list_fn,),
            kwargs={
                "on_list": seen.on_list,
                "on_event": seen.on_event,
                "on_restart": seen.on_restart,
                "on_watch_end": seen.on_watch_end,
                "stop": stop,
                "watch_timeout_seconds": 2,
                **kwargs,
            },
            daemon=True,
        )
        thread.start()
        threads.append(thread)
        return seen

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "list_and_watch did not return after stop"


@pytest.mark.parametrize("raw", [True, False])
def test_lists_then_follows_every_change(k8s_api, namespace, run_loop, raw):
    core = client.CoreV1Api(k8s_api)
    _config_map(core, namespace, "before")
    seen = run_loop(core.list_namespaced_config_map, namespace=namespace, raw=raw)
    seen.wait(lambda: bool(seen.listed) and "before" in seen.listed[0], "the first listing")
    _config_map(core, namespace, "after")
    core.delete_namespaced_config_map("before", namespace)
    seen.wait(lambda: ("DELETED", "before") in seen.events, "the delete")
    assert ("ADDED", "after") in seen.events
    ended = seen.watch_ends
    seen.wait(lambda: seen.watch_ends > ended, "the server to end a watch (2 s timeout)")
    _config_map(core, namespace, "later")  # the loop resumed it
    seen.wait(lambda: ("ADDED", "later") in seen.events, "the change after the resumed watch")
    assert len(seen.listed) == 1 and seen.restarts == []  # resumed from the last version, not relisted


@pytest.mark.parametrize(
    "failure",
    [
        # what the API server answers once the version a watch resumes from has been compacted away (the
        # test cannot wait minutes for a real compaction, so that one answer is injected): list again at once
        ApiException(status=410, reason="Expired: too old resource version"),
        # a connection dropped under the watch: list again after a pause
        ConnectionResetError("connection reset by peer"),
    ],
    ids=["410-gone", "connection-reset"],
)
def test_a_broken_watch_lists_again(k8s_api, namespace, run_loop, failure):
    core = client.CoreV1Api(k8s_api)
    _config_map(core, namespace, "one")
    watches = {"n": 0}

    def failing_first_watch(**kwargs: Any) -> Any:
        if kwargs.get("watch"):
            watches["n"] += 1
            if watches["n"] == 1:
                raise failure
        return core.list_namespaced_config_map(**kwargs)

    seen = run_loop(failing_first_watch, namespace=namespace)
    seen.wait(lambda: len(seen.listed) >= 2, "a second listing")
    if isinstance(failure, ApiException):
        assert seen.restarts[0] is None  # an expiry, not a failure: no pause
    else:
        assert seen.restarts[0] is failure
    _config_map(core, namespace, "two")
    seen.wait(lambda: ("ADDED", "two") in seen.events, "an event after the relist")
    assert seen.listed[-1] >= {"one"}
