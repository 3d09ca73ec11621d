"""Recovery time after a fail-stop interruption, part by part, each with its scaling law and source.

| part | law | default | source |
|---|---|---|---|
| detection | constant per mechanism (``DETECTION``): health checks 5 min, a collective (NCCL) timeout 10 min, collective tracing 15 s | per policy (``POLICY_DETECTION``) | see ``DETECTION`` |
| stop | constant | 0 (inside detection) | assumption |
| reschedule / replace | constant (a scheduler decision + a node from the pool) | 5 min; 1 min with a free hot spare | MegaScale's other 5 min; spare swap assumed |
| init (processes + communicators) | ``fixed``: constant; ``megascale``: 5 s x N / 2,048; ``stock-megatron``: 1,047 s x N / 2,048 | 30 s (fixed) | MegaScale sec. 3.5: stock Megatron-LM 1,047 s on 2,048 GPUs, < 5 s after their work, < 30 s on > 10,000 GPUs |
| checkpoint load | max(bytes / storage bandwidth, node's bytes / node path); from a peer: node's bytes / backend NICs | from the plan | checkpoint.py (Llama 3 sec. 3.3.1 storage, GEMINI SOSP'23 peer memory) |
| warm-up | steps x step time | 2 steps | assumption |

The linear laws are the two MegaScale points taken at face value (a barrier and communicator set-up
serialised over ranks grows with N: 1,047 s / 2,048 GPUs = 0.51 s per GPU; after parallelising it,
5 s at 2,048 and 30 s at ~12,288 GPUs are both ~2.4 ms per GPU).

>>> round(init_time_s("stock-megatron", 30.0, 2048))
1047
>>> round(init_time_s("megascale", 30.0, 12288))
30
>>> init_time_s("fixed", 30.0, 100000)
30.0
>>> detection_time_s("collective-timeout"), detection_time_s("collective-tracing"), detection_time_s("90s")
(600.0, 15.0, 90.0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MEGASCALE_GPUS = 2048
MEGASCALE_STOCK_INIT_S = 1047.0     # MegaScale sec. 3.5: stock Megatron-LM initialisation on 2,048 GPUs
MEGASCALE_OPT_INIT_S = 5.0          # MegaScale sec. 3.5: "under 5 seconds" on 2,048 GPUs after optimisation

# How a fail-stop failure is noticed, and how long that takes (seconds, source). Detection depends on the
# mechanism, not on the recovery policy; each policy has the mechanism its system ships with
# (POLICY_DETECTION), and --detection prices another.
DETECTION: dict[str, tuple[float, str]] = {
    "health-check": (300.0, "Kokolis et al. 2025 (arXiv 2410.21680): health checks every 5 min; MegaScale (arXiv "
                            "2402.15627) sec. 6.3: detection plus diagnosis under 10 min"),
    "collective-timeout": (600.0, "PyTorch ProcessGroupNCCL default timeout, 10 min (pytorch/pytorch PR #110947, "
                                  "torch.distributed.constants.default_pg_nccl_timeout): a hung collective is "
                                  "noticed when the watchdog times out"),
    "collective-tracing": (15.0, "Mycroft (ByteDance, arXiv 2509.03018, abstract): collective-communication "
                                 "anomalies detected within 15 s in 90% of cases"),
}
# The mechanism each policy's system pairs with. Checkpoint-restart, hot spares, elastic and re-planning systems
# rely on the cluster's health checks (Llama 3, MegaScale, Kokolis et al.); live migration (TrainMover, ~20 s
# downtime from the interruption at 1,024 GPUs) presumes a detector that fires within seconds. ASSUMPTION:
# TrainMover's own detection time was not found, so collective tracing (Mycroft's 15 s) stands in for it.
POLICY_DETECTION = {"restart": "health-check", "in-memory-checkpoint": "health-check", "hot-spare": "health-check",
                    "elastic-dp": "health-check", "replan": "health-check", "live-migration": "collective-tracing"}


def detection_time_s(spec: "str | float") -> float:
    """Seconds to notice a failure: a mechanism of ``DETECTION`` or a duration ("90s", 90)."""
    from ..errors import SpecError
    from ..units import parse_quantity
    if isinstance(spec, str) and spec.strip().lower() in DETECTION:
        return DETECTION[spec.strip().lower()][0]
    try:
        x = parse_quantity(spec, "duration", "detection")
    except Exception:
        raise SpecError("detection", f"{spec!r} is neither a mechanism nor a non-negative duration",
                        f"use one of {', '.join(DETECTION)} or a duration such as 30s") from None
    if not (x >= 0):
        raise SpecError("detection", f"{spec!r} must be a non-negative duration", "e.g. 30s or health-check")
    return float(x)


def policy_detection(parts: tuple[str, ...]) -> str:
    """The detection mechanism of a policy (a combination: its fastest part's)."""
    return min((POLICY_DETECTION[p] for p in parts), key=lambda m: DETECTION[m][0])


SOURCES = {
    "detection_s": "per mechanism (recovery.DETECTION): health checks 5 min (Kokolis et al. 2025; MegaScale sec. 6.3), "
                   "NCCL timeout 10 min (PyTorch default), collective tracing 15 s (Mycroft, arXiv 2509.03018)",
    "stop_s": "assumed inside the detection window",
    "reschedule_s": "MegaScale sec. 6.3 (the rest of the 10 min); a free hot spare: assumed 1 min",
    "init_s": "MegaScale sec. 3.5: 1,047 s stock on 2,048 GPUs; < 5 s optimised; < 30 s on > 10,000 GPUs",
    "load_s": "checkpoint size from the plan over storage (Llama 3 sec. 3.3.1) or peer memory (GEMINI, SOSP'23)",
    "warmup_s": "assumed: 2 steps",
}


def init_time_s(scaling: str, init_s: float, num_gpus: int) -> float:
    """Process and communicator initialisation of ``num_gpus`` ranks under a scaling law."""
    if scaling == "stock-megatron":
        return MEGASCALE_STOCK_INIT_S * num_gpus / MEGASCALE_GPUS
    if scaling == "megascale":
        return MEGASCALE_OPT_INIT_S * num_gpus / MEGASCALE_GPUS
    return float(init_s)


@dataclass(frozen=True)
class RecoveryParts:
    """One fail-stop recovery, part by part (seconds); ``replace_s`` is paid only when a node must be
    replaced (``spare_swap_s`` instead when a hot spare is free)."""

    detection_s: float
    stop_s: float
    reschedule_s: float
    spare_swap_s: float
    init_s: float
    load_s: float
    load_from: str
    warmup_s: float
    init_scaling: str
    detection: str = "health-check"       # the mechanism (a DETECTION name, or "given")

    @property
    def in_place_s(self) -> float:
        return self.detection_s + self.stop_s + self.init_s + self.load_s + self.warmup_s

    def to_json(self) -> dict[str, Any]:
        return {"detection_s": self.detection_s, "stop_s": self.stop_s, "reschedule_s": self.reschedule_s,
                "spare_swap_s": self.spare_swap_s, "init_s": self.init_s, "load_s": self.load_s,
                "load_from": self.load_from, "warmup_s": self.warmup_s, "init_scaling": self.init_scaling,
                "detection": self.detection,
                "sources": dict(SOURCES)}
