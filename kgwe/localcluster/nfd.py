"""A stand-in for Node Feature Discovery's worker and master on the local GPU node: GPU Feature Discovery's
labels file (NFD's `features.d` format, one `name=value` per line) -> the Node's labels.

On a GPU Operator cluster NFD (a dependency the operator installs) publishes what GFD writes. NFD is not
built here (its module is not served by the Go module proxy), and what it does with GFD's file is small: set
each label, remove the ones it set before that the file no longer has, and remember which it set in the
Node annotation `nfd.node.kubernetes.io/feature-labels`. Like NFD configured by the GPU Operator
(`extraLabelNs: [nvidia.com]`), only `nvidia.com/` labels pass; the file is read with a size bound and
every name and value is checked, since whoever writes that host file (a pod with the hostPath) is not
trusted to label anything else.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

from kubernetes import client

from kgwe.vocab import NVIDIA_RESOURCE_PREFIX

log = logging.getLogger(__name__)

FEATURE_LABELS_ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
MAX_FILE_BYTES = 64 * 1024
_NAME = re.compile(r"^[a-z0-9A-Z]([-a-z0-9A-Z_.]{0,61}[a-z0-9A-Z])?$")
_VALUE = re.compile(r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]{0,61}[a-z0-9A-Z])?)?$")


def parse_features(text: str) -> tuple[dict[str, str], list[str]]:
    """(labels, problems) of a features.d file: `name=value` lines, `#` comments; a label outside
    `nvidia.com/` or not a valid label name or value is left out and named in `problems`."""
    labels: dict[str, str] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep:
            problems.append(f"line {number}: no '=': {line[:80]!r}")
            continue
        if not name.startswith(NVIDIA_RESOURCE_PREFIX) or not _NAME.match(
            name.removeprefix(NVIDIA_RESOURCE_PREFIX)
        ):
            problems.append(f"line {number}: label {name[:80]!r} is not an nvidia.com/ label name")
            continue
        if not _VALUE.match(value):
            problems.append(f"line {number}: {name}: {value[:80]!r} is not a label value")
            continue
        labels[name] = value
    return labels, problems


def label_patch(current: dict[str, str], managed: set[str], wanted: dict[str, str]) -> dict[str, str | None]:
    """The label changes that make `current` carry `wanted`, removing what this stand-in set before
    (`managed`) and `wanted` no longer has. Empty when nothing changes."""
    patch: dict[str, str | None] = {k: v for k, v in wanted.items() if current.get(k) != v}
    patch.update({k: None for k in managed - set(wanted) if k in current})
    return patch


def read_features(path: Path) -> tuple[dict[str, str], list[str]]:
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return {}, []
    if len(data) > MAX_FILE_BYTES:
        return {}, [f"{path}: larger than {MAX_FILE_BYTES} bytes; ignored"]
    return parse_features(data.decode("utf-8", "replace"))


class FeatureLabeller:
    """Polls the features directory and keeps one Node's labels in step with it (a thread)."""

    def __init__(
        self, api_client: client.ApiClient, node: str, features_dir: Path, poll_seconds: float = 0.5
    ) -> None:
        self._core = client.CoreV1Api(api_client)
        self.node = node
        self.features_dir = features_dir
        self.poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[str, str] | None = None
        self.problems: list[str] = []

    def __enter__(self) -> FeatureLabeller:
        self._thread = threading.Thread(target=self._run, name="nfd-standin", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _wanted(self) -> dict[str, str]:
        wanted: dict[str, str] = {}
        problems: list[str] = []
        for path in sorted(self.features_dir.glob("*")) if self.features_dir.is_dir() else []:
            if path.is_file() and not path.name.startswith("."):
                labels, found = read_features(path)
                wanted.update(labels)
                problems += [f"{path.name}: {p}" for p in found]
        if problems != self.problems:
            for problem in problems:
                log.warning("NFD stand-in: %s", problem)
        self.problems = problems
        return wanted

    def sync_once(self) -> bool:
        """Apply the files' labels now; True when the Node changed."""
        wanted = self._wanted()
        if wanted == self._last:
            return False
        node = self._core.read_node(self.node)
        current = dict(node.metadata.labels or {})
        annotations = node.metadata.annotations or {}
        managed = {n for n in annotations.get(FEATURE_LABELS_ANNOTATION, "").split(",") if n}
        patch = label_patch(current, managed, wanted)
        self._core.patch_node(
            self.node,
            {
                "metadata": {
                    "labels": patch,
                    "annotations": {FEATURE_LABELS_ANNOTATION: ",".join(sorted(wanted))},
                }
            },
        )
        self._last = wanted
        return bool(patch)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception as exc:  # the API server restarting, a node not there yet: next poll
                log.info("NFD stand-in: %s", exc)
                self._last = None
            self._stop.wait(self.poll_seconds)
