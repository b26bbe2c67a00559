"""The MIG rollout's three properties on the real control plane, checked on every watched event.

A watch records every change of the pool's nodes and of KGWE's mig-parted ConfigMap (resourceVersions come
from one etcd, so events of both interleave in the order the API server committed them) through a rollout
with busy nodes, MIG applies that take seconds, a controller restart, a node whose MIG apply fails, and the
documented acknowledgement. Then:
- each node's `nvidia.com/mig.config` changes at most once per revision, and never while its state is
  `pending`;
- every label value exists in the ConfigMap as it was at that moment;
- after `failed`, no node of the pool is relabelled until a person annotates the node
  `kgwe.nvidia.io/mig-retry`; then the rollout goes on to the end.
"""

from __future__ import annotations

import contextlib
import threading
import time
import zlib
from dataclasses import dataclass

import pytest
import yaml
from kubernetes import client, watch

from kgwe.reconcile.repository import RepositoryReconciler
from kgwe.reconcile.status import condition
from kgwe.vocab import MIG_CONFIG_LABEL, MIG_STATE_LABEL, RETRY_ANNOTATION
from tests.harness.waiting import Watched, repeat_until, wait_for

from .test_controller_e2e import gpu_pod

pytestmark = pytest.mark.cluster

SYSTEM_NS, MIG_NS, MIG_CM = "kgwe-system", "gpu-operator", "kgwe-mig-parted-config"
MIXED = "1g.10gb: 70%\n      - 2g.20gb: 20%\n      - 3g.40gb: 10%"
REVISION2 = "3g.40gb: 60%\n      - 2g.20gb: 40%"


@dataclass(frozen=True)
class NodeEvent:
    rv: int
    node: str
    config: str | None
    state: str | None
    retry: bool


class Recorder:
    """Watches the pool's nodes and the mig-parted ConfigMap from one starting resourceVersion."""

    def __init__(self, core: client.CoreV1Api, pool: str) -> None:
        self.core, self.pool = core, pool
        self.nodes: list[NodeEvent] = []
        self.configmaps: list[tuple[int, frozenset[str]]] = []  # (rv, config names defined)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> Recorder:
        listing = self.core.list_node(label_selector=f"kgwe.nvidia.io/pool={self.pool}")
        start = listing.metadata.resource_version
        for n in listing.items:
            self._node(n)
        with contextlib.suppress(client.exceptions.ApiException):
            self._configmap(self.core.read_namespaced_config_map(MIG_CM, MIG_NS))
        self._threads = [
            threading.Thread(target=self._watch, args=(fn, kw, handler, start), daemon=True)
            for fn, kw, handler in (
                (self.core.list_node, {"label_selector": f"kgwe.nvidia.io/pool={self.pool}"}, self._node),
                (
                    self.core.list_namespaced_config_map,
                    {"namespace": MIG_NS, "field_selector": f"metadata.name={MIG_CM}"},
                    self._configmap,
                ),
            )
        ]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)

    def settle(self, nodes: list[str]) -> None:
        """Wait until the watches have delivered the current version of every node and of the ConfigMap."""
        wanted = {n: int(self.core.read_node(n).metadata.resource_version) for n in nodes}
        cm = int(self.core.read_namespaced_config_map(MIG_CM, MIG_NS).metadata.resource_version)

        def caught_up() -> bool:
            with self._lock:
                seen = {e.node: e.rv for e in self.nodes}
                seen_cm = max([rv for rv, _ in self.configmaps] + [0])
            return seen_cm >= cm and all(seen.get(n, 0) >= rv for n, rv in wanted.items())

        wait_for("the watches to catch up", caught_up, 60)

    def _watch(self, list_fn, kwargs, handler, start) -> None:
        rv = start
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(list_fn, resource_version=rv, timeout_seconds=2, **kwargs):
                    obj = event["object"]
                    rv = obj.metadata.resource_version
                    if event["type"] != "DELETED":
                        handler(obj)
                    if self._stop.is_set():
                        w.stop()
            except client.exceptions.ApiException as exc:  # a 410 would lose events: the test must know
                self.errors.append(f"watch failed: {exc.status} {exc.reason}")
                return

    def _node(self, node) -> None:
        labels = node.metadata.labels or {}
        event = NodeEvent(
            int(node.metadata.resource_version),
            node.metadata.name,
            labels.get(MIG_CONFIG_LABEL),
            labels.get(MIG_STATE_LABEL),
            RETRY_ANNOTATION in (node.metadata.annotations or {}),
        )
        with self._lock:
            self.nodes.append(event)

    def _configmap(self, cm) -> None:
        doc = yaml.safe_load((cm.data or {}).get("config.yaml", "")) or {}
        names = frozenset((doc.get("mig-configs") or {}).keys())
        with self._lock:
            self.configmaps.append((int(cm.metadata.resource_version), names))

    def timeline(self) -> list[NodeEvent]:
        with self._lock:
            return sorted(set(self.nodes), key=lambda e: (e.rv, e.node))


def relabels(events: list[NodeEvent], initial: dict[str, NodeEvent]):
    """(event, previous event of that node) for every change of a node's config label."""
    last = dict(initial)
    for event in events:
        before = last.get(event.node)
        if before is not None and before.config != event.config:
            yield event, before
        last[event.node] = event


def assert_labels_always_defined(rec: Recorder, initial: dict[str, NodeEvent]) -> None:
    """At every event of either kind, every node's label names a config of the ConfigMap as it is then."""
    merged = [(e.rv, 1, e) for e in rec.timeline()] + [(rv, 0, names) for rv, names in rec.configmaps]
    labels = {n: e.config for n, e in initial.items()}
    live: frozenset[str] | None = None
    for rv, _, item in sorted(merged, key=lambda x: (x[0], x[1])):
        if isinstance(item, NodeEvent):
            labels[item.node] = item.config
        else:
            live = item
        if live is None:  # before KGWE wrote its ConfigMap: only the GPU Operator's own values
            assert labels == {n: e.config for n, e in initial.items()}, (
                f"a label set before the ConfigMap: {labels}"
            )
            continue
        missing = {n: c for n, c in labels.items() if c not in live}
        assert not missing, f"at rv {rv} labels name configs the ConfigMap lacks: {missing} ({sorted(live)})"


def assert_once_per_revision_never_while_pending(window: list[NodeEvent], initial: dict[str, NodeEvent]):
    changed: dict[str, list[str | None]] = {}
    for event, before in relabels(window, initial):
        assert before.state not in ("pending", "rebooting"), (
            f"{event.node} relabelled {before.config} -> {event.config} while its state was {before.state}"
        )
        changed.setdefault(event.node, []).append(event.config)
    twice = {n: c for n, c in changed.items() if len(c) > 1}
    assert not twice, f"nodes relabelled more than once in one revision: {twice}"
    return changed


def last_events(events: list[NodeEvent], nodes: list[str], upto: int | None = None) -> dict[str, NodeEvent]:
    out: dict[str, NodeEvent] = {}
    for event in events:
        if upto is None or event.rv <= upto:
            out[event.node] = event
    return {n: out[n] for n in nodes if n in out}


def mig_pod(name: str, node: str) -> dict:
    """A job holding one 1g.10gb MIG instance: the planner must keep that instance where it is."""
    pod = gpu_pod(name, node)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    return pod


def test_rollout_properties_hold_on_every_watched_event(k8s_api, e2e, kgwe_mig_manager):
    # Applies take 1.5-3 s, as the reconcile loop runs every 0.3 s: a controller that re-plans in-flight
    # nodes or prunes configs too early gets many chances to show it.
    kgwe_mig_manager.delay_seconds = lambda node, config: 1.5 + (zlib.crc32(node.encode()) % 4) * 0.5
    nodes = e2e.make_nodes(6)
    busy = nodes[4:]
    for i, node in enumerate(busy):
        e2e.core.create_namespaced_pod(e2e.namespace, gpu_pod(f"busy-{i}", node))
    mig = "policy/mig.yaml"
    e2e.remote.commit(
        {mig: e2e.strategy_yaml(e2e.pool, MIXED, max_unavailable="2"), "policy/scoring.yaml": e2e.SCORING}
    )
    e2e.make_repository()

    def reconciler() -> RepositoryReconciler:  # a fresh controller: nothing cached, state read back
        return RepositoryReconciler(
            k8s_api, SYSTEM_NS, e2e.pool, cache_dir=e2e.tmp / f"c{time.monotonic_ns()}"
        )

    def drive(rec, done, on_step=lambda o: None, limit_seconds=240.0):
        def step():
            outcome = rec.reconcile()
            on_step(outcome)
            return outcome

        nodes_change = Watched(e2e.core.list_node)
        return repeat_until("the rollout to settle", step, done, limit_seconds, watch=nodes_change)

    def phase(outcome) -> str | None:
        return outcome.phase if outcome is not None else None

    with Recorder(e2e.core, e2e.pool) as rec:
        initial = last_events(rec.timeline(), nodes)

        # Revision 1: two busy nodes wait; the controller is replaced after its first relabels.
        first = reconciler()
        assert phase(first.reconcile()) == "progressing"
        del first
        rec1 = reconciler()
        steps = {"n": 0}

        def free_busy_nodes(outcome) -> None:  # the jobs on the busy nodes end, one after the other
            steps["n"] += 1
            for step, pod in ((6, "busy-0"), (16, "busy-1")):
                if steps["n"] == step:
                    with contextlib.suppress(client.exceptions.ApiException):
                        e2e.core.delete_namespaced_pod(pod, e2e.namespace, grace_period_seconds=0)

        drive(rec1, lambda o: phase(o) == "ready", free_busy_nodes)
        rec.settle(nodes)
        end1 = max(e.rv for e in rec.timeline())
        revision1 = [e for e in rec.timeline() if e.rv <= end1]
        assert_labels_always_defined(rec, initial)
        changed1 = assert_once_per_revision_never_while_pending(revision1, initial)
        assert set(changed1) == set(nodes), f"every node changes in revision 1: {changed1}"
        assert any(not c[0].startswith("kgwe-all-") for c in changed1.values()), (
            "mixed (hashed) configs expected"
        )

        # Revision 2: a job holds a node that still names a revision-1 config, and one node's MIG apply
        # fails. Its pool stops for good, across a controller restart too.
        bad, held = nodes[0], nodes[5]
        e2e.core.create_namespaced_pod(e2e.namespace, mig_pod("busy-2", held))
        kgwe_mig_manager.failing.add(bad)
        # The failure comes while another node of the pool is still applying, which ends after it.
        kgwe_mig_manager.delay_seconds = lambda node, config: 0.5 if node == bad else 3.0
        e2e.remote.commit({mig: e2e.strategy_yaml(e2e.pool, REVISION2, max_unavailable="2")})
        rec2 = reconciler()
        drive(rec2, lambda o: phase(o) == "stalled")
        for _ in range(6):  # several more reconciles, by this controller and a restarted one
            assert phase(rec2.reconcile()) == "stalled"
            time.sleep(0.3)
        # The held job ends while the pool is stopped: the facts change, the pool must stay stopped.
        e2e.core.delete_namespaced_pod("busy-2", e2e.namespace, grace_period_seconds=0)
        rec3 = reconciler()
        for _ in range(6):
            assert phase(rec3.reconcile()) == "stalled"
            time.sleep(0.3)
        status = e2e.status()
        assert condition(status, "Stalled")["status"] == "True"
        assert bad in condition(status, "Stalled")["message"]
        assert RETRY_ANNOTATION in condition(status, "Stalled")["message"]

        # The documented acknowledgement: the person annotates the node; the rollout goes on.
        kgwe_mig_manager.failing.discard(bad)
        e2e.core.patch_node(bad, {"metadata": {"annotations": {RETRY_ANNOTATION: "true"}}})
        after = {"steps": 0}

        def fix_node(outcome) -> None:  # ... and re-runs the node's MIG manager
            after["steps"] += 1
            if after["steps"] == 1:
                assert outcome is not None and outcome.phase != "stalled", outcome
                assert outcome.rollout[e2e.pool]["acknowledged"] == [bad], outcome.rollout
                kgwe_mig_manager.restart(bad)

        drive(rec3, lambda o: phase(o) == "ready", fix_node)
        acks = e2e.core.list_namespaced_event(SYSTEM_NS, field_selector="reason=MIGFailureAcknowledged").items
        assert any(bad in (ev.message or "") and ev.involved_object.name == e2e.pool for ev in acks), acks
        rec.settle(nodes)
        events = rec.timeline()
        assert not rec.errors, rec.errors

    # Every label value, at every event, exists in the ConfigMap as it was then.
    assert_labels_always_defined(rec, initial)

    # Revision 2: once per node, never while pending.
    revision2 = [e for e in events if e.rv > end1]
    at_end1 = last_events(events, nodes, upto=end1)
    changed2 = assert_once_per_revision_never_while_pending(revision2, at_end1)
    assert set(changed2) == set(nodes), f"every node changes in revision 2: {changed2}"

    # After `failed`, no relabel in the pool until the acknowledgement; then the rest follow.
    failed_at = min(e.rv for e in revision2 if e.node == bad and e.state == "failed")
    acked_at = min(e.rv for e in revision2 if e.node == bad and e.retry and e.rv > failed_at)
    moved = [(e.node, e.config) for e, _ in relabels(revision2, at_end1) if failed_at < e.rv < acked_at]
    assert not moved, f"relabelled after {bad} failed and before the acknowledgement: {moved}"
    started = {e.node for e, _ in relabels(revision2, at_end1) if e.rv < failed_at}
    after_ack = [e.node for e, _ in relabels(revision2, at_end1) if e.rv > acked_at]
    assert bad in started and set(after_ack) == set(nodes) - started, (started, after_ack)
    final = {n: e2e.labels(n) for n in nodes}
    assert all(labels[MIG_STATE_LABEL] == "success" for labels in final.values()), final
    cm = e2e.core.read_namespaced_config_map(MIG_CM, MIG_NS)
    configs = yaml.safe_load(cm.data["config.yaml"])["mig-configs"]
    for node, labels in final.items():  # revision 2's layouts: no 1g.10gb left
        assert "1g.10gb" not in yaml.safe_dump(configs[labels[MIG_CONFIG_LABEL]]), (
            node,
            labels[MIG_CONFIG_LABEL],
        )
