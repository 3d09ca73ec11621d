"""Routing imbalance of mixture-of-experts layers.

Tokens are not spread evenly over experts: the most loaded expert-parallel rank sets the pace of
every synchronous all-to-all and of the expert GEMMs behind it. A routing *distribution* (the share
of routed tokens each expert receives) and an expert *placement* (which EP rank holds which expert)
give each rank's expected share q_r of the N token copies its EP group routes per micro-batch; the
count a rank receives is Binomial(N, q_r), and the expected maximum over the ep ranks is
    max_r N q_r + sd * sqrt(2 ln ep)       (Gaussian tail of the largest of ep counts)
The load factor is that maximum over the mean N / ep (1 = perfectly balanced). A capacity factor c
(GShard, Switch Transformer) caps each rank at c x mean and drops the rest.

Distributions: ``uniform`` (a perfectly trained balancer: only sampling noise remains),
``zipf:S`` (expert i receives a share proportional to 1/i^S: a skewed router), or a file with a
measured histogram (JSON list of counts per expert, or a CSV/text file with one count per line).
Placements: ``sequential`` (experts e*E/ep .. on rank e, as frameworks lay them out) and
``balanced`` (greedy: the most popular expert to the least loaded rank, the policy that
load-aware placement such as LASER-style schedulers approximate).
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from ..errors import DataError, PlanError


def _histogram_file(path: str, experts: int) -> tuple[float, ...]:
    p = Path(path)
    if not p.exists():
        raise DataError("plan.moe_routing", f"histogram file {path!r} not found", "give a JSON list or one count per line")
    text = p.read_text(encoding="utf-8")
    try:
        counts = json.loads(text) if p.suffix.lower() == ".json" else [float(x) for x in text.replace(",", "\n").split()]
    except (ValueError, json.JSONDecodeError):
        raise DataError("plan.moe_routing", f"cannot read counts from {p.name}", "a JSON list of numbers, or one per line") from None
    if not isinstance(counts, list) or len(counts) != experts or any(not isinstance(c, (int, float)) or c < 0 for c in counts):
        raise DataError("plan.moe_routing", f"{p.name} must hold {experts} non-negative counts (one per expert)",
                        "give the tokens each routed expert received")
    return tuple(float(c) for c in counts)


@lru_cache(maxsize=256)
def expert_shares(routing: str, experts: int) -> tuple[float, ...]:
    """Share of routed tokens per expert (sums to 1), in expert-index order."""
    spec = (routing or "uniform").strip()
    if spec.lower() == "uniform":
        weights = [1.0] * experts
    elif spec.lower().startswith("zipf"):
        try:
            s = float(spec.split(":", 1)[1]) if ":" in spec else 1.0
        except ValueError:
            raise PlanError("plan.moe_routing", f"cannot read the Zipf exponent in {spec!r}", 'write e.g. "zipf:1.2"') from None
        if not 0 <= s <= 10:
            raise PlanError("plan.moe_routing", f"Zipf exponent {s} out of range", "use 0 (uniform) to 10")
        weights = [1.0 / (i + 1) ** s for i in range(experts)]
    else:
        weights = list(_histogram_file(spec, experts))
    total = sum(weights)
    if total <= 0:
        raise DataError("plan.moe_routing", "the histogram is all zeros", "give the tokens each expert received")
    return tuple(w / total for w in weights)


def rank_shares(shares: tuple[float, ...], ep: int, placement: str) -> list[float]:
    """Share of the EP group's token copies each rank receives."""
    per = len(shares) // ep
    if placement == "balanced":
        load = [0.0] * ep
        count = [0] * ep
        for w in sorted(shares, reverse=True):
            r = min((i for i in range(ep) if count[i] < per), key=lambda i: load[i])
            load[r] += w
            count[r] += 1
        return load
    if placement != "sequential":
        raise PlanError("plan.moe_placement", f"unknown placement {placement!r}", "use sequential or balanced")
    return [sum(shares[r * per:(r + 1) * per]) for r in range(ep)]


@lru_cache(maxsize=4096)
def load_factor(routing: str, placement: str, experts: int, top_k: int, ep: int, tokens_per_rank: int,
                capacity_factor: float | None = None) -> tuple[float, float]:
    """(load factor of the busiest EP rank, fraction of token copies dropped by the capacity factor)."""
    if experts <= 0 or top_k <= 0:
        return 1.0, 0.0
    q = rank_shares(expert_shares(routing, experts), ep, placement)
    n = float(tokens_per_rank * top_k * ep)          # token copies routed in the EP group per micro-batch
    mean = n / ep
    tail = math.sqrt(2.0 * math.log(ep)) if ep > 1 else 0.0
    busiest = max(n * qr + math.sqrt(max(n * qr * (1.0 - qr), 0.0)) * tail for qr in q)
    factor = max(1.0, busiest / mean)
    dropped = 0.0
    if capacity_factor is not None:
        dropped = sum(max(0.0, qr * ep - capacity_factor) for qr in q) / ep
        factor = min(factor, capacity_factor)
    return factor, dropped
