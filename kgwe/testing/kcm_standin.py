"""The two jobs of kube-controller-manager our tests depend on, done explicitly in-process.

We do not run kube-controller-manager (one more big binary to build and start, and most of its controllers
would fight kwok). Two of its effects are visible to any workload, so we reproduce exactly those:

* node lifecycle: admission (`TaintNodesByCondition`) puts `node.kubernetes.io/not-ready:NoSchedule` on every
  new Node; KCM removes it once the node reports Ready. Without this no pod would ever schedule.
* service accounts: KCM creates the `default` ServiceAccount in every namespace; the `ServiceAccount`
  admission plugin rejects pods in namespaces that lack it.

Everything else KCM does (garbage collection, namespace finalization, Jobs, ReplicaSets...) does not happen
on the local control plane; tests create Pods directly and the fixtures clean up after themselves.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.testing.watching import watch_loop

log = logging.getLogger(__name__)

NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _is_ready(node: Any) -> bool:
    conditions = (node.status and node.status.conditions) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


class ControllerManagerStandIn:
    """Removes the not-ready taint from Ready nodes and creates `default` ServiceAccounts."""

    def __init__(self, api_client: client.ApiClient, workers: int = 4, log_path: Path | None = None) -> None:
        self._core = client.CoreV1Api(api_client)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kcm-standin")
        self._in_flight: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self.untainted_nodes = 0
        self.created_service_accounts = 0
        self._log_path = log_path

    def _record(self, action: str) -> None:
        """Each action goes to the stand-in's own log next to the component logs, so it is visible."""
        if self._log_path is None:
            return
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with self._lock, self._log_path.open("a") as f:
            f.write(f"{stamp} {action}\n")

    def start(self) -> None:
        for name, fn, handler in (
            ("nodes", self._core.list_node, self._on_node),
            ("namespaces", self._core.list_namespace, self._on_namespace),
        ):
            t = threading.Thread(
                target=watch_loop, args=(fn, handler, self._stop), name=f"kcm-standin-{name}", daemon=True
            )
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, key: tuple[str, str], fn: Any, *args: Any) -> None:
        with self._lock:
            if key in self._in_flight or self._stop.is_set():
                return
            self._in_flight.add(key)

        def run() -> None:
            try:
                fn(*args)
            except ApiException as exc:
                if exc.status not in (404, 409, 422) and not self._stop.is_set():
                    log.warning("kcm stand-in %s %s failed: %s", key[0], key[1], exc.reason)
            except Exception as exc:
                if not self._stop.is_set():
                    log.warning("kcm stand-in %s %s failed: %r", key[0], key[1], exc)
            finally:
                with self._lock:
                    self._in_flight.discard(key)

        try:
            self._pool.submit(run)
        except RuntimeError:  # pool shut down during teardown
            with self._lock:
                self._in_flight.discard(key)

    # node lifecycle -------------------------------------------------------------------------------
    def _on_node(self, event_type: str, node: Any) -> None:
        if event_type == "DELETED":
            return
        taints = node.spec.taints or []
        if _is_ready(node) and any(t.key == NOT_READY_TAINT for t in taints):
            self._submit(("node", node.metadata.name), self._untaint, node)

    def _untaint(self, node: Any) -> None:
        name = node.metadata.name
        serialize = self._core.api_client.sanitize_for_serialization
        for _attempt in range(5):
            kept = [t for t in node.spec.taints or [] if t.key != NOT_READY_TAINT]
            if len(kept) == len(node.spec.taints or []) or not _is_ready(node):
                return
            # JSON patch guarded by the resourceVersion we saw (usually the watch event's, saving a GET):
            # if the node changed meanwhile the test op fails and we re-read it and try again.
            patch = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version},
                {"op": "replace", "path": "/spec/taints", "value": [serialize(t) for t in kept]},
            ]
            try:
                resp = self._core.patch_node(name, patch, _preload_content=False)
                resp.read()  # drain before handing the connection back to the pool
                resp.release_conn()
                break
            except ApiException as exc:
                if exc.status not in (409, 422):
                    raise
                node = self._core.read_node(name)
        else:
            return
        self.untainted_nodes += 1
        self._record(f"node {name} is Ready: removed taint {NOT_READY_TAINT}:NoSchedule")

    # service accounts ------------------------------------------------------------------------------
    def _on_namespace(self, event_type: str, ns: Any) -> None:
        if event_type == "DELETED" or (ns.status and ns.status.phase == "Terminating"):
            return
        self._submit(("namespace", ns.metadata.name), self._ensure_default_sa, ns.metadata.name)

    def _ensure_default_sa(self, namespace: str) -> None:
        try:
            self._core.read_namespaced_service_account("default", namespace)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        self._core.create_namespaced_service_account(
            namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default"))
        )
        self.created_service_accounts += 1
        self._record(f"namespace {namespace}: created ServiceAccount default")
