"""A MIG pool minute by minute: pods queue for instances of their profile, run on a free one for their
runtime, and the layout is either left as planned (static) or follows demand through the controller's
rebalancing rule (`kgwe.planner.rebalance.evaluate`).

Pure and deterministic. Each minute, in order: pods that ended free their instances; nodes whose MIG
reconfiguration finished take their new layouts; arrivals join their profile's queue; waiting pods are
placed first come, first served on the first free instance of their profile (GPUs in node/index order,
skipping nodes being reconfigured; a pod only waits behind pods of its own profile, as with one extended
resource per profile); then, when rebalancing, the rule is evaluated on what the scheduler left pending.
A decision's changed GPUs belong to idle nodes (the rule pins every node that holds a pod); each such node
serves nothing for `delay` minutes, then has the decided layout. Nothing else ever changes the layout.

Figures: served = instance-minutes pods ran within the horizon / instance-minutes they would have run had
each started on arrival (the same denominator for every policy: a pod that waits loses the minutes pushed
past the horizon); pending-pod-minutes = pods waiting, summed over minutes.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from kgwe.planner.model import PlacedLayout, PoolRequest
from kgwe.planner.rebalance import Measurement, Outlook, Record, Settings, due, evaluate

START = datetime(2026, 1, 1, tzinfo=UTC)  # the clock the rule sees; only differences matter
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Pod:
    """One MIG instance wanted from minute `arrival` for `runtime` minutes (at least 1)."""

    arrival: int
    runtime: int
    profile: str


# The demand measured each minute so far (held + pending instances per profile, oldest first) -> the
# outlook the rule prepares for (None: no outlook). Sees only the past: the replay hands it nothing else.
Forecaster = Callable[[Sequence[Mapping[str, int]]], Outlook | None]


@dataclass(frozen=True)
class Rebalancing:
    """The rule's settings, how long a node's MIG reconfiguration keeps it from serving (minutes), and the
    forecaster whose outlook the rule prepares for (None: the reactive rule alone)."""

    settings: Settings
    delay: int
    forecast: Forecaster | None = None


@dataclass(frozen=True)
class Repartition:
    """One decision taken: when, how many GPUs on which nodes, and the rule's message."""

    minute: int
    gpus: int
    nodes: tuple[str, ...]
    message: str


@dataclass
class Result:
    minutes: int
    pods: int = 0
    started: int = 0
    demanded: int = 0  # instance-minutes
    served: int = 0
    pending_pod_minutes: int = 0
    evaluations: int = 0  # minutes the rule was due
    decisions: int = 0  # new targets taken (some change no GPU)
    repartitions: list[Repartition] = field(default_factory=list)

    @property
    def served_fraction(self) -> float:
        return self.served / self.demanded if self.demanded else 1.0

    @property
    def gpus_repartitioned(self) -> int:
        return sum(r.gpus for r in self.repartitions)


def day_from_trace(
    pods: Iterable[tuple[int, int, str]], minutes: int, skip_fraction: float = 0.01
) -> tuple[list[Pod], float]:
    """Trace pods (creation s, deletion s, profile) as one replay of `minutes`, and the time compression.

    Creation times from the `skip_fraction` quantile to the last one map linearly onto the horizon (the
    earliest arrivals are outliers months before the rest; they are dropped); runtimes stay as recorded,
    rounded up to whole minutes.
    """
    rows = sorted(pods)
    if not rows:
        return [], 1.0
    first = rows[min(len(rows) - 1, int(len(rows) * skip_fraction))][0]
    last = rows[-1][0]
    factor = max(1.0, (last - first) / (minutes * 60))
    out = [
        Pod(
            arrival=min(minutes - 1, int((created - first) / factor // 60)),
            runtime=max(1, math.ceil((deleted - created) / 60)),
            profile=profile,
        )
        for created, deleted, profile in rows
        if created >= first
    ]
    return out, factor


def offered(pods: Iterable[Pod], minutes: int, weight: dict[str, int]) -> list[int]:
    """Per minute, the weighted instances pods would hold had each started on arrival."""
    delta = [0] * (minutes + 1)
    for pod in pods:
        if pod.arrival < minutes:
            delta[pod.arrival] += weight[pod.profile]
            delta[min(minutes, pod.arrival + pod.runtime)] -= weight[pod.profile]
    out, level = [], 0
    for d in delta[:minutes]:
        level += d
        out.append(level)
    return out


def simulate(
    pods: Sequence[Pod], pool: PoolRequest, minutes: int, rebalancing: Rebalancing | None = None
) -> Result:
    """Replay `pods` for `minutes` on `pool` (its GPUs' layouts as they start; shares and limits as the
    MIGStrategy says). Without `rebalancing` the layouts never change."""
    gpus = list(pool.gpus)
    layouts: list[PlacedLayout | None] = [g.layout for g in gpus]
    held: list[set[tuple[str, int]]] = [set() for _ in gpus]
    position = {(g.node, g.index): i for i, g in enumerate(gpus)}
    arrivals = sorted((p for p in pods if p.arrival < minutes), key=lambda p: p.arrival)
    queues: dict[str, deque[Pod]] = {}
    ending: list[tuple[int, int, int, tuple[str, int]]] = []  # (minute, seq, gpu, instance)
    busy_node: Counter[str] = Counter()
    # node -> (minute it serves again, the (GPU, layout) it then has)
    reconfiguring: dict[str, tuple[int, list[tuple[int, PlacedLayout | None]]]] = {}
    record = Record("sim")
    measured: list[Mapping[str, int]] = []  # held + waiting per profile, each minute so far
    result = Result(minutes, pods=len(arrivals))
    result.demanded = sum(min(p.runtime, minutes - p.arrival) for p in arrivals)
    seq = nxt = 0
    for minute in range(minutes):
        while ending and ending[0][0] <= minute:
            _, _, gpu, instance = heapq.heappop(ending)
            held[gpu].discard(instance)
            busy_node[gpus[gpu].node] -= 1
        for node in [n for n, (at, _) in reconfiguring.items() if at <= minute]:
            for gpu, layout in reconfiguring.pop(node)[1]:
                layouts[gpu] = layout
        while nxt < len(arrivals) and arrivals[nxt].arrival <= minute:
            queues.setdefault(arrivals[nxt].profile, deque()).append(arrivals[nxt])
            nxt += 1
        for profile, queue in queues.items():
            if not queue:
                continue
            for gpu in range(len(gpus)):
                if gpus[gpu].node in reconfiguring:
                    continue
                for instance in layouts[gpu] or ():
                    if not queue:
                        break
                    if instance[0] != profile or instance in held[gpu]:
                        continue
                    pod = queue.popleft()
                    held[gpu].add(instance)
                    busy_node[gpus[gpu].node] += 1
                    heapq.heappush(ending, (minute + pod.runtime, seq, gpu, instance))
                    seq += 1
                    result.started += 1
                    result.served += min(pod.runtime, minutes - minute)
                if not queue:
                    break
        waiting = {p: len(q) for p, q in queues.items() if q}
        if rebalancing is not None:
            in_use = Counter(name for h in held for name, _ in h)
            measurement = Measurement(pending=waiting, in_use=dict(in_use), pending_pods=waiting)
            now = START + minute * MINUTE
            if rebalancing.forecast is not None:
                measured.append(dict(in_use + Counter(waiting)))
            if due(record, measurement, rebalancing.settings, now):
                result.evaluations += 1
                outlook = rebalancing.forecast(measured) if rebalancing.forecast is not None else None
                current = tuple(
                    replace(g, layout=layouts[i], in_use=tuple(sorted(held[i]))) for i, g in enumerate(gpus)
                )
                decision = evaluate(
                    replace(pool, gpus=current),
                    measurement,
                    record,
                    rebalancing.settings,
                    now,
                    in_flight=bool(reconfiguring),
                    outlook=outlook,
                )
                record = decision.record
                result.decisions += decision.taken
                if decision.taken and decision.plan is not None and decision.plan.gpus_changed:
                    changes = decision.plan.changes()
                    nodes = tuple(sorted({c.node for c in changes}))
                    assert not any(busy_node[n] for n in nodes), "the rule changed a node that holds a pod"
                    for node in nodes:
                        reconfiguring[node] = (minute + rebalancing.delay, [])
                    for c in changes:
                        target = (position[(c.node, c.index)], c.target)
                        reconfiguring[c.node][1].append(target)
                    result.repartitions.append(
                        Repartition(minute, decision.plan.gpus_changed, nodes, decision.event or "")
                    )
        result.pending_pod_minutes += sum(waiting.values())
    return result
