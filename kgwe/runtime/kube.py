"""The cluster interface (kgwe.runtime.cluster) on the API server, through a kubernetes ApiClient: its
connection pool, TLS, credentials, default headers (impersonation) and deadlines (DeadlineApiClient), but
not its generated model classes: requests are plain dicts, answers JSON decoded with orjson (for a fleet's
Nodes the client's models were most of the CPU of a reconcile).

Where a kind is served (its resource name, namespaced or not) comes from API discovery, read once per
group/version and again when a kind is not found there (a CRD installed since)."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.runtime import kinds
from kgwe.runtime.cluster import (
    WATCH_TIMEOUT_SECONDS,
    Cluster,
    KubeObject,
    OnEvent,
    OnList,
    OnRestart,
)
from kgwe.runtime.errors import NotServed, is_not_found
from kgwe.runtime.kinds import Kind
from kgwe.runtime.watch import list_and_watch
from kgwe.vocab import FIELD_MANAGER

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML: the body is sent as JSON
_WATCH_QUERY = {  # list_and_watch's keywords -> the API's query parameters
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "resource_version": "resourceVersion",
    "timeout_seconds": "timeoutSeconds",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "watch": "watch",
}


class KubeCluster:
    def __init__(self, api_client: client.ApiClient, *, field_manager: str = FIELD_MANAGER) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self._served: dict[
            str, dict[str, tuple[str, bool]]
        ] = {}  # apiVersion -> kind -> (plural, namespaced)
        self._lock = threading.Lock()

    # -- requests --------------------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = JSON,
    ) -> Any:
        """One request; the urllib3 response, body not read yet. A non-2xx answer raises ApiException."""
        api = self.api_client
        headers = {**api.default_headers, "Accept": JSON, "Content-Type": content_type}
        if api.cookie:
            headers["Cookie"] = api.cookie
        api.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)  # the token, refreshed
        url = f"{api.configuration.host}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        # the body as is: the REST client serialises it for its content type (JSON, and YAML as JSON)
        response = api.call_api(method, url, header_params=headers, body=body)
        if not 200 <= response.status < 300:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    def _json(self, method: str, path: str, **kwargs: Any) -> KubeObject:
        doc: KubeObject = orjson.loads(self._request(method, path, **kwargs).data or b"{}")
        return doc

    # -- where a kind is served ------------------------------------------------------------------------
    def _discover(self, api_version: str) -> dict[str, tuple[str, bool]]:
        prefix = "/api" if "/" not in api_version else "/apis"
        try:
            doc = self._json("GET", f"{prefix}/{api_version}")
        except ApiException as exc:
            if is_not_found(exc):
                return {}
            raise
        found = {}
        for resource in doc.get("resources") or []:
            if "/" not in resource.get("name", ""):  # not a subresource
                found[resource["kind"]] = (resource["name"], bool(resource.get("namespaced")))
        return found

    def _resource(self, kind: Kind) -> tuple[str, bool]:
        with self._lock:
            known = self._served.get(kind.api_version, {}).get(kind.kind)
        if known is None:
            served = self._discover(kind.api_version)
            with self._lock:
                self._served[kind.api_version] = served
            known = served.get(kind.kind)
        if known is None:
            raise NotServed(f"the cluster does not serve {kind.api_version} {kind.kind} (CRD missing?)")
        return known

    def _path(self, kind: Kind, namespace: str | None = None, name: str | None = None) -> str:
        plural, namespaced = self._resource(kind)
        base = f"/api/{kind.api_version}" if "/" not in kind.api_version else f"/apis/{kind.api_version}"
        if namespaced and namespace:
            base += f"/namespaces/{urllib.parse.quote(namespace, safe='')}"
        path = f"{base}/{plural}"
        return f"{path}/{urllib.parse.quote(name, safe='')}" if name is not None else path

    def _ref_path(self, obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return self._path(Kind.of(obj), meta.get("namespace"), str(meta.get("name") or ""))

    # -- the interface -----------------------------------------------------------------------------------
    def get(self, kind: Kind, name: str, namespace: str | None = None) -> KubeObject | None:
        try:
            return self._json("GET", self._path(kind, namespace, name))
        except ApiException as exc:
            if is_not_found(exc):
                return None
            raise

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> list[KubeObject]:
        query = {k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v}
        items: list[KubeObject] = (
            self._json("GET", self._path(kind, namespace), query=query).get("items") or []
        )
        return items

    def _lister(self, kind: Kind, namespace: str | None) -> Any:
        """A list function as list_and_watch calls the generated client's (its keywords, raw answers)."""
        path = self._path(kind, namespace)

        def list_fn(_preload_content: bool = False, **kwargs: Any) -> Any:
            query = {}
            for key, value in kwargs.items():
                if value is not None:
                    query[_WATCH_QUERY[key]] = str(value).lower() if isinstance(value, bool) else str(value)
            return self._request("GET", path, query=query)

        list_fn.__name__ = f"list {kind.kind}"
        return list_fn

    def watch(
        self,
        kind: Kind,
        *,
        on_list: OnList,
        on_event: OnEvent,
        stop: threading.Event,
        namespace: str | None = None,
        labels: str | None = None,
        fields: str | None = None,
        on_restart: OnRestart | None = None,
        timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
    ) -> None:
        while not stop.is_set():
            try:
                lister = self._lister(kind, namespace)
            except NotServed as exc:  # the CRD may come: ask again after a pause, as list_and_watch would
                if on_restart is not None:
                    on_restart(exc)
                stop.wait(5.0)
                continue
            list_and_watch(
                lister,
                on_list=on_list,
                on_event=on_event,
                stop=stop,
                on_restart=on_restart,
                watch_timeout_seconds=timeout_seconds,
                label_selector=labels,
                field_selector=fields,
            )

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> KubeObject:
        query = {"fieldManager": self.field_manager, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        return self._json("PATCH", self._ref_path(obj), query=query, body=obj, content_type=APPLY_PATCH)

    def patch(
        self, kind: Kind, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> KubeObject:
        return self._json(
            "PATCH",
            self._path(kind, namespace, name),
            query={"fieldManager": self.field_manager},
            body=body,
            content_type=MERGE_PATCH,
        )

    def patch_status(
        self, kind: Kind, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> KubeObject:
        return self._json(
            "PATCH",
            self._path(kind, namespace, name) + "/status",
            query={"fieldManager": self.field_manager},
            body=body,
            content_type=MERGE_PATCH,
        )

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> KubeObject:
        meta = obj.get("metadata") or {}
        path = self._path(Kind.of(obj), meta.get("namespace"))
        query = {"fieldManager": self.field_manager, **({"dryRun": "All"} if dry_run else {})}
        return self._json("POST", path, query=query, body=obj)

    def delete(self, kind: Kind, name: str, namespace: str | None = None, *, uid: str | None = None) -> bool:
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        try:
            self._request("DELETE", self._path(kind, namespace, name), body=body)
        except ApiException as exc:
            if is_not_found(exc):
                return False
            raise
        return True

    def evict(self, name: str, namespace: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        path = self._path(kinds.POD, namespace, name)
        self._request("POST", f"{path}/eviction", body=body)

    def serves(self, group: str, version: str | None = None) -> bool:
        if not group:
            return version in (None, "v1")
        try:
            groups = self._json("GET", "/apis").get("groups") or []
        except ApiException:
            return False
        for g in groups:
            if g.get("name") == group:
                return version is None or any(v.get("version") == version for v in g.get("versions") or [])
        return False

    def username(self) -> str:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        doc = self._json("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review)
        return str(((doc.get("status") or {}).get("userInfo") or {}).get("username") or "")


def as_cluster(api: Cluster | client.ApiClient, *, field_manager: str = FIELD_MANAGER) -> Cluster:
    """`api` as a Cluster: an ApiClient means the API server it talks to (a KubeCluster writing as
    `field_manager`)."""
    return KubeCluster(api, field_manager=field_manager) if isinstance(api, client.ApiClient) else api
