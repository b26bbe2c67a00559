"""Scoring profiles as the extender uses them: plain frozen data, read from the `kgwe-scoring` ConfigMap JSON.

The ConfigMap (rendered by `kgwe render`, templates/scoring-configmap.yaml.j2) holds one key `profiles.json`:
`{"default": "default", "profiles": {"default": {"weights": {...}, "strategy": "BinPack", ...}}}`.
Also accepted:
`{"profiles": [{"name": "default", "default": true, "weights": {"topology": 40, "resource": 35,
"balance": 25}, "strategy": "BinPack", "fragmentation": 60, "extender": {"weight": 5, "ignorable": false,
"httpTimeout": "2s"}}]}`. A bare list of profiles, or ScoringProfile objects (`metadata.name` + `spec`), are
accepted too, so the extender reads what `kgwe render` writes without a second format.

Fields beyond the weights and strategy (optional, read when present): `fragmentation` (weight of the
FGD term, default 50; 0 = off) and `decideInFilter` (default true, see Profile.decide_in_filter). A profile
without `strategy` uses BestFit: with the FGD term it packed the openb trace best (kgwe simulate: 95.8% vs
BinPack 95.3% at 130%).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kgwe.vocab import (
    DEFAULT_BALANCE_WEIGHT,
    DEFAULT_EXTENDER_WEIGHT,
    DEFAULT_FRAGMENTATION,
    DEFAULT_HTTP_TIMEOUT_SECONDS,
    DEFAULT_RESOURCE_WEIGHT,
    DEFAULT_STRATEGY,
    DEFAULT_TOPOLOGY_WEIGHT,
    STRATEGIES,
)

_STRATEGY_BY_LOWER = {s.lower(): s for s in STRATEGIES}


class ProfileError(ValueError):
    """A scoring profile cannot be used; the message names the profile and the field."""


@dataclass(frozen=True)
class Profile:
    """How to rank feasible nodes. Weights are relative; fragmentation is the FGD term (0 = off)."""

    name: str = "default"
    topology: float = float(DEFAULT_TOPOLOGY_WEIGHT)
    resource: float = float(DEFAULT_RESOURCE_WEIGHT)
    balance: float = float(DEFAULT_BALANCE_WEIGHT)
    strategy: str = DEFAULT_STRATEGY
    fragmentation: float = float(DEFAULT_FRAGMENTATION)
    prices: tuple[tuple[str, float], ...] = ()  # (product substring, lower case; price per GPU-hour)
    is_default: bool = False
    weight: int = DEFAULT_EXTENDER_WEIGHT
    ignorable: bool = False
    http_timeout: str = f"{DEFAULT_HTTP_TIMEOUT_SECONDS}s"
    # true (default): filter answers a GPU pod with the single best node, so kube-scheduler skips prioritize
    # and its own scoring: one HTTP round trip per pod, exact (not 0..10-rounded) placement, and the
    # extender knows the node at once and counts the pod there before the bind is seen (no window in which
    # a burst of shared-GPU pods could over-commit one GPU). Pods stating soft preferences (preferred
    # affinity, ScheduleAnyway spread) still get every feasible node and a prioritize score, so those
    # preferences keep counting; shared-GPU pods are decided regardless, KGWE being their only accountant.
    # false: every pod goes through filter + prioritize (two round trips; no early accounting).
    decide_in_filter: bool = True

    @property
    def dynamic(self) -> bool:
        """Strategies whose per-node score changes per request, so it is never cached."""
        return self.strategy in ("RoundRobin", "Random")


DEFAULT_PROFILE = Profile(is_default=True)


def _num(raw: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = raw.get(key, default)
    if isinstance(value, str):
        value = value.rstrip("%")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ProfileError(f"{where}.{key}: expected a number, got {value!r}") from None
    if f < 0:
        raise ProfileError(f"{where}.{key}: must not be negative")
    return f


def profile_from_dict(raw: Mapping[str, Any]) -> Profile:
    """One profile from either the flat rendering or a ScoringProfile object (`metadata` + `spec`)."""
    if not isinstance(raw, Mapping):
        raise ProfileError("a scoring profile must be an object")
    name = raw.get("name") or (raw.get("metadata") or {}).get("name")
    spec: Mapping[str, Any] = raw["spec"] if isinstance(raw.get("spec"), Mapping) else raw
    if not name or not isinstance(name, str):
        raise ProfileError("a scoring profile needs a name")
    where = f"profile {name}"
    weights = spec.get("weights") or {}
    if not isinstance(weights, Mapping):
        raise ProfileError(f"{where}.weights: expected an object")
    strategy = str(spec.get("strategy") or DEFAULT_STRATEGY)
    canonical = _STRATEGY_BY_LOWER.get(strategy.lower())
    if canonical is None:
        raise ProfileError(f"{where}.strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    ext = spec.get("extender") or {}
    prices_raw = spec.get("prices") or {}
    if not isinstance(ext, Mapping) or not isinstance(prices_raw, Mapping):
        raise ProfileError(f"{where}: extender and prices must be objects")
    prices = tuple(sorted((str(k).lower(), _num(prices_raw, k, 0, f"{where}.prices")) for k in prices_raw))
    return Profile(
        name=name,
        topology=_num(weights, "topology", DEFAULT_TOPOLOGY_WEIGHT, f"{where}.weights"),
        resource=_num(weights, "resource", DEFAULT_RESOURCE_WEIGHT, f"{where}.weights"),
        balance=_num(weights, "balance", DEFAULT_BALANCE_WEIGHT, f"{where}.weights"),
        strategy=canonical,
        fragmentation=_num(spec, "fragmentation", DEFAULT_FRAGMENTATION, where),
        prices=prices,
        is_default=bool(spec.get("default", False)),
        weight=int(_num(ext, "weight", DEFAULT_EXTENDER_WEIGHT, f"{where}.extender")),
        ignorable=bool(ext.get("ignorable", False)),
        http_timeout=str(ext.get("httpTimeout", Profile.http_timeout)),
        decide_in_filter=bool(spec.get("decideInFilter", True)),
    )


def profiles_from_document(doc: object) -> dict[str, Profile]:
    """All profiles of a `kgwe-scoring` document; the default one is also reachable under ''."""
    items = doc.get("profiles") if isinstance(doc, Mapping) else doc
    named_default = doc.get("default") if isinstance(doc, Mapping) else None
    if isinstance(items, Mapping):  # as rendered: {"default": name, "profiles": {name: spec}}
        items = [
            {**spec, "name": name} if isinstance(spec, Mapping) else spec for name, spec in items.items()
        ]
    if not isinstance(items, list):
        raise ProfileError('kgwe-scoring: expected a list of profiles or {"profiles": [...]}')
    out: dict[str, Profile] = {}
    for item in items:
        p = profile_from_dict(item)
        if p.name in out:
            raise ProfileError(f"kgwe-scoring: profile {p.name} defined twice")
        out[p.name] = p
    if isinstance(named_default, str):
        if named_default not in out:
            raise ProfileError(f"kgwe-scoring: default profile {named_default} is not defined")
        out = {
            k: (replace(p, is_default=True) if k == named_default else replace(p, is_default=False))
            for k, p in out.items()
        }
    defaults = [p for p in out.values() if p.is_default]
    if len(defaults) > 1:
        names = ", ".join(p.name for p in defaults)
        raise ProfileError(f"kgwe-scoring: more than one default profile: {names}")
    out[""] = defaults[0] if defaults else out.get("default", DEFAULT_PROFILE)
    return out
