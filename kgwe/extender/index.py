"""Cluster mode: keep the engine's node table in step with the cluster through watches. This is the only
place the extender talks to the API server, and never on the request path.

Three list+watch loops (one thread each): Nodes; the Pods of the KGWE scheduler (fieldSelector
`spec.schedulerName=kgwe-scheduler`), bound ones for accounting and pending ones for verifying decisions
(one watch, not one per kind: a bind is then one MODIFIED event instead of a DELETED on one watch and an
ADDED on another, each encoded and sent by the API server); the `kgwe-scoring` ConfigMap. Pods placed by
other schedulers are not watched: every pod update of the cluster would otherwise be encoded and sent to the
extender, whose decisions only need (1) KGWE's own pods in full (shares, MIG, which GPUs) and (2) which
GPUs other pods hold on GPU nodes. (2) comes from the Node watch the extender already has: the node agent
writes `kgwe.nvidia.io/gpu-pods` (GPU index -> pod, from the kubelet's PodResources), and a GPU held by a
pod the index does not know counts as taken. Counts stay safe without it: kube-scheduler itself checks
`nvidia.com/gpu` and MIG resources against each node's allocatable for every pod before the extender is
asked. `scheduler_name=None` watches every pod instead (the extender configured into the default
scheduler, where GPU pods carry no scheduler name of their own).

Each loop lists, remembers the list's resourceVersion, watches from it, and on
410 Gone (or an ERROR event, or any connection error) lists again — a relist replaces that kind's state
wholesale, so missed deletions cannot linger. `engine.ready` turns true once Nodes and Pods were listed.

Assumed pods: when filter leaves a GPU pod exactly one node, kube-scheduler binds it there, but the bound pod
reaches this index only after the bind and the watch, tens of milliseconds later under load. Meanwhile the
next pods would be judged against a node that still looks free — for `nvidia.com/gpu.shared`, which only
KGWE accounts, that is how a burst over-commits one GPU. So the engine reports each such decision
(`assume`), the node counts the pod at once, and the assumption ends when the watch shows the pod bound
(anywhere), the pod is decided again, or ASSUME_SECONDS pass without a bind (the pod was deleted, or a later
scheduling step failed) — kube-scheduler's own assume cache, for the extender's view. A node's state is its
pods replayed in order (bound ones by creation, then assumed ones); the index keeps each node's running
tally, so a new assumption (last in that order) adds one pod to it, and the usual bind — of the node's first
assumed pod, newer than its bound ones — leaves the order, and so the node, as it was: neither replays the
node's pods. Anything else replays them.

Whose requests may change that view. As deployed, only kube-scheduler reaches the port: plain HTTP on
loopback (the extender is a sidecar of the kgwe-scheduler pod) or mutual TLS with kube-scheduler's client
certificate (kgwe.httpd.exposure refuses to serve anything else unless --insecure-any-client). Then a
decision is assumed as it is made, at most MAX_ASSUMED_PER_NODE per node, and the pod watch follows bound
pods only (`spec.nodeName!=`): a pod costs two watch events (bound, then its status) instead of three, each
one decoded here and encoded for this watch by the API server. With `verify_decisions` (the extender
served to clients nobody verifies) request bodies are not trusted: the pod watch also follows unbound GPU
pods, and a decision is assumed only for a pod UID that watch has seen pending, with the same GPU request
it saw. A decision that arrives before the watch shows its pod (the watches race) waits, bounded in number
and time, and counts once the watch confirms it. Either way the fragmentation term's workload mix is
learned from the pods the watch shows (pending ones when it follows them, else bound ones), never from
request bodies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson
from cachetools import TTLCache

from kgwe.extender.engine import Engine
from kgwe.extender.k8s import (
    ENDED_PHASES,
    Tally,
    gpu_holders,
    node_state,
    pod_holds,
    pod_key,
    tally_add,
    tally_of,
    tally_state,
)
from kgwe.extender.nodes import NodeState
from kgwe.extender.profile import ProfileError, profiles_from_document
from kgwe.extender.request import PodRequest
from kgwe.objects import ConfigMap, Node, Pod
from kgwe.topology.annotation import decode
from kgwe.topology.model import NodeTopology
from kgwe.vocab import KGWE_NAMESPACE, SCHEDULER_NAME, SCORING_CONFIG_KEY, SCORING_CONFIGMAP

if TYPE_CHECKING:
    from kubernetes import client

    from kgwe.extender.app import Metrics

log = logging.getLogger("kgwe.extender.index")
WATCH_SECONDS = 300
ASSUME_SECONDS = 30.0  # an assumed pod not seen bound by then is forgotten
FOREIGN_GPU = PodRequest(gpus=1)  # one whole GPU held by a pod the index does not watch


def pod_field_selector(scheduler_name: str | None, *, bound: bool | None = None) -> str:
    """The pods of `scheduler_name` (every scheduler's if None): bound ones, pending ones, or (bound None,
    the index's one pod watch) both."""
    parts = [f"spec.schedulerName={scheduler_name}"] if scheduler_name else []
    if bound is not None:
        parts.append("spec.nodeName!=" if bound else "spec.nodeName=")
    return ",".join(parts)


MAX_TOPOLOGIES = 4096  # distinct topology annotations kept decoded (more: all are decoded afresh)
MAX_ASSUMED_PER_NODE = 64  # more decisions than this for one node before a bind is seen: not plausible
UNCONFIRMED_SECONDS = 5.0  # a decision waits this long for the pending-pod watch to show its pod
MAX_UNCONFIRMED = 1024  # decisions waiting for the watch, oldest dropped first


def _node_inputs(raw: Node) -> tuple[object, ...]:
    """Every part of a Node that node_state and gpu_holders read (not its conditions or heartbeats)."""
    meta = raw.get("metadata") or {}
    status = raw.get("status") or {}
    if not isinstance(meta, dict) or not isinstance(status, dict):
        return (raw,)
    return (meta.get("labels"), meta.get("annotations"), status.get("allocatable"), status.get("capacity"))


def _pod_inputs(raw: Pod) -> tuple[object, ...]:
    """Every part of a Pod that pod_holds, pod_key and the index read: not its status beyond whether it
    ended (Pending -> Running changes nothing held), nor its resourceVersion or managed fields."""
    meta = raw.get("metadata") or {}
    status = raw.get("status") or {}
    if not isinstance(meta, dict) or not isinstance(status, dict):
        return (raw,)
    return (
        orjson.dumps(raw.get("spec")),  # bytes, not the decoded spec: nothing more for the collector to walk
        status.get("phase") in ENDED_PHASES,  # the one thing pod_holds reads of the phase
        meta.get("annotations"),
        meta.get("creationTimestamp"),
        meta.get("name"),
        meta.get("namespace"),
    )


class ClusterIndex:
    def __init__(
        self,
        engine: Engine,
        kubeconfig: str | None = None,
        namespace: str = KGWE_NAMESPACE,
        metrics: Metrics | None = None,
        api_client: client.ApiClient | None = None,
        scheduler_name: str | None = SCHEDULER_NAME,
        verify_decisions: bool = True,
    ) -> None:
        self.engine = engine
        self.verify_decisions = verify_decisions
        self.pod_selector = pod_field_selector(scheduler_name, bound=None if verify_decisions else True)
        selector = {"field_selector": self.pod_selector} if self.pod_selector else {}
        self.namespace = namespace
        self.metrics = metrics
        self._api = api_client
        self._kubeconfig = kubeconfig
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._topologies: dict[str, NodeTopology] = {}  # annotation text -> decoded (_decode)
        self._mu = threading.Lock()
        self.bases: dict[str, NodeState] = {}
        self.holders: dict[str, dict[int, str]] = {}  # node -> GPU index -> "ns/pod" (the agent's view)
        # uid -> (node, sort key, req, indices, "ns/pod")
        self.pods: dict[str, tuple[str, tuple[object, ...], PodRequest, tuple[int, ...] | None, str]] = {}
        self.by_node: dict[str, set[str]] = {}
        self.assumed: dict[str, tuple[str, PodRequest, float]] = {}  # uid -> (node, request, expiry)
        # node -> {uid: order} of its assumed pods; order = when the uid was first assumed (a pod decided
        # again keeps its place), the order in which they are applied after the node's bound pods
        self._assumed_on: dict[str, dict[str, int]] = {}
        self._assume_order = 0
        self._tallies: dict[str, Tally] = {}  # node -> the tally its published state was made from
        # what the index read from each object last time (`_node_inputs`, `_pod_inputs`): an update that
        # changes none of it (a heartbeat, a pod's IP or conditions) costs a compare, nothing more. A pod's
        # spec is kept as its JSON bytes: the decoded lists and dicts of every bound pod would be objects the
        # garbage collector walks on each full collection
        self._node_seen: dict[str, tuple[object, ...]] = {}
        self._pod_seen: dict[str, tuple[object, ...]] = {}
        self.pending: dict[str, PodRequest] = {}  # uid -> GPU request of an unbound pod the watch saw
        self.clock: Callable[[], float] = time.monotonic
        # decisions for pods the pending watch has not shown yet, each for UNCONFIRMED_SECONDS: uid -> (node,
        # request); the oldest dropped first beyond MAX_UNCONFIRMED
        self.unconfirmed: TTLCache[str, tuple[str, PodRequest]] = TTLCache(
            maxsize=MAX_UNCONFIRMED, ttl=UNCONFIRMED_SECONDS, timer=lambda: self.clock()
        )
        engine.on_assume = self.assume
        self._listed = {"nodes": False, "pods": False}
        self._pod_list_kwargs = selector
        self.profile_error: str | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> None:
        from kubernetes import client

        from kgwe.cluster.client import api_client

        if self._api is None:
            self._api = api_client(self._kubeconfig)
        core = client.CoreV1Api(self._api)
        loops = [
            ("nodes", lambda **kw: core.list_node(**kw), self._apply_nodes, self._node_event),
            (
                "pods",
                lambda **kw: core.list_pod_for_all_namespaces(**self._pod_list_kwargs, **kw),
                self._apply_all_pods,
                self._any_pod_event,
            ),
            (
                "scoring",
                lambda **kw: core.list_namespaced_config_map(
                    self.namespace, field_selector=f"metadata.name={SCORING_CONFIGMAP}", **kw
                ),
                self._apply_configmaps,
                self._configmap_event,
            ),
        ]
        for name, lister, on_list, on_event in loops:
            t = threading.Thread(
                target=self._loop,
                args=(name, lister, on_list, on_event),
                daemon=True,
                name=f"kgwe-watch-{name}",
            )
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._expire_loop, daemon=True, name="kgwe-assume-expiry")
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()

    def wait_ready(self, timeout: float) -> bool:
        end = threading.Event()
        for _ in range(int(timeout * 20)):
            if self.engine.ready:
                return True
            end.wait(0.05)
        return self.engine.ready

    # ---- list + watch ------------------------------------------------------------------------------------
    def _loop(
        self,
        kind: str,
        lister: Callable[..., Any],
        on_list: Callable[[list[Any]], None],
        on_event: Callable[[str, Any], None],
    ) -> None:
        """One list+watch loop (kgwe.runtime.watch) per kind; the engine is ready once each kind listed. The
        objects come as decoded JSON: the callbacks name their type (kgwe.objects)."""
        from kgwe.runtime.watch import list_and_watch

        def listed(items: Iterable[Any]) -> None:
            on_list(list(items))
            if kind in self._listed:
                self._listed[kind] = True
                if all(self._listed.values()):
                    self.engine.ready = True

        def restarted(_error: BaseException | None) -> None:
            if self.metrics is not None:
                self.metrics.watch_restarts.labels(kind).inc()

        list_and_watch(
            lister,
            on_list=listed,
            on_event=on_event,
            on_restart=restarted,
            stop=self._stop,
            watch_timeout_seconds=WATCH_SECONDS,
        )

    # ---- nodes -------------------------------------------------------------------------------------------
    def _decode(self, text: str) -> NodeTopology:
        """The topology annotation decoded, once per distinct text: a node's status updates (heartbeats, a
        pod's resources) bring the same annotation again, and decoding it cost most of a node event. Nodes
        of one machine type written alike share the object (the scoring core memoises per topology)."""
        hit = self._topologies.get(text)
        if hit is None:
            if len(self._topologies) >= MAX_TOPOLOGIES:
                self._topologies.clear()
            hit = self._topologies[text] = decode(text)
        return hit

    def _node_event(self, typ: str, raw: Node) -> None:
        name = (raw.get("metadata") or {}).get("name")
        if not name:
            return
        with self._mu:
            if typ == "DELETED":
                self.bases.pop(name, None)
                self.holders.pop(name, None)
                self._tallies.pop(name, None)
                self._node_seen.pop(name, None)
                with self.engine.lock:
                    self.engine.table.remove(name)
                return
            seen = _node_inputs(raw)
            if name in self.bases and self._node_seen.get(name) == seen:
                return
            self._node_seen[name] = seen
            self.bases[name] = node_state(raw, self._decode)
            self.holders[name] = gpu_holders(raw)
            self._publish(name)

    def _apply_nodes(self, items: list[Node]) -> None:
        with self._mu:
            fresh = {n["metadata"]["name"]: node_state(n, self._decode) for n in items}
            for gone in set(self.bases) - set(fresh):
                self._tallies.pop(gone, None)
                with self.engine.lock:
                    self.engine.table.remove(gone)
            self.bases = fresh
            self.holders = {n["metadata"]["name"]: gpu_holders(n) for n in items}
            self._node_seen = {n["metadata"]["name"]: _node_inputs(n) for n in items}
            for name in fresh:
                self._publish(name)

    # ---- pods --------------------------------------------------------------------------------------------
    def _any_pod_event(self, typ: str, raw: Pod) -> None:
        """One event of the pod watch: the pending side first (a bind ends a pod's pending state, as does a
        deletion), then, for a bound pod, the accounting side. An unbound pod's update or deletion never
        touches accounting (so it cannot end an assumption: only a bind, a new decision or the expiry do)."""
        if self.verify_decisions:
            self._pending_event(typ, raw)
        if (raw.get("spec") or {}).get("nodeName"):
            self._pod_event(typ, raw)

    def _apply_all_pods(self, items: list[Pod]) -> None:
        """A listing of the pod watch: bound pods replace the accounting, pending ones the pending set."""
        bound = [p for p in items if (p.get("spec") or {}).get("nodeName")]
        if self.verify_decisions:
            self._apply_pending([p for p in items if not (p.get("spec") or {}).get("nodeName")])
        self._apply_pods(bound)

    def _pod_event(self, typ: str, raw: Pod) -> None:
        with self._mu:
            touched = self._set_pod(raw, deleted=typ == "DELETED")
            for n in touched:
                self._publish(n)

    def _apply_pods(self, items: list[Pod]) -> None:
        with self._mu:
            touched = set(self.by_node)
            self.pods.clear()
            self.by_node.clear()
            self._pod_seen.clear()
            for p in items:
                touched |= self._set_pod(p, deleted=False)  # includes nodes of assumptions the list ends
            for n in touched:
                self._publish(n)

    def _set_pod(self, raw: Pod, deleted: bool) -> set[str]:
        meta = raw.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return set()
        seen = None if deleted else _pod_inputs(raw)
        if (
            seen is not None
            and uid in self.pods
            and uid not in self.assumed
            and self._pod_seen.get(uid) == seen
        ):
            return set()  # a status update that changes nothing the accounting reads
        node: str = (raw.get("spec") or {}).get("nodeName") or ""
        held = None if deleted or not node else pod_holds(raw)
        entry = None
        if held is not None and node:
            entry = (node, (meta.get("creationTimestamp") or "", uid), held[0], held[1], pod_key(raw))
            if uid not in self.assumed and self.pods.get(uid) == entry:
                return set()  # a status update: what the pod holds, and where, is as it was
        touched = set()
        unchanged = entry is not None and self._bind_keeps_sequence(uid, entry)
        assumed = self._drop_assumed(uid)  # the watch has the pod bound (or gone): it counts from here
        if assumed is not None:
            touched.add(assumed[0])
            self._count_assumed()
        old = self.pods.pop(uid, None)
        self._pod_seen.pop(uid, None)
        if old is not None:
            self.by_node.get(old[0], set()).discard(uid)
            touched.add(old[0])
        if entry is not None:
            if old is None and not self.verify_decisions and entry[2].wants_gpu:
                self.engine.observe(entry[2])  # first seen (bound): the workload mix follows it
            self.pods[uid] = entry
            self._pod_seen[uid] = seen  # type: ignore[assignment]
            self.by_node.setdefault(node, set()).add(uid)
            touched.add(node)
        if unchanged:  # the node's pods, in the order they are applied, are the ones it was published with
            touched.discard(node)
        return touched

    def _bind_keeps_sequence(
        self, uid: str, entry: tuple[str, tuple[object, ...], PodRequest, tuple[int, ...] | None, str]
    ) -> bool:
        """Whether binding this assumed pod leaves its node's sequence of pods (`_publish`) as it is: it was
        the first assumed pod on the node it is bound to, with the request it was assumed with, on GPUs the
        agent has not named, and is newer than every pod bound there (bound pods come first, in creation
        order, then assumed ones). The usual bind; the node then need not be recomputed."""
        node, key, req, indices, who = entry
        assumed = self.assumed.get(uid)
        if (
            assumed is None
            or assumed[0] != node
            or assumed[1] != req
            or indices is not None
            or uid in self.pods
        ):
            return False
        on_node = self._assumed_on.get(node) or {}
        if min(on_node, key=on_node.__getitem__, default=None) != uid or node not in self._tallies:
            return False
        if who in self.holders.get(node, {}).values():
            return False
        return all(self.pods[u][1] < key for u in self.by_node.get(node, ()))

    def _publish(self, name: str) -> None:
        """Recompute one node from its base, bound pods and assumed pods, and swap it into the table."""
        base = self.bases.get(name)
        if base is None:
            self._tallies.pop(name, None)
            return
        pods = sorted((self.pods[u] for u in self.by_node.get(name, ())), key=lambda p: p[1])
        known = {p[4] for p in pods}
        foreign = sorted(i for i, who in self.holders.get(name, {}).items() if who not in known)
        held: list[tuple[PodRequest, tuple[int, ...] | None]] = [
            (FOREIGN_GPU, (i,)) for i in foreign
        ]  # first: KGWE's pods avoid GPUs others hold
        held += [(p[2], p[3]) for p in pods]
        on_node = self._assumed_on.get(name) or {}
        held += [(self.assumed[u][1], None) for u in sorted(on_node, key=on_node.__getitem__)]
        tally = self._tallies[name] = tally_of(base, held, self.engine.table.topology_chooser)
        self._swap_in(tally_state(base, tally))

    def _swap_in(self, state: NodeState) -> None:
        name = state.name
        with self.engine.lock:
            table = self.engine.table
            row = table.rows.get(name)
            if row is not None and table.nodes[row] == state:
                return  # e.g. a bound pod's status update: the node's row (and every cached answer) stays
            table.upsert(state)

    # ---- assumed pods ----------------------------------------------------------------------------------
    def assume(self, uid: str, node: str, req: PodRequest) -> None:
        """Count a pod on the node filter left it before its bind is seen (Engine.on_assume) — only a pod
        the pending watch has seen with this very request; otherwise wait briefly for the watch."""
        with self._mu:
            if uid in self.pods:  # already seen bound: the watch was faster
                return
            if not self.verify_decisions:  # the caller is kube-scheduler (module docstring)
                self._assume(uid, node, req)
                return
            seen = self.pending.get(uid)
            if seen is None:
                self.unconfirmed.pop(uid, None)
                self.unconfirmed[uid] = (node, req)
                return
            if seen != req:
                log.warning(
                    "filter request for pod %s does not match the pod the watch saw; not assumed", uid
                )
                return
            self._assume(uid, node, req)

    def _assume(self, uid: str, node: str, req: PodRequest) -> None:
        previous = self.assumed.get(uid)
        if previous is None or previous[0] != node:
            on_node = len(self._assumed_on.get(node) or ())
            if on_node >= MAX_ASSUMED_PER_NODE:
                log.warning("node %s already has %d assumed pods; not assuming %s", node, on_node, uid)
                return
        self._add_assumed(uid, node, req)
        self._count_assumed()
        tally, base = self._tallies.get(node), self.bases.get(node)
        if previous is None and tally is not None and base is not None:
            # a new assumption comes last on its node: the published tally plus this one pod
            tally = tally.copy()
            tally_add(tally, base, req, None, self.engine.table.topology_chooser)
            self._tallies[node] = tally
            self._swap_in(tally_state(base, tally))
            return
        for n in {node, previous[0]} if previous else {node}:
            self._publish(n)

    def _add_assumed(self, uid: str, node: str, req: PodRequest) -> None:
        """Record an assumption; a pod decided again keeps its place in the order (`_assumed_on`)."""
        previous = self.assumed.get(uid)
        if previous is None:
            self._assume_order += 1
            order = self._assume_order
        else:
            order = self._assumed_on[previous[0]].pop(uid)
            if not self._assumed_on[previous[0]]:
                del self._assumed_on[previous[0]]
        self.assumed[uid] = (node, req, self.clock() + ASSUME_SECONDS)
        self._assumed_on.setdefault(node, {})[uid] = order

    def _drop_assumed(self, uid: str) -> tuple[str, PodRequest, float] | None:
        """End an assumption (the caller recomputes its node); None if the pod had none."""
        gone = self.assumed.pop(uid, None)
        if gone is not None:
            on_node = self._assumed_on[gone[0]]
            del on_node[uid]
            if not on_node:
                del self._assumed_on[gone[0]]
        return gone

    # ---- pending pods ----------------------------------------------------------------------------------
    def _pending_event(self, typ: str, raw: Pod) -> None:
        with self._mu:
            self._set_pending(raw, deleted=typ == "DELETED")

    def _apply_pending(self, items: list[Pod]) -> None:
        with self._mu:
            self.pending.clear()
            for p in items:
                self._set_pending(p, deleted=False)

    def _set_pending(self, raw: Pod, deleted: bool) -> None:
        meta = raw.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        req = None
        if not deleted and not (raw.get("spec") or {}).get("nodeName"):
            held = pod_holds(raw)
            req = held[0] if held is not None and held[0].wants_gpu else None
        if req is None:
            self.pending.pop(uid, None)
            self.unconfirmed.pop(uid, None)
            return
        if uid not in self.pending:
            self.engine.observe(req)
        self.pending[uid] = req
        waiting = self.unconfirmed.pop(uid, None)  # None once expired
        if waiting is not None and waiting[1] == req:
            self._assume(uid, waiting[0], req)

    def expire_assumed(self) -> None:
        """Forget assumptions older than ASSUME_SECONDS and recompute their nodes."""
        with self._mu:
            for n in self._expired():
                self._publish(n)

    def _expired(self) -> set[str]:
        now = self.clock()
        self.unconfirmed.expire(now)
        gone = [uid for uid, (_, _, expiry) in self.assumed.items() if expiry <= now]
        nodes = {self.assumed[uid][0] for uid in gone}
        for uid in gone:
            self._drop_assumed(uid)
        if gone and self.metrics is not None:
            self.metrics.assumptions_expired.inc(len(gone))
            self._count_assumed()
        return nodes

    def _count_assumed(self) -> None:
        if self.metrics is not None:
            self.metrics.assumed.set(len(self.assumed))

    def _expire_loop(self) -> None:
        """The one place assumptions expire (not on the decision path): every ASSUME_SECONDS / 6."""
        while not self._stop.wait(ASSUME_SECONDS / 6):
            self.expire_assumed()

    # ---- scoring profiles ------------------------------------------------------------------------
    def _configmap_event(self, typ: str, raw: ConfigMap) -> None:
        self._apply_configmaps([] if typ == "DELETED" else [raw])

    def _apply_configmaps(self, items: list[ConfigMap]) -> None:
        if not items:
            return  # no ConfigMap: keep what we have (built-in default at start)
        data = items[0].get("data") or {}
        text = data.get(SCORING_CONFIG_KEY) or next((v for k, v in data.items() if k.endswith(".json")), None)
        if text is None:
            self._profile_failed("kgwe-scoring has no profiles.json key")
            return
        try:
            profiles = profiles_from_document(orjson.loads(text))
        except (orjson.JSONDecodeError, ProfileError) as exc:
            self._profile_failed(str(exc))
            return
        self.engine.set_profiles(profiles)
        self.profile_error = None
        if self.metrics is not None:
            self.metrics.profile_reloads.labels("ok").inc()
        log.info("scoring profiles loaded: %s", ", ".join(sorted(k for k in profiles if k)))

    def _profile_failed(self, message: str) -> None:
        self.profile_error = message
        if self.metrics is not None:
            self.metrics.profile_reloads.labels("error").inc()
        log.error("kgwe-scoring rejected, keeping the previous profiles: %s", message)
