"""Kubernetes Events about a PolicyRepository: one per step that matters (applied, pruned, rollout
started/finished, stalled, invalid revision). Repeats of the same reason+message bump `count` instead of
creating new objects, as kubelet and client-go's recorder do."""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.runtime.cluster import Cluster
from kgwe.runtime.kinds import EVENT
from kgwe.runtime.kube import as_cluster
from kgwe.timestamps import format_rfc3339
from kgwe.vocab import CONTROLLER_NAME

log = logging.getLogger(__name__)
MAX_MESSAGE_CHARS = 1024  # of an Event's message


class EventRecorder:
    def __init__(
        self,
        cluster: Cluster | client.ApiClient,
        *,
        component: str = CONTROLLER_NAME,
        allowed: Callable[[], bool] = lambda: True,
    ) -> None:
        self.cluster = as_cluster(cluster, field_manager=component)
        self.allowed = allowed  # e.g. "still the leader": nothing is written otherwise
        self.component = component
        self._seen: dict[tuple[str, str | None, str, str, str], tuple[str, int]] = {}
        self._lock = threading.Lock()
        self.writes = 0

    def record(
        self,
        involved: Mapping[str, Any],
        event_type: str,
        reason: str,
        message: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Emit an event about `involved` (an object dict with apiVersion/kind/metadata); never raises.
        `annotations`: the Event's own (the stamp of the policy commit that caused what it tells)."""
        if not self.allowed():
            return
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        key = (namespace, meta.get("name"), event_type, reason, message)
        now = format_rfc3339(datetime.now(UTC))
        try:
            with self._lock:
                previous = self._seen.get(key)
            if previous is not None:
                name, count = previous
                self.cluster.patch(EVENT, name, {"count": count + 1, "lastTimestamp": now}, namespace)
                self.writes += 1
                with self._lock:
                    self._seen[key] = (name, count + 1)
                return
            name = f"{meta.get('name', 'kgwe')}.{secrets.token_hex(8)}"
            involved_object = {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            }
            event_meta: dict[str, Any] = {"name": name, "namespace": namespace}
            if annotations:
                event_meta["annotations"] = dict(annotations)
            self.cluster.create(
                {
                    "apiVersion": EVENT.api_version,
                    "kind": EVENT.kind,
                    "metadata": event_meta,
                    "involvedObject": {k: v for k, v in involved_object.items() if v is not None},
                    "reason": reason,
                    "message": message[:MAX_MESSAGE_CHARS],
                    "type": event_type,
                    "count": 1,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "source": {"component": self.component},
                    "reportingComponent": self.component,
                    "reportingInstance": self.component,
                }
            )
            self.writes += 1
            with self._lock:
                self._seen[key] = (name, 1)
                if len(self._seen) > 1000:
                    self._seen.clear()
        except ApiException as exc:  # events are best effort: never fail a reconcile over one
            log.warning("could not record event %s/%s: %s", reason, message[:80], exc.reason)
            with self._lock:
                self._seen.pop(key, None)

    def normal(self, involved: Mapping[str, Any], reason: str, message: str) -> None:
        self.record(involved, "Normal", reason, message)

    def warning(self, involved: Mapping[str, Any], reason: str, message: str) -> None:
        self.record(involved, "Warning", reason, message)
