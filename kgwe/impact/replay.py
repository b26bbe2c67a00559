"""Replay a demand record through one policy: the extender's filter/score core places each pod as it arrives,
a pod no node can take waits (first come, first served) until a departure frees room, and each pod runs for
its recorded duration from the moment it is placed. Pure and deterministic (fixed seed, no clock).

What a replay cannot know: how long a pod would really have run under another placement (a better NVLink
set trains faster, a waiting pod may have been cancelled); pods recorded without their scoring-profile
annotation use the default profile; CPU and memory are not recorded, so only GPUs constrain placement.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from kgwe.cost.budgets import BudgetSpec, budget_period
from kgwe.cost.pricing import PriceBook, catalog_slices
from kgwe.extender.core import NodeTable, ShapeCache, WorkloadType, dynamic_term
from kgwe.extender.nodes import NodeState
from kgwe.extender.profile import Profile
from kgwe.extender.request import PodRequest
from kgwe.impact.record import DemandPod, DemandRecord, Shape
from kgwe.vocab import DEFAULT_CURRENCY

SAMPLES = 168  # allocation/fragmentation samples over the window (hourly for 7 days)
MAX_REPLAY_PODS = 20_000  # per policy: keeps 7 days of a 10,000-GPU cluster within 30 s for both revisions
MAX_RETRIES_PER_EVENT = 256  # waiting pods tried after one departure (shapes that fail are skipped at once)


@dataclass(frozen=True)
class PolicyView:
    """What one revision decides that a replay depends on."""

    profile: Profile
    nodes: Sequence[NodeState]  # the inventory, idle, with this revision's MIG layouts
    book: PriceBook | None = None
    budgets: Sequence[BudgetSpec] = ()


@dataclass
class ReplayResult:
    alloc_mean_pct: float = 0.0
    alloc_p10_pct: float = 0.0
    fragmentation_pct: float = 0.0  # mean share of GPU capacity left unusable for the recorded mix (FGD)
    pods: int = 0
    pods_waited: int = 0
    wait_mean_seconds: float = 0.0
    wait_p90_seconds: float = 0.0
    wait_max_seconds: float = 0.0
    never_started: int = 0
    mig_pods: int = 0
    mig_served: int = 0
    cost_by_team: dict[str, Decimal] = field(default_factory=dict)
    currency: str = DEFAULT_CURRENCY
    budgets_exceeded: list[tuple[str, Decimal, Decimal]] = field(
        default_factory=list
    )  # name, projected, limit
    scale: float = 1.0  # fraction of pods and GPUs replayed
    nodes: int = 0
    gpus: int = 0


def replay_record(
    record: DemandRecord, policy: PolicyView, *, seed: int = 0, max_pods: int = MAX_REPLAY_PODS
) -> ReplayResult:
    """One policy over the whole record (sampled to `max_pods`, with the inventory scaled alike)."""
    pods, fraction = _sample_pods(record, max_pods, seed)
    fraction *= record.sampled_fraction
    nodes = _scale_nodes(policy.nodes, fraction, seed)
    result = ReplayResult(scale=fraction, nodes=len(nodes), gpus=sum(n.gpus for n in nodes))
    replay = _Replay(record, policy, pods, _table(record, pods, nodes), max(1, result.gpus * 1000))
    replay.run()
    replay.summarize(result)
    _costs(result, record, pods, replay.placed_at, replay.table, policy)
    return result


def _table(record: DemandRecord, pods: Sequence[DemandPod], nodes: Sequence[NodeState]) -> NodeTable:
    """The extender's node table over idle copies of `nodes`, protecting the record's workload mix."""
    table = NodeTable(max_gpus=max((n.gpus for n in nodes), default=1) or 1, capacity=max(len(nodes), 1))
    _install_topology(table)
    for n in nodes:
        table.upsert(replace(n, gpu_used_milli=list(n.gpu_used_milli), mig_free=dict(n.mig_free)))
    table.set_mix(_mix(record, pods))
    return table


class _Replay:
    """The event loop of one replay: arrivals in order, departures as they fall due, and waiting pods
    retried after each departure, first come first served; GPU allocation and fragmentation sampled
    SAMPLES times over the window."""

    def __init__(
        self,
        record: DemandRecord,
        policy: PolicyView,
        pods: Sequence[DemandPod],
        table: NodeTable,
        capacity_milli: int,
    ) -> None:
        self.record, self.policy, self.pods, self.table = record, policy, pods, table
        self.capacity_milli = capacity_milli
        self.cache = ShapeCache(table, max_shapes=4096)
        self.rows = np.nonzero(table.live)[0]
        self.names = [table.names[int(r)] or "" for r in self.rows]
        self.requests = [_request(s) for s in record.shapes]
        self.shares = [_share_milli(s) for s in record.shapes]
        self.step = record.window_seconds / SAMPLES
        self.departures: list[tuple[int, int, int, int]] = []  # (time, seq, row, pod index)
        self.waiting: deque[int] = deque()
        self.placed_at: dict[int, tuple[int, int, tuple[int, ...]]] = {}  # pod -> (time, row, gpus)
        self.allocated = 0
        self.samples: list[float] = []
        self.frags: list[float] = []
        self.next_sample = 0.0
        self.tick = 0
        # Shapes no node could take since the last departure: placements only take capacity away, so until
        # the next departure they still fail, and filtering every node for them again is skipped.
        self.known_failed: set[tuple[object, ...]] = set()
        self._held: dict[tuple[int, str], int] = {}

    def run(self) -> None:
        for i, pod in enumerate(self.pods):
            self.depart_until(pod.arrival_s)
            self.sample_until(pod.arrival_s - 1)
            if self.waiting or not self.place(i, pod.arrival_s):
                self.waiting.append(i)
                _retry(self.waiting, self.place, pod.arrival_s, self.requests, self.pods)
        self.depart_until(self.record.window_seconds)
        self.sample_until(self.record.window_seconds)

    def depart_until(self, t: int) -> None:
        """Every pod due to leave by `t` leaves, each departure letting waiting pods try again."""
        while self.departures and self.departures[0][0] <= t:
            at, _, row, j = heapq.heappop(self.departures)
            self.sample_until(at - 1)
            self.allocated -= self.release(j, row)
            _retry(self.waiting, self.place, at, self.requests, self.pods)

    def place(self, i: int, now: int) -> bool:
        """Place pod `i` on the best node as the extender scores them; False when no node can take it."""
        pod = self.pods[i]
        req = self.requests[pod.shape]
        if req.shape in self.known_failed:
            return False
        reason, score, best = self.cache.answer(self.rows, req, self.policy.profile)
        ok = reason == 0
        if not ok.any():
            self.known_failed.add(req.shape)
            return False
        total = score
        if self.policy.profile.dynamic:  # RoundRobin / Random: the per-request part, as the extender adds it
            total = score + dynamic_term(self.policy.profile, self.names, f"pod-{i}", self.tick)
        self.tick += 1
        k = int(np.argmax(np.where(ok, total, -1.0)))
        row = int(self.rows[k])
        gpus = self.table.choose_gpus(row, req, int(best[k]))
        self.table.allocate(row, req, gpus)
        self.allocated += self.held(pod.shape, row)
        self.placed_at[i] = (now, row, gpus)
        duration = (self.record.window_seconds if pod.end_s is None else pod.end_s) - pod.arrival_s
        heapq.heappush(self.departures, (now + duration, i, row, i))
        return True

    def release(self, j: int, row: int) -> int:
        """Free pod `j`'s GPUs; the share it held (milli-GPUs)."""
        self.known_failed.clear()
        self.table.allocate(row, self.requests[self.pods[j].shape], self.placed_at[j][2], sign=-1)
        return self.held(self.pods[j].shape, row)

    def held(self, shape: int, row: int) -> int:
        node = self.table.nodes[row]
        key = (shape, node.product if node else "")
        if key not in self._held:
            self._held[key] = _alloc_milli(self.record.shapes[shape], self.shares[shape], key[1])
        return self._held[key]

    def sample_until(self, t: float) -> None:
        while self.next_sample <= t and len(self.samples) < SAMPLES:
            self.samples.append(100.0 * self.allocated / self.capacity_milli)
            self.frags.append(100.0 * float(self.table.frag[self.rows].sum()) / self.capacity_milli)
            self.next_sample += self.step

    def summarize(self, result: ReplayResult) -> None:
        """Allocation, fragmentation, waits and MIG service into `result`."""
        samples, pods, placed_at = self.samples, self.pods, self.placed_at
        result.pods = len(pods)
        result.alloc_mean_pct = float(np.mean(samples)) if samples else 0.0
        result.alloc_p10_pct = float(np.percentile(samples, 10)) if samples else 0.0
        result.fragmentation_pct = float(np.mean(self.frags)) if self.frags else 0.0
        waits = [placed_at[i][0] - p.arrival_s for i, p in enumerate(pods) if i in placed_at]
        waited = [w for w in waits if w > 0]
        result.never_started = len(pods) - len(placed_at)
        result.pods_waited = len(waited) + result.never_started
        result.wait_mean_seconds = float(np.mean(waited)) if waited else 0.0
        result.wait_p90_seconds = float(np.percentile(waited, 90)) if waited else 0.0
        result.wait_max_seconds = float(max(waited)) if waited else 0.0
        mig = [i for i, p in enumerate(pods) if self.record.shapes[p.shape].kind == "mig"]
        result.mig_pods = len(mig)
        result.mig_served = sum(1 for i in mig if i in placed_at)


def _retry(
    waiting: deque[int],
    place: Callable[[int, int], bool],
    now: int,
    requests: Sequence[PodRequest],
    pods: Sequence[DemandPod],
) -> None:
    """Try waiting pods in arrival order; a shape that fails once is not tried again in this pass."""
    failed: set[tuple[object, ...]] = set()
    tries = 0
    for _ in range(len(waiting)):
        if tries >= MAX_RETRIES_PER_EVENT:
            break
        i = waiting.popleft()
        shape = requests[pods[i].shape].shape
        if shape in failed:
            waiting.append(i)
            continue
        tries += 1
        if not place(i, now):
            failed.add(shape)
            waiting.append(i)
    # keep arrival order: rotate back so the oldest waiting pod is first
    if waiting:
        order = sorted(waiting)
        waiting.clear()
        waiting.extend(order)


def _costs(
    result: ReplayResult,
    record: DemandRecord,
    pods: Sequence[DemandPod],
    placed_at: dict[int, tuple[int, int, tuple[int, ...]]],
    table: NodeTable,
    policy: PolicyView,
) -> None:
    book = policy.book
    if book is None:
        return
    result.currency = book.currency
    window = record.window_seconds
    seconds: dict[str, Fraction] = defaultdict(Fraction)
    for i, (start, row, _gpus) in placed_at.items():
        pod = pods[i]
        node = table.nodes[row]
        price = book.price(node.product) if node is not None else None
        if node is None or price is None:
            continue
        shape = record.shapes[pod.shape]
        duration = (window if pod.end_s is None else pod.end_s) - pod.arrival_s
        ran = max(0, min(window, start + duration) - start)
        try:
            share = book.gpu_share(node.product, shape.kind, shape.mig_profile, shape.gpu_milli)
        except Exception:  # a MIG profile the catalog does not know on this product: priced as a whole GPU
            share = Fraction(1)
        team = record.teams[pod.team][1]
        hourly = Fraction(price.per_hour(book.is_spot(node.labels)))
        seconds[team] += Fraction(ran) * shape.count * share * hourly
    # exact: a record sampled to a tiny fraction must not round its scale to zero
    scale = Fraction(1) / Fraction(result.scale) if 0 < result.scale < 1 else Fraction(1)
    for team, amount in sorted(seconds.items()):
        value = amount * scale / 3600
        result.cost_by_team[team] = Decimal(value.numerator) / Decimal(value.denominator)
    result.cost_by_team = {k: v.quantize(Decimal("0.01")) for k, v in result.cost_by_team.items()}
    for budget in policy.budgets:
        spent = result.cost_by_team.get(budget.team, Decimal(0))
        period = budget_period(budget.period, record.until)
        period_seconds = Decimal(int((period.until - period.since) / timedelta(seconds=1)))
        projected = (spent * period_seconds / Decimal(window)).quantize(Decimal("0.01"))
        if projected > budget.limit:
            result.budgets_exceeded.append((budget.name, projected, budget.limit))


def _request(shape: Shape) -> PodRequest:
    if shape.kind == "mig":
        return PodRequest(mig=((shape.mig_profile or "", shape.count),), preference=shape.preference)
    if shape.kind == "shared":
        milli = min(1000, shape.count * (shape.gpu_milli or 0))
        return PodRequest(gpus=1, gpu_milli=milli, preference=shape.preference)
    return PodRequest(gpus=shape.count, preference=shape.preference)


def _share_milli(shape: Shape) -> int:
    if shape.kind == "shared":
        return min(1000, shape.count * (shape.gpu_milli or 0))
    return shape.count * 1000


def _alloc_milli(shape: Shape, share: int, product: str) -> int:
    """GPU share held, in milli-GPUs: MIG instances count their compute slices."""
    if shape.kind != "mig":
        return share
    try:
        c, slots, _, _ = catalog_slices(product, shape.mig_profile or "")
    except Exception:  # unknown product/profile: count the instance as one GPU's seventh
        c, slots = 1, 7
    return shape.count * 1000 * c // slots


def _mix(record: DemandRecord, pods: Sequence[Any]) -> list[WorkloadType]:
    counts = Counter(p.shape for p in pods)
    out = []
    for s, n in counts.most_common():
        shape = record.shapes[s]
        if shape.kind == "mig":
            continue
        req = _request(shape)
        out.append(WorkloadType(req.gpus, req.gpu_milli, 0, 0, float(n)))
    return out


def _stable(i: int, seed: int) -> bytes:
    return hashlib.blake2b(f"{seed}/{i}".encode(), digest_size=8).digest()


def _sample_pods(record: DemandRecord, max_pods: int, seed: int) -> tuple[list[Any], float]:
    pods = list(record.pods)
    if len(pods) <= max_pods:
        return pods, 1.0
    keep = sorted(sorted(range(len(pods)), key=lambda i: _stable(i, seed))[:max_pods])
    return [pods[i] for i in keep], max_pods / len(pods)


def _scale_nodes(nodes: Sequence[NodeState], fraction: float, seed: int) -> list[NodeState]:
    """Per GPU product, the same fraction of nodes (at least one), chosen by a seeded stable hash."""
    if fraction >= 1:
        return list(nodes)
    groups: dict[str, list[NodeState]] = defaultdict(list)
    for n in nodes:
        groups[n.product].append(n)
    out = []
    for _, group in sorted(groups.items()):
        k = max(1, round(len(group) * fraction))
        out += sorted(group, key=lambda n: _stable(hash_name(n.name), seed))[:k]
    return sorted(out, key=lambda n: n.name)


def hash_name(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def _install_topology(table: NodeTable) -> None:
    """The extender engine's topology scorer and chooser, so multi-GPU pods get the same GPU sets."""
    from kgwe.extender.engine import Engine

    Engine(table)  # installs its topology hooks on `table`


def compare(
    record: DemandRecord,
    base: PolicyView,
    head: PolicyView,
    *,
    seed: int = 0,
    max_pods: int = MAX_REPLAY_PODS,
) -> tuple[ReplayResult, ReplayResult]:
    return (
        replay_record(record, base, seed=seed, max_pods=max_pods),
        replay_record(record, head, seed=seed, max_pods=max_pods),
    )
