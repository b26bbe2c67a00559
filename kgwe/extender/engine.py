"""Answers kube-scheduler's filter and prioritize calls from the in-memory node table. No I/O here: the
server hands in request bytes and gets back (status, reply bytes); the watch index and the static inventory
feed the table through `Engine.table` under `Engine.lock` (a plain lock: only the watch thread writes).

Wire format (k8s.io/kube-scheduler/extender/v1, Go structs without json tags => PascalCase keys):
  request  {"Pod": v1.Pod, "Nodes": v1.NodeList | null, "NodeNames": [..] | null}
  filter   {"Nodes": NodeList|null, "NodeNames": [..]|null, "FailedNodes": {n: why},
            "FailedAndUnresolvableNodes": {n: why}, "Error": ""}
  priority [{"Host": n, "Score": 0..10}]
FailedNodes are filled only when no node is left: kube-scheduler reads them for a pod it cannot place (the
FailedScheduling event, preemption) and never otherwise, and 1,000 sentences are most of a reply's bytes.
A pod decided in filter is answered from the nodes ranked by their cached scores and a search of the
request's bytes for their names (`_filter_ranked`), without decoding the list.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from itertools import repeat
from typing import Any

import numpy as np
import orjson
from cachetools import LRUCache

from kgwe.extender import core, nodenames
from kgwe.extender.core import OK, NodeTable, ShapeCache, WorkloadType, describe, dynamic_term
from kgwe.extender.profile import DEFAULT_PROFILE, Profile
from kgwe.extender.request import PodRequest, RequestError, parse_pod
from kgwe.observability import tracing
from kgwe.topology import choice
from kgwe.topology.model import NodeTopology

MAX_PRIORITY = 10
_SCORE_JSON = np.array([b"%d}" % i for i in range(MAX_PRIORITY + 1)], dtype=object)  # score + closing brace
UNKNOWN_CODE = -1  # the reason code of a node not in the index (beside core.Reason)
UNKNOWN_NODE = "kgwe: node is not in the extender's index yet (no GPU information)"
# Failures no preemption can fix go to FailedAndUnresolvableNodes so kube-scheduler does not try.
_UNRESOLVABLE_CODES = np.array([core.NO_GPU, core.PRODUCT, core.FAMILY, core.MEMORY, core.NO_TOPOLOGY])
MIX_REFRESH_EVERY = 512  # GPU requests between refreshes of the fragmentation term's workload mix
# Best-ranked nodes looked up in a request's node list before every name is resolved instead. A miss costs a
# search of the whole list (27 KB at 1,000 nodes); misses come in runs when the index counts fewer GPUs
# taken than kube-scheduler does (pods of other schedulers on nodes without the agent's annotation).
RANKED_PROBES = 4
REFERENCE_GBPS = 450.0  # H100 SXM NVLink per direction: the bandwidth that earns the full absolute score


_DECIDED_END = b'],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'
_STR = {str}  # the one element type NodeNames may hold (checked with set(map(type, names)): C speed)


class WireError(RequestError):
    """The request body is not an ExtenderArgs object."""


def _parse_args(body: bytes) -> tuple[PodRequest, list[str], list[Any] | None]:
    """(pod request, node names, original Node objects when not nodeCacheCapable)."""
    try:
        args = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"body is not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise WireError("body must be a JSON object (ExtenderArgs)")
    if "Pod" not in args:
        raise WireError("ExtenderArgs.Pod is missing")
    req = parse_pod(args["Pod"])
    names = args.get("NodeNames")
    nodes = args.get("Nodes")
    if names is not None:
        if not isinstance(names, list) or (names and set(map(type, names)) != _STR):
            raise WireError("ExtenderArgs.NodeNames must be a list of strings")
        return req, names, None
    if nodes is not None:
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if not isinstance(items, list):
            raise WireError("ExtenderArgs.Nodes must be a NodeList with items")
        out = []
        for item in items:
            name = ((item or {}).get("metadata") or {}).get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                raise WireError("every node in ExtenderArgs.Nodes.items needs metadata.name")
            out.append(name)
        return req, out, items
    raise WireError("ExtenderArgs needs NodeNames (nodeCacheCapable) or Nodes")


class Engine:
    """Filter/prioritize over a NodeTable; profiles swapped atomically on ConfigMap change."""

    def __init__(self, table: NodeTable | None = None, profiles: Mapping[str, Profile] | None = None) -> None:
        self.table = table or NodeTable()
        self.cache = ShapeCache(self.table)
        self.lock = threading.RLock()
        self.profiles: Mapping[str, Profile] = dict(profiles or {"": DEFAULT_PROFILE})
        self.ready = False
        self.tick = 0
        self._mix: Counter[tuple[Any, ...]] = Counter()
        self._since_mix = 0
        self._mix_set: dict[tuple[Any, ...], float] = {}  # the mix the table currently protects
        self._parts: dict[int, tuple[list[str], np.ndarray]] = {}  # id(names) -> (names, JSON frame)
        self._host_piece: dict[str, bytes] = {}  # name -> b',{"Host":"name","Score":'
        self._list_lookups = self._list_hits = 0
        self._why: dict[
            tuple[object, ...], tuple[np.ndarray, np.ndarray]
        ] = {}  # shape -> (row versions, sentences)
        # NodeNames bytes -> (layout, names, rows, known), the 64 lists used last
        self._lists: LRUCache[bytes, tuple[Any, ...]] = LRUCache(maxsize=64)
        self._live: tuple[int, np.ndarray] = (-1, np.zeros(0, dtype=np.int64))  # (layout, live rows)
        self.on_decision: Callable[[str, int], None] | None = None  # metrics hook (verb, failed nodes)
        # (pod uid, node, request) whenever filter leaves a GPU pod exactly one node: kube-scheduler will
        # bind it there, so the watch index counts it at once (called without self.lock held)
        self.on_assume: Callable[[str, str, PodRequest], None] | None = None
        # True: filter only records a decision and flush_assumptions (called by the server after the
        # reply is written, and first thing by every request) assumes it
        self.defer_assumptions = False
        self.deferred: list[tuple[str, str, PodRequest]] = []
        # metrics hook: the core.Reason codes of the nodes a filter rejected (UNKNOWN_CODE: not indexed)
        self.on_failures: Callable[[np.ndarray], None] | None = None
        self._install_topology()

    def _install_topology(self) -> None:
        """Score GPU sets with kgwe.topology.choice (the same search `kgwe agent` reports)."""

        def chooser(topo: NodeTopology, free: frozenset[int], k: int) -> tuple[int, ...] | None:
            c = choice.choose(topo, free, k)
            return c.gpus if c else None

        def scorer(
            topo: NodeTopology,
            free: frozenset[int],
            k: int,
            preference: str,
            min_bandwidth_gbps: float | None,
        ) -> float | None:
            """kgwe.topology.choice's node_score is relative to the node's own best set; a pod that asks for
            bandwidth also gets the absolute bottleneck, so a real NVLink pair beats a PCIe-bridged one."""
            s = choice.node_score(topo, free, k, preference, min_bandwidth_gbps)
            if s is None or (preference != "NVLinkOptimal" and min_bandwidth_gbps is None):
                return s
            c = choice.choose(topo, free, k, preference=preference)
            bw = c.bottleneck_gbps if c else 0.0
            return s * (0.5 + 0.5 * min(1.0, bw / REFERENCE_GBPS))

        self.table.topology_scorer = scorer
        self.table.topology_chooser = chooser

    def set_profiles(self, profiles: Mapping[str, Profile]) -> None:
        with self.lock:
            self.profiles = dict(profiles)
            if "" not in self.profiles:
                self.profiles[""] = DEFAULT_PROFILE

    def profile_for(self, req: PodRequest) -> Profile:
        if req.profile and req.profile in self.profiles:
            return self.profiles[req.profile]
        return self.profiles[""]

    def observe(self, req: PodRequest) -> None:
        """Learn the request mix the fragmentation term protects (FGD's target workload) from pods the
        watch saw created, never from request bodies: anyone who reaches the port could skew those."""
        with self.lock:
            self._observe(req, self.profile_for(req))

    def _observe(self, req: PodRequest, profile: Profile) -> None:
        if not req.gpus or profile.fragmentation <= 0:
            return
        key = (req.gpus, req.gpu_milli, req.cpu_milli, req.memory_mib, req.products)
        if self._since_mix == 0 and self._mix_set == {key: 1.0} and self._mix == {key: 1}:
            return  # one shape so far, and this is it: the refresh below would end where it starts
        self._mix[key] += 1
        self._since_mix += 1
        if self._since_mix >= MIX_REFRESH_EVERY or (len(self._mix) == 1 and self._since_mix == 1):
            self._since_mix = 0
            total = sum(self._mix.values())
            mix = {k: n / total for k, n in self._mix.most_common(32)}
            for key in list(self._mix):  # decay so the mix follows the workload
                self._mix[key] = self._mix[key] // 2 or 1
            # A new mix re-scores every node; do it only when the workload really moved (L1 > 0.1).
            moved = sum(
                abs(mix.get(k, 0.0) - self._mix_set.get(k, 0.0)) for k in set(mix) | set(self._mix_set)
            )
            if moved > 0.1:
                self._mix_set = mix
                self.table.set_mix(
                    WorkloadType(g, m, c, r, w, products) for (g, m, c, r, products), w in mix.items()
                )

    def node_view(self, name: str) -> dict[str, Any] | None:
        """What the index holds for one node (GET /debug/nodes/NAME): for people and end-to-end tests."""
        with self.lock:
            t = self.table
            row = t.rows.get(name)
            if row is None:
                return None
            gpus = int(t.gpu_count[row])
            node = t.nodes[row]
            return {
                "name": name,
                "gpus": gpus,
                "gpuUsedMilli": [1000 - int(x) for x in t.gpu_free[row, :gpus]],
                "migFree": {p: int(t.mig_free[row, c]) for p, c in t.mig_names.items() if t.mig_free[row, c]},
                "cpuFreeMilli": int(t.cpu_free[row]),
                "product": node.product if node else "",
                "topology": getattr(node.topology, "name", None) if node else None,
            }

    # ---- request path ------------------------------------------------------------------------------------
    def _parse(self, body: bytes) -> tuple[PodRequest, list[str], list[Any] | None, np.ndarray, np.ndarray]:
        """Parse ExtenderArgs; the NodeNames list (the bulk of the body, usually the same list again and
        again) is resolved to table rows once and remembered by its bytes."""
        cut = body.rfind(b'"NodeNames":')
        tail = body[cut:] if cut > 0 else b""
        hit = self._lists.get(tail) if tail else None
        self._list_lookups += 1
        if hit is not None and hit[0] == self.table.layout:
            self._list_hits += 1
            try:
                args = orjson.loads(body[:cut] + b'"NodeNames":null}')
            except orjson.JSONDecodeError:
                args = None
            if isinstance(args, dict) and "Pod" in args and args.get("Nodes") is None:
                return parse_pod(args["Pod"]), hit[1], None, hit[2], hit[3]
        req, names, items = _parse_args(body)
        rows = np.fromiter(map(self.table.rows.get, names, repeat(-1)), dtype=np.int64, count=len(names))
        known = rows >= 0
        # kube-scheduler's parallel filter can reorder the list every cycle: stop remembering lists (and
        # paying the check below) when they do not come back
        worth = self._list_lookups < 64 or self._list_hits * 4 >= self._list_lookups
        if self._list_lookups >= 4096:
            self._list_lookups, self._list_hits = self._list_lookups // 2, self._list_hits // 2
        if worth and items is None and tail and orjson.loads(b"{" + tail) == {"NodeNames": names}:
            self._lists[tail] = (self.table.layout, names, rows, known)
        return req, names, items, rows, known

    def _evaluate(
        self, req: PodRequest, rows: np.ndarray, known: np.ndarray, profile: Profile
    ) -> tuple[np.ndarray, np.ndarray]:
        reason = np.zeros(len(rows), dtype=np.int8)
        score = np.zeros(len(rows))
        if known.any():
            r, s, _ = self.cache.answer(rows[known], req, profile)
            reason[known], score[known] = r, s
        return reason, score

    def _reasons(self, req: PodRequest, rows: np.ndarray, reason: np.ndarray) -> np.ndarray:
        """Failure sentences for `rows` (all known and failed), cached per shape while a row is unchanged."""
        t = self.table
        entry = self._why.get(req.shape)
        if entry is None or len(entry[0]) < t.cap:
            if len(self._why) > 256:
                self._why.clear()
            entry = (np.full(t.cap, -1, np.int64), np.empty(t.cap, dtype=object))
            self._why[req.shape] = entry
        ver, text = entry
        stale = np.nonzero(ver[rows] != t.version[rows])[0]
        for i in stale:
            row = int(rows[i])
            text[row] = describe(int(reason[i]), t, row, req)
            ver[row] = t.version[row]
        out: np.ndarray = text[rows]
        return out

    def filter(self, body: bytes) -> bytes:
        """ExtenderArgs bytes -> ExtenderFilterResult bytes. The decision holds the lock: row numbers
        resolved from names must not be reused by a node the watch thread adds meanwhile."""
        if tracing.TRACER is not None:
            return self._traced("filter", self._filter_untraced, body)
        return self._filter_untraced(body)

    def _filter_untraced(self, body: bytes) -> bytes:
        self.flush_assumptions()
        with self.lock:
            reply, decided = self._filter(body)
        if decided is not None and self.on_assume is not None:
            if self.defer_assumptions:
                self.deferred.append(decided)
            else:
                self.on_assume(*decided)
        return reply

    def prioritize(self, body: bytes) -> bytes:
        """ExtenderArgs bytes -> HostPriorityList bytes (scores 0..10)."""
        if tracing.TRACER is not None:
            return self._traced("prioritize", self._prioritize_untraced, body)
        return self._prioritize_untraced(body)

    def _prioritize_untraced(self, body: bytes) -> bytes:
        self.flush_assumptions()
        with self.lock:
            return self._prioritize(body)

    @staticmethod
    def _traced(verb: str, decide: Callable[[bytes], bytes], body: bytes) -> bytes:
        """One decision as a root span (kube-scheduler sends no trace context), keyed by the pod's UID."""
        with tracing.root_span(f"kgwe.extender.{verb}") as span:
            reply = decide(body)
            try:
                pod = orjson.loads(body).get("Pod") or {}
                meta = pod.get("metadata") or {}
                span.set_attribute("k8s.pod.uid", str(meta.get("uid", "")))
                span.set_attribute("k8s.namespace.name", str(meta.get("namespace", "")))
            except (orjson.JSONDecodeError, AttributeError):
                pass  # the decision already answered the bad body with its error
            span.set_attribute("kgwe.reply_bytes", len(reply))
        return reply

    def flush_assumptions(self) -> None:
        """Make the assumptions of decisions already answered, and score the node each one changed for
        the request shape just decided (the next pods are often of the same shape). With
        `defer_assumptions` the server calls this right after writing the reply, off kube-scheduler's
        scheduling cycle; every filter and prioritize calls it first, so no decision is ever made without
        the assumptions of the decisions before it."""
        while self.deferred:
            uid, node, req = self.deferred.pop(0)
            if self.on_assume is not None:
                self.on_assume(uid, node, req)
            with self.lock:
                row = self.table.rows.get(node)
                if row is not None:
                    self.cache.answer(np.array([row]), req, self.profile_for(req))

    def _filter(self, body: bytes) -> tuple[bytes, tuple[str, str, PodRequest] | None]:
        ranked = self._filter_ranked(body)
        if ranked is not None:
            return ranked
        req, names, items, rows, known = self._parse(body)
        profile = self.profile_for(req)
        reply, failed, only, codes = self._filter_answer(req, names, items, rows, known, profile)
        if codes is not None and self.on_failures is not None:
            self.on_failures(codes)
        if failed and self.on_decision:
            self.on_decision("filter", failed)
        decided = (req.uid, only, req) if req.uid and only is not None else None
        return reply, decided

    def _filter_ranked(self, body: bytes) -> tuple[bytes, tuple[str, str, PodRequest] | None] | None:
        """A pod decided in filter, the usual case, answered without resolving the node list: the index's
        nodes in the order of their cached scores, the first one the list holds (kgwe.extender.nodenames).
        None when this does not apply (the list is not plain, the pod is not decided in filter, a per-request
        score term, none of the best RANKED_PROBES nodes was sent): the full answer then."""
        tail = nodenames.compact_tail(body)
        if tail is None:
            return None
        try:
            args = orjson.loads(nodenames.head(body, tail))
        except orjson.JSONDecodeError:
            return None
        if not isinstance(args, dict) or "Pod" not in args or args.get("Nodes") is not None:
            return None
        req = parse_pod(args["Pod"])
        profile = self.profile_for(req)
        if not (req.wants_gpu and profile.decide_in_filter and (req.shared or not req.soft_preferences)):
            return None
        if profile.dynamic:
            return None
        rows = self._live_rows()
        reason, score, _ = self.cache.answer(rows, req, profile)
        ok = np.flatnonzero(reason == OK)
        if not len(ok):
            return None
        score = score[ok]
        for _ in range(min(RANKED_PROBES, len(ok))):
            best = int(np.argmax(score))
            name = self.table.names[int(rows[ok[best]])]
            if name is not None and nodenames.holds(tail, name):
                self.tick += 1  # a decision moves RoundRobin's turn, as a scored one does (_final_scores)
                reply = b'{"Nodes":null,"NodeNames":[' + orjson.dumps(name) + _DECIDED_END
                return reply, ((req.uid, name, req) if req.uid else None)
            score[best] = -np.inf
        return None

    def _live_rows(self) -> np.ndarray:
        """Rows of the nodes in the index (remembered while no name gets or loses a row)."""
        layout, rows = self._live
        if layout != self.table.layout:
            rows = np.flatnonzero(self.table.live)
            self._live = (self.table.layout, rows)
        return rows

    def _filter_answer(
        self,
        req: PodRequest,
        names: list[str],
        items: list[Any] | None,
        rows: np.ndarray,
        known: np.ndarray,
        profile: Profile,
    ) -> tuple[bytes, int, str | None, np.ndarray | None]:
        """(reply, failed node count, the one node left or None, the reason code of every failed node or
        None). Failed nodes are listed only when none is left: kube-scheduler reads them for a pod it cannot
        place (its FailedScheduling event, preemption) and never otherwise."""
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        codes = None
        only = None
        if not req.wants_gpu:  # nothing for KGWE to decide
            chosen = np.ones(len(names), dtype=bool)
        else:
            reason, score = self._evaluate(req, rows, known, profile)
            passed = known & (reason == OK)
            decide = profile.decide_in_filter and (req.shared or not req.soft_preferences)
            if decide and passed.sum() > 1:
                # one node left => kube-scheduler skips prioritize: one round trip, exact placement
                final = self._final_scores(profile, req, names, score)
                chosen = np.zeros(len(names), dtype=bool)
                chosen[int(np.argmax(np.where(passed, final, -np.inf)))] = True
            else:
                chosen = passed
            if not chosen.any():
                failed, unresolvable, codes = self._failures(req, names, rows, known, reason)
            elif chosen.sum() == 1:
                only = names[int(np.argmax(chosen))]
        if chosen.all():
            ok_names, ok_items = names, items
        else:
            ok_idx = np.flatnonzero(chosen).tolist()
            ok_names = [names[i] for i in ok_idx]
            ok_items = [items[i] for i in ok_idx] if items is not None else None
        reply: dict[str, Any] = {
            "Nodes": {"metadata": {}, "items": ok_items} if items is not None else None,
            "NodeNames": ok_names if items is None else None,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        return orjson.dumps(reply), len(failed), only, codes

    def _failures(
        self, req: PodRequest, names: list[str], rows: np.ndarray, known: np.ndarray, reason: np.ndarray
    ) -> tuple[dict[str, str], dict[str, str], np.ndarray]:
        """(FailedNodes, FailedAndUnresolvableNodes, reason codes) of a pod no node was left for."""
        bad = np.flatnonzero(known)
        texts = self._reasons(req, rows[bad], reason[bad])
        failed = dict(zip([names[i] for i in bad], texts.tolist(), strict=True))
        unresolvable = {names[i]: failed[names[i]] for i in bad[np.isin(reason[bad], _UNRESOLVABLE_CODES)]}
        unknown = np.flatnonzero(~known)
        for i in unknown:
            failed[names[i]] = unresolvable[names[i]] = UNKNOWN_NODE
        codes = np.concatenate([reason[bad], np.full(len(unknown), UNKNOWN_CODE, dtype=np.int8)])
        return failed, unresolvable, codes

    def _prioritize(self, body: bytes) -> bytes:
        req, names, _, rows, known = self._parse(body)
        if not req.wants_gpu:
            return orjson.dumps([{"Host": n, "Score": 0} for n in names])
        profile = self.profile_for(req)
        reason, score = self._evaluate(req, rows, known, profile)
        score = self._final_scores(profile, req, names, score)
        ints = np.where(known & (reason == OK), np.clip(np.rint(score / 10.0), 0, MAX_PRIORITY), 0)
        return self._priority_json(names, ints.astype(np.int64))

    def _final_scores(
        self, profile: Profile, req: PodRequest, names: list[str], score: np.ndarray
    ) -> np.ndarray:
        """Cached scores plus the per-request part of RoundRobin / Random."""
        self.tick += 1
        dyn = dynamic_term(profile, names, req.uid, self.tick)
        if dyn is None:
            return score
        total = profile.topology + profile.resource + profile.balance
        total += profile.fragmentation if self.table.mix else 0.0
        return score + (dyn - 50.0) * profile.resource / max(total, 1e-9)

    def _priority_json(self, names: list[str], ints: np.ndarray) -> bytes:
        """HostPriorityList bytes. The per-host JSON around each score is built once per node-name list
        (kube-scheduler repeats the same list) and the scores are spliced in."""
        if not names:
            return b"[]"
        hit = self._parts.get(id(names))
        if hit is None or hit[0] is not names:
            piece = self._host_piece
            if len(piece) > 4 * len(self.table.rows) + 1024:
                piece.clear()
            pieces = [
                piece.get(n) or piece.setdefault(n, b',{"Host":' + orjson.dumps(n) + b',"Score":')
                for n in names
            ]
            pieces[0] = pieces[0][1:]  # no comma before the first host
            frame = np.empty(2 * len(names), dtype=object)
            frame[0::2] = pieces
            hit = self._parts[id(names)] = (names, frame)
            if len(self._parts) > 64:
                self._parts.pop(next(iter(self._parts)))
        frame = hit[1]
        frame[1::2] = _SCORE_JSON[ints]
        return b"[" + b"".join(frame.tolist()) + b"]"
