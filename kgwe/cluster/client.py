"""Building an authenticated Kubernetes ApiClient, by one rule for every command (see api_client)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from kgwe.errors import KgweError
from kgwe.runtime.errors import is_conflict, is_not_found
from kgwe.vocab import API_GROUP, CRD_VERSION, GPU_WORKLOAD_PLURAL

# API calls one client makes at once at most (a rollout wave patches this many nodes side by side): its
# connection pool keeps that many connections, so none is opened and thrown away per call
API_CONNECTIONS = 32


class DeadlineApiClient(client.ApiClient):  # type: ignore[misc]  # the kubernetes client is untyped
    """An ApiClient whose every call without its own `_request_timeout` gets `request_timeout_s`, except
    watches (they end server-side through timeoutSeconds). A leader must never hang in a call longer than
    its lease margin: it would go on writing after another replica took over."""

    request_timeout_s: float | None = None

    def call_api(self, method: str, url: str, *args: object, **kwargs: object) -> object:
        watching = "watch=true" in str(url).lower()
        if kwargs.get("_request_timeout") is None and self.request_timeout_s and not watching:
            kwargs["_request_timeout"] = self.request_timeout_s
        return super().call_api(method, url, *args, **kwargs)


def api_client(
    kubeconfig: str | None = None, *, context: str | None = None, request_timeout_s: float | None = None
) -> client.ApiClient:
    """An ApiClient by the one rule every KGWE command follows, as kubectl does: the `--kubeconfig` file
    when given, else $KUBECONFIG, else the pod's service account when running in a cluster, else
    ~/.kube/config. A clear KgweError when none of them works. With `request_timeout_s`, a deadline on
    every non-watch call (DeadlineApiClient)."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    try:
        configuration = client.Configuration()
        if path:
            if not os.path.exists(path):
                raise KgweError(f"kubeconfig {path} does not exist")
            config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            default = os.path.expanduser(config.KUBE_CONFIG_DEFAULT_LOCATION)
            if not os.path.exists(default):
                raise KgweError(
                    "no Kubernetes credentials: pass --kubeconfig, set KUBECONFIG or run in a cluster"
                )
            config.load_kube_config(config_file=default, context=context, client_configuration=configuration)
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, API_CONNECTIONS)
        api = DeadlineApiClient(configuration)
        api.request_timeout_s = request_timeout_s
        return api
    except ConfigException as exc:
        raise KgweError(f"cannot configure a Kubernetes client: {exc}") from exc


def ensure_namespace(api: client.ApiClient, name: str) -> None:
    """Create namespace `name` unless it exists (used by the demo, benchmarks and tests)."""
    from kubernetes.client.exceptions import ApiException

    try:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as exc:
        if not is_conflict(exc):
            raise


def list_items(list_call: Callable[..., Any], **kwargs: object) -> list[dict[str, Any]]:
    """`items` of a list call as plain dicts, parsed with orjson instead of the client's model classes
    (for 1,000+ Nodes with topology annotations this is several times faster and uses less memory)."""
    import orjson

    response = list_call(_preload_content=False, **kwargs)
    return orjson.loads(response.data).get("items") or []


def list_gpu_workloads(api: client.ApiClient) -> list[dict[str, Any]]:
    """Every GPUWorkload in the cluster as plain dicts; none when the GPUWorkload CRD is not installed (it
    is optional)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return list_items(
            client.CustomObjectsApi(api).list_cluster_custom_object,
            group=API_GROUP,
            version=CRD_VERSION,
            plural=GPU_WORKLOAD_PLURAL,
        )
    except ApiException as exc:
        if not is_not_found(exc):
            raise
        return []
