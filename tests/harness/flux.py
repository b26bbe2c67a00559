"""Flux's real kustomize-controller beside the local control plane, fed through ExternalArtifacts.

source-controller cannot be built here, so the tests play its one visible part: an ExternalArtifact
(source.toolkit.fluxcd.io/v1, kustomize-controller's `--feature-gates=ExternalArtifact=true`) whose
status names a tar.gz served from a loopback HTTP server, with its sha256 digest, exactly as
source-controller would publish a Git revision. Everything else is Flux's own code: kustomize build,
server-side apply (field manager `kustomize-controller`), health checks, inventory and prune.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import tarfile
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kgwe.localcluster.controlplane import free_port
from kgwe.localcluster.gotools import tool_dir
from kgwe.resources import hack_dir
from tests.harness.gocontrollers import ControllerProcess, module_dir, pinned_version

WRAPPER_GO_MOD = hack_dir() / "flux" / "go.mod"
CONTROLLER_MODULE = "github.com/fluxcd/kustomize-controller"
# The source API kinds kustomize-controller watches; their CRDs come from source-controller's module of
# the same Flux release (its code cannot be built here, its CRD files can be read).
SOURCE_MODULE = "github.com/fluxcd/source-controller"
SOURCE_CRDS = ("buckets", "externalartifacts", "gitrepositories", "ocirepositories")
SOURCE_GROUP, SOURCE_VERSION = "source.toolkit.fluxcd.io", "v1"
KUSTOMIZE_GROUP, KUSTOMIZE_VERSION = "kustomize.toolkit.fluxcd.io", "v1"
FIELD_MANAGER = "kustomize-controller"


def controller_version() -> str:
    """The kustomize-controller release pinned by hack/flux/go.mod (source CRDs use the same release)."""
    return pinned_version(WRAPPER_GO_MOD, CONTROLLER_MODULE)


def flux_crds() -> list[dict[str, Any]]:
    """Kustomization CRD (kustomize-controller) and the source CRDs it watches, from the release's modules."""
    version = controller_version()
    files = [
        module_dir(CONTROLLER_MODULE, version)
        / "config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml"
    ]
    source = module_dir(SOURCE_MODULE, version) / "config/crd/bases"
    files += [source / f"source.toolkit.fluxcd.io_{name}.yaml" for name in SOURCE_CRDS]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def tarball(files: Mapping[str, bytes]) -> bytes:
    """A reproducible tar.gz of `files` (relative path -> content), as source-controller packs a revision."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for rel in sorted(files):
            data = files[rel]
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tree(root: Path, prefix: str = "", skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every regular file under root (relative paths under `prefix`), minus top-level folders in `skip`."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not path.is_symlink() and rel.parts[0] not in skip:
            out[f"{prefix}{rel.as_posix()}"] = path.read_bytes()
    return out


class ArtifactServer:
    """Serves artifacts (name -> tar.gz bytes) over loopback HTTP, like source-controller's storage server."""

    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                blob = outer._blobs.get(self.path.lstrip("/"))
                outer.requests += 1
                self.send_response(200 if blob is not None else 404)
                self.send_header("Content-Type", "application/gzip")
                self.send_header("Content-Length", str(len(blob or b"")))
                self.end_headers()
                self.wfile.write(blob or b"")

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ArtifactServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def put(self, path: str, blob: bytes) -> str:
        self._blobs[path] = blob
        return f"http://127.0.0.1:{self.port}/{path}"


def publish(api: client.ApiClient, server: ArtifactServer, namespace: str, name: str, blob: bytes) -> str:
    """Create/update ExternalArtifact `name` pointing at `blob` (served by `server`); returns its revision."""
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    url = server.put(f"externalartifact/{namespace}/{name}/{digest[7:19]}.tar.gz", blob)
    revision = f"latest@{digest}"
    custom = client.CustomObjectsApi(api)
    plural = "externalartifacts"
    body = {
        "apiVersion": f"{SOURCE_GROUP}/{SOURCE_VERSION}",
        "kind": "ExternalArtifact",
        "metadata": {"name": name},
    }
    with contextlib.suppress(ApiException):
        custom.create_namespaced_custom_object(SOURCE_GROUP, SOURCE_VERSION, namespace, plural, body)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    generation = custom.get_namespaced_custom_object(SOURCE_GROUP, SOURCE_VERSION, namespace, plural, name)[
        "metadata"
    ]["generation"]
    status = {
        "artifact": {
            "digest": digest,
            "lastUpdateTime": now,
            "path": url.split("/", 3)[3],
            "revision": revision,
            "size": len(blob),
            "url": url,
        },
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Succeeded",
                "message": f"stored artifact for revision '{revision}'",
                "lastTransitionTime": now,
                "observedGeneration": generation,
            }
        ],
    }
    custom.patch_namespaced_custom_object_status(
        SOURCE_GROUP,
        SOURCE_VERSION,
        namespace,
        plural,
        name,
        {"status": status},
        _content_type="application/merge-patch+json",
        field_manager="source-controller",  # what the real producer of artifacts would be called
    )
    return revision


class KustomizeController:
    """The real kustomize-controller process: all namespaces, ExternalArtifact gate on, no leader election."""

    def __init__(self, kubeconfig: Path, workdir: Path, namespace: str = "flux-system") -> None:
        self.binary = tool_dir("flux") / "kustomize-controller"
        self.kubeconfig, self.workdir, self.namespace = kubeconfig, workdir, namespace
        self.log_path = workdir / "kustomize-controller.log"
        self.health_port = 0
        self._process = ControllerProcess("kustomize-controller", self.log_path)

    def start(self, timeout_seconds: float = 120) -> KustomizeController:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.health_port = free_port()
        argv = [
            str(self.binary),
            f"--metrics-addr=127.0.0.1:{free_port()}",
            f"--health-addr=127.0.0.1:{self.health_port}",
            "--events-addr=",
            "--watch-all-namespaces=true",
            "--enable-leader-election=false",
            "--feature-gates=ExternalArtifact=true",
            "--no-remote-bases=true",
            "--concurrent=2",
            "--log-level=info",
        ]
        env = {
            "KUBECONFIG": str(self.kubeconfig),  # controller-runtime's lookup; it has no --kubeconfig flag
            "RUNTIME_NAMESPACE": self.namespace,
            "TMPDIR": str(self.workdir),
        }
        ready = f"http://127.0.0.1:{self.health_port}/readyz"
        self._process.start(argv, env, ready, timeout_seconds)
        return self

    def stop(self) -> None:
        self._process.stop()

    def __enter__(self) -> KustomizeController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
