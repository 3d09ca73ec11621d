"""The cheapest serving configuration that meets latency targets at a request rate.

Enumerates GPU type x tp x pp x ep x max batch (``max_num_seqs``); for each that fits, finds the
fewest replicas whose simulated latencies meet every target of the SLO at the rate (each replica
gets rate / replicas, Poisson, the way a load balancer splits an open-loop stream), and ranks what
meets it by GPUs or by cost per hour (GPUs x the price of an hour of that GPU).

>>> slo = parse_slo("ttft_p99=2s,tpot_p99=50ms")
>>> slo["ttft_s"]["p99"], slo["tpot_s"]["p99"]
(2.0, 0.05)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

from ..errors import ClusterTwinError, SpecError
from ..units import parse_quantity
from .run import ServeRequest, ServeResult, predict_serving

METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2e": "e2e_latency_s"}
STATS = ("mean", "p50", "p90", "p99")
DEFAULT_GPUS = ("h100-sxm", "h200", "a100-80gb", "b200")
MAX_REPLICAS = 64


def parse_slo(text: str) -> dict[str, dict[str, float]]:
    """``"ttft_p99=2s,tpot_p99=50ms"`` -> {"ttft_s": {"p99": 2.0}, "tpot_s": {"p99": 0.05}}."""
    out: dict[str, dict[str, float]] = {}
    if not text or not text.strip():
        raise SpecError("slo", "empty", 'give targets, e.g. "ttft_p99=2s,tpot_p99=50ms"')
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise SpecError("slo", f"{part!r} is not metric_stat=time", 'write e.g. "ttft_p99=2s,tpot_p99=50ms"')
        key, val = (x.strip().lower() for x in part.split("=", 1))
        name, _, stat = key.partition("_")
        if name not in METRICS or stat not in STATS:
            raise SpecError("slo", f"unknown target {key!r}",
                            f"use {'|'.join(METRICS)} with _{'|_'.join(STATS)}, e.g. ttft_p99")
        try:
            seconds = parse_quantity(val, "latency", f"slo.{key}")
        except ClusterTwinError:
            raise SpecError(f"slo.{key}", f"{val!r} is not a time", 'write e.g. "2s" or "50ms"') from None
        if not (seconds > 0 and math.isfinite(seconds)):
            raise SpecError(f"slo.{key}", f"{val!r} must be a positive time", 'write e.g. "2s" or "50ms"')
        prev = out.get(METRICS[name], {}).get(stat)
        if prev is not None and prev != seconds:    # the last would win without a word: refuse instead
            raise SpecError(f"slo.{key}", "given twice", f"keep one {key} target")
        out.setdefault(METRICS[name], {})[stat] = seconds
    if not out:
        raise SpecError("slo", "no target", 'give e.g. "ttft_p99=2s"')
    return out


def parse_prices(text: str | None) -> dict[str, float]:
    """``"h100-sxm=2.5,a100-80gb=1.3"`` (USD per GPU-hour) or one number for every GPU (key "*")."""
    if not text:
        return {}
    text = text.strip()
    try:
        return {"*": float(text)} if "=" not in text else {
            k.strip().lower(): float(v) for k, v in (p.split("=", 1) for p in text.split(",") if p.strip())}
    except ValueError:
        raise SpecError("gpu_hour_price", f"{text!r} is not a price", 'write e.g. "2.5" or "h100-sxm=2.5,h200=3.5"') \
            from None


def meets(result: ServeResult, slo: dict[str, dict[str, float]]) -> bool:
    if not result.fits:
        return False
    for metric, targets in slo.items():
        got = result.latency(metric)
        for stat, limit in targets.items():
            if not got[stat] <= limit:
                return False
    return True


@dataclass
class Candidate:
    gpu: str
    tp: int
    pp: int
    ep: int
    max_num_seqs: int
    replicas: int = 0            # 0: no replica count up to the cap meets the SLO
    result: ServeResult | None = None
    reason: str = ""
    price: float | None = None   # USD per GPU-hour

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas

    @property
    def cost_per_hour(self) -> float | None:
        return None if self.price is None else self.price * self.gpus

    def to_json(self) -> dict:
        r = self.result
        return {"gpu": self.gpu, "tp": self.tp, "pp": self.pp, "ep": self.ep, "max_num_seqs": self.max_num_seqs,
                "replicas": self.replicas, "num_gpus": self.gpus, "usd_per_hour": self.cost_per_hour,
                "meets_slo": bool(self.replicas), "reason": self.reason,
                "ttft_s": r.latency("ttft_s") if r else None, "tpot_s": r.latency("tpot_s") if r else None,
                "output_tokens_per_s_per_replica": r.output_tokens_per_s if r else None}


@dataclass
class ServeSearchResult:
    slo: dict[str, dict[str, float]]
    request_rate: float
    rank_by: str
    ranked: list[Candidate] = field(default_factory=list)
    rejected: list[Candidate] = field(default_factory=list)

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    def to_json(self) -> dict:
        return {"schema": 1, "slo": self.slo, "request_rate": self.request_rate, "rank_by": self.rank_by,
                "best": self.best.to_json() if self.best else None,
                "ranked": [c.to_json() for c in self.ranked],
                "rejected": [c.to_json() for c in self.rejected]}


def candidates(model, gpus: tuple[str, ...], seqs: tuple[int, ...]) -> list[Candidate]:
    from ..catalog import load_gpu
    out = []
    for g in gpus:
        name = load_gpu(g).name
        for tp in (1, 2, 4, 8):
            if model.num_heads % tp:
                continue
            for pp in (1, 2):
                for ep in sorted({1, tp} if model.is_moe and model.moe_num_experts % tp == 0 else {1}):
                    for s in seqs:
                        out.append(Candidate(name, tp, pp, ep, s))
    return out


def serve_search(base: ServeRequest, slo: dict[str, dict[str, float]], request_rate: float, *,
                 gpus: tuple[str, ...] = DEFAULT_GPUS, seqs: tuple[int, ...] = (64, 256),
                 rank_by: str = "gpus", prices: dict[str, float] | None = None, max_replicas: int = MAX_REPLICAS,
                 progress: Callable[[int, int], None] | None = None) -> ServeSearchResult:
    """Every candidate that fits, with the fewest replicas meeting ``slo`` at ``request_rate``, ranked."""
    from ..catalog import load_model
    if rank_by not in ("gpus", "cost"):
        raise SpecError("rank_by", f"unknown ranking {rank_by!r}", "use gpus or cost")
    if not (request_rate > 0 and math.isfinite(request_rate)):
        raise SpecError("request_rate", f"{request_rate} must be a positive rate", "give requests per second")
    prices = prices or {}
    model = load_model(base.model)
    cands = candidates(model, gpus, seqs)
    if rank_by == "cost":
        missing = sorted({c.gpu for c in cands if c.gpu not in prices and "*" not in prices})
        if missing:
            raise SpecError("gpu_hour_price", f"no price for {', '.join(missing)} (clustertwin ships no GPU prices)",
                            'give --gpu-hour-price "h100-sxm=2.5,..." or rank by gpus')
    res = ServeSearchResult(slo, request_rate, rank_by)
    for i, c in enumerate(cands):
        c.price = prices.get(c.gpu, prices.get("*"))
        _place(c, base, model, slo, request_rate, max_replicas)
        (res.ranked if c.replicas else res.rejected).append(c)
        if progress:
            progress(i + 1, len(cands))
    key = (lambda c: (c.cost_per_hour, c.gpus)) if rank_by == "cost" else (lambda c: (c.gpus, c.cost_per_hour or 0.0))
    res.ranked.sort(key=lambda c: (*key(c), c.result.latency("ttft_s")["p99"] if c.result else 0.0))
    return res


def _place(c: Candidate, base: ServeRequest, model, slo, rate: float, max_replicas: int) -> None:
    """Set ``c.replicas`` to the fewest replicas meeting ``slo`` (0 when none up to the cap does)."""
    size = c.tp * c.pp

    def at(replicas: int) -> ServeResult | None:
        q = replace(base, model=model, gpu=c.gpu, num_gpus=size, cluster=None, plan=f"tp={c.tp},pp={c.pp},ep={c.ep},dp=1",
                    max_num_seqs=c.max_num_seqs, request_rate=rate / replicas, concurrency=None, workload="poisson")
        try:
            return predict_serving(q)
        except ClusterTwinError as e:
            c.reason = e.one_line()
            return None
    first = at(1)
    if first is None:
        return
    if not first.memory.fits:
        c.reason = first.memory.reason
        return
    if meets(first, slo):
        c.replicas, c.result = 1, first
        return
    lo, hi, best = 1, 2, None
    while hi <= max_replicas // 1:
        r = at(hi)
        if r is not None and meets(r, slo):
            best = r
            break
        lo, hi = hi, hi * 2
    if best is None:
        c.reason = f"misses the SLO even with {lo} replicas"
        return
    while hi - lo > 1:      # fewest replicas in (lo, hi]
        mid = (lo + hi) // 2
        r = at(mid)
        if r is not None and meets(r, slo):
            hi, best = mid, r
        else:
            lo = mid
    c.replicas, c.result = hi, best


__all__ = ["parse_slo", "parse_prices", "serve_search", "ServeSearchResult", "Candidate", "meets"]
